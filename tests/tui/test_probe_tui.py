"""The probe from the wizard's Scaling step at 80x24, driven with Pilot (issue 21): F5 runs the real default probe
(1 and 2 gloo processes x two batches of the demo) with a live table and progress, the predicted rows and
the time to the same loss, a finished probe fills the estimates with "probed", and `c` cancels with nothing left
running and nothing kept but probe.json."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios

import psutil
import pytest
from textual.widgets import DataTable, ProgressBar

from gpuwizard.analysis.probe.results import ProbeResult, probes_dir
from gpuwizard.model.preset_files import load_preset
from gpuwizard.runs.rundir import alive_processes, list_runs
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.screens.probe import ProbeScreen
from gpuwizard.tui.wizard.screen import STEPS
from support.cli import poll_until
from support.presets import demo_preset
from support.tui import goto, key_bar_fits, settle, text_of, wait_until

pytestmark = pytest.mark.slow
SCALING = [name for name, _ in STEPS].index("scaling")


def estimates(app: GpuWizardApp) -> str:
    return text_of(app.screen.query_one("#estimates"))


async def open_probe(pilot, app: GpuWizardApp) -> ProbeScreen:
    await settle(pilot, app)
    await goto(pilot, app, SCALING)
    assert "f5 Probe" in key_bar_fits(app.screen)
    assert "probed" not in estimates(app)
    await pilot.press("f5")
    assert await wait_until(pilot, lambda: isinstance(app.screen, ProbeScreen), 30)
    return app.screen  # type: ignore[return-value]


async def test_f5_on_the_scaling_step_probes_and_the_estimates_use_it():
    demo_preset("tui-probe", "batch: {size: 4}\noptim: {lr: 1.0e-3, steps: 200}\ntrainer_options: {episodes: 4}")
    app = GpuWizardApp(preset=load_preset("tui-probe"))
    async with app.run_test(size=(80, 24)) as pilot:
        probe = await open_probe(pilot, app)
        table = probe.query_one("#probe-table", DataTable)
        assert await wait_until(pilot, lambda: table.row_count >= 1 and not probe.done, 300), "a live first row"
        assert 0 < probe.query_one("#probe-progress", ProgressBar).percentage < 1
        key_bar_fits(probe)
        assert await wait_until(pilot, lambda: probe.done, 900)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [(r[0], r[1], r[-1]) for r in rows[:4]] == [
            ("1", "4", "yes"),
            ("1", "8", "yes"),
            ("2", "4", "yes"),
            ("2", "8", "yes"),
        ], "the measured rows first"
        (folder,) = probes_dir().iterdir()
        model = ProbeResult.model_validate_json((folder / "probe.json").read_text()).throughput
        assert model is not None
        # then the model's: twice the largest batch where the fit tells a sample's cost, 4 processes only where the
        # cores hold them and the fit tells the all-reduce's cost
        per_sample, comm = model.median.per_sample_s is not None, model.median.comm_s is not None
        four = (os.cpu_count() or 1) >= 4 and comm
        expected = [
            (str(g), str(b), "predicted")
            for g in (1, 2, 4)
            for b in (4, 8, 16)
            if (g == 4 and four or g < 4 and b == 16) and (b < 16 or per_sample)
        ]
        assert [(r[0], r[1], r[-1]) for r in rows[4:]] == expected, model
        assert all(float(r[2]) > 0 for r in rows), rows
        assert all(r[-2].endswith("x") for r in rows), "each row's time to the same loss"
        assert probe.query_one("#probe-progress", ProgressBar).percentage == 1
        verdict = text_of(probe.query_one("#probe-verdict"))
        said = verdict.startswith(("Recommended: ", "Cannot tell here whether 2 processes pay"))
        assert said and "2 processes:" in verdict, "the decision first, then why"
        assert "Time to the same loss (B_noise ~" in verdict and "throughput model: step time" in verdict, verdict
        assert "B_noise (gradient noise scale" in verdict and "memory model: mem(b) = " in verdict, verdict
        assert probe.query_one("#probe-verdict-box").has_focus, "the verdict scrolls with the keys once it is there"
        assert "the estimates now use it" in text_of(probe.query_one("#probe-status"))
        keys = key_bar_fits(probe)
        assert "esc Back" in keys and "Cancel" not in keys, "an ended probe offers only what applies"
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, ProbeScreen), 30)
        assert await wait_until(pilot, lambda: estimates(app).count("· probed") == 2, 60), estimates(app)
    assert json.loads((folder / "probe.json").read_text())["state"] == "finished"


async def test_cancelling_the_probe_screen_leaves_nothing_running():
    demo_preset(
        "tui-stop",
        "batch: {size: 4}\noptim: {lr: 1.0e-3, steps: 200}\ntrainer_options: {episodes: 4, step_time_s: 0.05}",
    )
    app = GpuWizardApp(preset=load_preset("tui-stop"))
    async with app.run_test(size=(80, 24)) as pilot:
        probe = await open_probe(pilot, app)
        running = lambda: any(e.status and e.status.state == "running" for e in list_runs("tui-stop"))  # noqa: E731
        assert await wait_until(pilot, running, 300), "the first configuration started"
        assert "c Cancel probe" in key_bar_fits(probe)
        await pilot.press("c")
        assert "Cancel" not in key_bar_fits(probe), "a cancel asked for is not offered again"
        await pilot.press("escape")  # refused while it runs (it is cancelling already)
        assert await wait_until(pilot, lambda: probe.done, 180)
        assert isinstance(app.screen, ProbeScreen), "escape while running did not leave the probe running unseen"
        assert text_of(probe.query_one("#probe-status")).startswith("stopped; nothing of it is left running")
        assert probe.query_one("#probe-progress", ProgressBar).percentage == 0, "a stopped configuration is no progress"
        keys = key_bar_fits(probe)
        assert "esc Back" in keys and "Cancel" not in keys
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, ProbeScreen), 30)
        await settle(pilot, app)
        assert "probed" not in estimates(app), "a stopped probe is not an estimate"
    (folder,) = probes_dir().iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["probe.json"], "the scratch output is gone"
    assert json.loads((folder / "probe.json").read_text())["state"] == "stopped"
    for entry in list_runs("tui-stop"):
        assert entry.status.final and not alive_processes(entry.run, entry.status)
    left = [p for p in psutil.process_iter(["cmdline"]) if "tui-stop" in " ".join(p.info["cmdline"] or [])]
    assert left == []


def test_a_dropped_ssh_session_mid_probe_stops_it_with_nothing_left():
    """The wizard in a terminal of its own (an SSH login), probing, when the connection drops: the kernel hangs the
    terminal up (SIGHUP); the running configuration is stopped and probe.json says so before the app ends."""
    demo_preset(
        "tui-hangup",
        "batch: {size: 4}\noptim: {lr: 1.0e-3, steps: 200}\ntrainer_options: {episodes: 4, step_time_s: 0.05}",
    )
    terminal, pane = pty.openpty()
    fcntl.ioctl(pane, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    app = subprocess.Popen(
        ["setsid", "--ctty", "--wait", sys.executable, "-m", "gpuwizard", "--preset", "tui-hangup"],
        stdin=pane,
        stdout=pane,
        stderr=pane,
        env={**os.environ, "TERM": "xterm-256color"},
    )
    os.close(pane)
    os.set_blocking(terminal, False)
    shown = bytearray()

    def screen_shows(text: bytes) -> bool:
        try:
            while chunk := os.read(terminal, 65536):
                shown.extend(chunk)
        except OSError:
            pass
        return text in shown

    running = lambda: any(e.status and e.status.state == "running" for e in list_runs("tui-hangup"))  # noqa: E731
    try:
        poll_until(lambda: screen_shows(b"Next"), 120, "the wizard's first frame")
        for _ in range(SCALING):
            os.write(terminal, b"\x0e")  # ctrl+n
        poll_until(lambda: screen_shows(b"linear_lr"), 60, "the Scaling step")
        os.write(terminal, b"\x1b[15~")  # F5
        poll_until(running, 300, "the first configuration started")
        os.close(terminal)  # the connection drops
        app.wait(timeout=180)
        (folder,) = probes_dir().iterdir()
        record = json.loads((folder / "probe.json").read_text())
        assert record["state"] == "stopped" and record["ended"] is not None
        assert sorted(p.name for p in folder.iterdir()) == ["probe.json"], "the scratch output is gone"
        for entry in list_runs("tui-hangup"):
            assert entry.status.final and not alive_processes(entry.run, entry.status)
    finally:
        if app.poll() is None:
            app.kill()
        for entry in list_runs("tui-hangup"):
            if entry.status is not None and not entry.status.final:
                from gpuwizard.runner.control.stopping import request_stop

                request_stop(entry.run)  # a failed run of this test leaves no job training
