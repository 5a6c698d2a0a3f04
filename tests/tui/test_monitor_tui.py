"""The live monitor driven with Pilot on real demo runs: following the tail, keys that stop a job, finished runs."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from gpuwizard.model.preset_files import load_preset
from gpuwizard.runner.launch.prepare import prepare_run
from gpuwizard.runner.launch.start import start_run
from gpuwizard.runs.rundir import list_runs
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.dialogs.modals import AskText, Confirm
from gpuwizard.tui.monitor.details import EventDetails
from gpuwizard.tui.monitor.screen import NOISE_EVERY_S, MonitorScreen
from gpuwizard.tui.widgets.fields import KeyBar
from gpuwizard.tui.widgets.logview import LogView
from gpuwizard.tui.widgets.plots import MetricsPlot
from support.presets import quick_demo
from support.runs import CMP_RUNS, copied_run
from support.tui import SIZE, monitor_on, text_of, wait_until


@pytest.fixture(autouse=True)
def stop_leftover_runs():
    """A failed assertion must not leave a demo job training on a shared 2-core machine."""
    yield
    from gpuwizard.runner.control.stopping import request_stop
    from gpuwizard.runs.rundir import list_runs

    for entry in list_runs():
        if entry.status is not None and not entry.status.final:
            request_stop(entry.run)


def at_tail(log: LogView) -> bool:
    """The pane shows the last line of the file it indexes, and there is more than one screenful."""
    return log.max_scroll_y > 0 and log.line_count == log.index.line_count and log.scroll_y == log.max_scroll_y


@pytest.mark.slow
@pytest.mark.parametrize("opened_by", ["ctrl+r", "gpuwizard run"])
async def test_a_freshly_opened_monitor_follows_the_tail_as_lines_arrive(tmp_path, opened_by):
    """The monitor opens on a run whose log is still empty: torchrun's wide banner lines arrive first (a
    horizontal scrollbar appears), then the first layout, then the steps; the pane stays on the newest line until
    the user scrolls away, and End follows again."""
    quick_demo(tmp_path, "follow", "trainer_options: {step_time_s: 0.05, log_every: 1}", steps=3000)
    run = start_run(prepare_run(load_preset("follow")))
    app = GpuWizardApp(preset=load_preset("follow")) if opened_by == "ctrl+r" else GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        if opened_by == "ctrl+r":
            app.open_monitor(run)  # what the wizard does once the run folder exists (resume replaces the screen)
        assert await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen) and app.screen.query("#log"), 30)
        log = app.screen.query_one("#log", LogView)
        assert await wait_until(pilot, lambda: log.index.line_count > 3 * log.size.height, 90)
        seen = log.index.line_count
        assert await wait_until(pilot, lambda: log.index.line_count > seen + 5 and at_tail(log), 30), (
            f"scroll {log.scroll_y} of {log.max_scroll_y}, {log.line_count} lines shown of {log.index.line_count}"
        )
        assert log.following
        await pilot.press("pageup")
        away, seen = log.scroll_y, log.index.line_count
        assert await wait_until(pilot, lambda: log.line_count > seen + 5, 30)
        assert not log.following and log.scroll_y == away < log.max_scroll_y, "scrolled away: the pane stays put"
        await pilot.press("end")
        seen = log.index.line_count
        assert await wait_until(pilot, lambda: log.index.line_count > seen + 5 and at_tail(log), 30), "End follows"
        await pilot.press("s", "y")
        assert await wait_until(pilot, lambda: app.screen.final, 60)


def key_bar_text(screen) -> str:
    return str(screen.query_one(KeyBar).render())


@pytest.mark.parametrize("state", ["running", "finished"])
async def test_the_key_bar_fits_one_line_at_80_columns_and_hides_keys_that_cannot_apply(tmp_path, state):
    run = copied_run(tmp_path, state=state)
    app = GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        monitor = await monitor_on(pilot, app)
        bar = monitor.query_one(KeyBar)
        assert bar.size.height == 1 and len(key_bar_text(monitor)) <= SIZE[0] - 2, key_bar_text(monitor)
        shown = key_bar_text(monitor)
        assert ("s Stop" in shown) == (state == "running") and ("r Resume" in shown) == (state == "finished")
        assert monitor.check_action("retry_p2p", ()) is False, "NCCL_P2P_DISABLE means nothing to a CPU (gloo) run"
        palette = [c.title for c in app.get_system_commands(monitor)]
        assert "job: Stop" in palette and not any("NCCL_P2P" in title for title in palette), palette
        assert "Sweep" not in shown and monitor.check_action("sweep", ()) is False, "no Sweep screen under it"
        await pilot.press("p", "b")
        await pilot.pause()
        assert app.screen is monitor and len(list_runs()) == 1, "p does nothing on a CPU run, b nothing without a sweep"
        bindings = {b.action: b for b in MonitorScreen.BINDINGS}
        assert all(b.description and (b.tooltip or not b.show) for b in bindings.values()), "help lists them all"


async def test_retry_without_p2p_is_offered_on_a_multi_gpu_cuda_run(tmp_path):
    run = copied_run(tmp_path, state="failed", device="cuda")
    app = GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        monitor = await monitor_on(pilot, app)
        assert monitor.check_action("retry_p2p", ()) is True
        assert "job: Retry with NCCL_P2P_DISABLE=1" in [c.title for c in app.get_system_commands(monitor)]


async def test_copy_puts_the_exact_command_on_the_clipboard(tmp_path):
    run = copied_run(tmp_path)
    app = GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        await monitor_on(pilot, app)
        await pilot.press("y")
        assert app.clipboard == run.status().command and app.clipboard.startswith("cd /tmp && PYTHONUNBUFFERED=1")


async def test_both_views_keep_a_readable_curve_and_log_at_80x24(tmp_path):
    """After a finish, `v v` once showed the curve's frame with no row left for the curve."""
    run = copied_run(tmp_path, CMP_RUNS[1])
    app = GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        monitor = await monitor_on(pilot, app)
        plots = monitor.query_one("#plots", MetricsPlot)
        assert await wait_until(pilot, lambda: len(plots.metrics) == 30, 30)
        await pilot.press("v", "v")
        assert await wait_until(pilot, lambda: plots.ready, 30)
        await pilot.pause(0.3)
        log = monitor.query_one("#log", LogView)
        assert plots.plot.size.height >= 8 and plots.plot.size.width >= 30, plots.plot.size
        assert log.scrollable_content_region.height >= 8
        title = str(monitor.query_one("#plot-title").render())
        assert title.startswith("loss against step · 30 points") and len(title) <= plots.content_region.width


async def test_the_stop_question_is_shown_whole(tmp_path):
    run = copied_run(tmp_path, state="running")
    app = GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        await monitor_on(pilot, app)
        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 10)
        await pilot.pause()
        label = app.screen.query_one(".dialog-title")
        question = app.screen.asked()
        assert label.region.right <= app.screen.query_one(".dialog").content_region.right, "the question fits"
        assert label.size.height >= len(textwrap.wrap(question, label.size.width)) > 1, "it wraps instead of cut"
        assert question.startswith(f"Stop run {run.run_id} at step 300/300?")
        # the run goes on under the question, and so does the step it names (issue 39 item 6: it kept the first)
        progress = json.loads((run.path / "progress.json").read_text())
        (run.path / "progress.json").write_text(json.dumps(progress | {"step": 310, "total": 600}))
        shown = app.screen.query_one("#question")
        assert await wait_until(pilot, lambda: "at step 310/600?" in text_of(shown), 15), text_of(shown)
        await pilot.press("n")
        assert isinstance(app.screen, MonitorScreen)


def banner_text(screen) -> str:
    return str(screen.query_one("#banner").render())


@pytest.mark.slow
async def test_the_hang_banner_keeps_its_clock_and_whole_sentences_and_d_shows_every_ranks_stack(tmp_path):
    quick_demo(
        tmp_path,
        "stalls",
        "trainer_options: {inject_hang: {rank: 1, step: 15}, step_time_s: 0.02}\nmonitor: {hang_timeout_s: 4}",
    )
    app = GpuWizardApp(run=start_run(prepare_run(load_preset("stalls"))))
    async with app.run_test(size=SIZE) as pilot:
        monitor = await monitor_on(pilot, app)
        assert await wait_until(pilot, lambda: "hang suspected: no progress for" in banner_text(monitor), 90)
        first = re.search(r"no progress for (\d+):(\d+)", banner_text(monitor))
        stats = str(monitor.query_one("#stats").render())
        assert "stalled" in stats and "ETA" not in stats, stats
        assert await wait_until(
            pilot, lambda: re.search(r"no progress for (\d+):(\d+)", banner_text(monitor)).groups() > first.groups(), 10
        ), "the banner's clock runs while the hang lasts"
        body = banner_text(monitor).split("\n")[1:]
        assert body and "".join(body).rstrip().endswith((".", "… e: all of it")), body
        assert "rank 1" in banner_text(monitor), "the suspect rank shows at 80x24"
        assert "d stacks" in monitor.query_one("#banner").border_subtitle
        await pilot.press("d")
        assert await wait_until(pilot, lambda: isinstance(app.screen, EventDetails), 60), (
            "the stacks open by themselves"
        )
        text = str(app.screen.query_one("#details-text").render())
        assert "rank 0 main thread" in text and "rank 1 main thread" in text and "_injected_hang" in text
        files = [line.strip() for line in text.splitlines() if line.strip().endswith(".json")]
        assert files and all(Path(f).is_file() for f in files), "and where every frame is kept"
        await pilot.press("escape")
        await pilot.press("s", "y")
        assert await wait_until(pilot, lambda: monitor.final, 60)


@pytest.mark.slow
async def test_a_stop_during_a_checkpoint_write_shows_its_wait_and_s_again_forces_it(tmp_path):
    quick_demo(
        tmp_path,
        "slowsave",
        "trainer_options: {step_time_s: 0.02, log_every: 5, save_every: 20, checkpoint_time_s: 30}",
        steps=3000,
    )
    run = start_run(prepare_run(load_preset("slowsave")))
    app = GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        monitor = await monitor_on(pilot, app)
        assert await wait_until(pilot, lambda: "Saving checkpoint at step 20 ->" in run.log.read_text(), 120)
        await pilot.press("s", "y")
        waiting = "the stop waits for the checkpoint being written: 00:"
        assert await wait_until(pilot, lambda: waiting in banner_text(monitor), 30), banner_text(monitor)
        assert "of at most 15:00" in banner_text(monitor) and monitor.status.state == "stopping"
        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 10)
        assert app.screen.question.startswith("Stop at once? The checkpoint being written is lost")
        await pilot.press("y")
        assert await wait_until(pilot, lambda: monitor.final, 25), "forced: it does not wait the 30 s write out"
    assert not (tmp_path / "out-slowsave" / "checkpoints" / "000020" / "model.pt").exists()


@pytest.mark.slow
async def test_r_on_a_finished_run_offers_to_continue_it_and_does(tmp_path):
    quick_demo(tmp_path, "more", "trainer_options: {log_every: 5}", steps=20)
    run = start_run(prepare_run(load_preset("more")))
    app = GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        first = await monitor_on(pilot, app)
        assert await wait_until(pilot, lambda: first.final, 120) and first.status.state == "finished"
        assert "r continues it to more steps" in banner_text(first)
        await pilot.press("r")
        assert await wait_until(pilot, lambda: isinstance(app.screen, AskText), 10)
        assert app.screen.title_text == (
            f"Run {run.run_id} finished all its 20 steps. Continue it to more optim.steps (now 20)? The demo's lr is "
            "flat after its warmup, so the extra steps train at the same lr, from the saved optimizer state."
        )
        await pilot.press("ctrl+a", "ctrl+k", "2", "0", "enter")
        await pilot.pause(0.5)
        assert app.screen is first and len(list_runs()) == 1, "20 more steps of nothing: refused, nothing started"
        await pilot.press("r")
        assert await wait_until(pilot, lambda: isinstance(app.screen, AskText), 10)
        await pilot.press("ctrl+a", "ctrl+k", "4", "0", "enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen) and app.screen is not first, 90)
        second = app.screen
        assert await wait_until(pilot, lambda: second.final, 120) and second.status.state == "finished"
    log = second.run.log.read_text()
    assert "Resuming from step 20" in log and "step 40/40" in log and second.status.resumed_from == run.run_id


async def test_a_poll_that_arrives_while_the_monitor_is_torn_down_is_dropped(tmp_path):
    """ctrl+q detaches the monitor's widgets while the follower's last poll may still be queued: it must not mount
    a telemetry row into a detached panel (CI: MountError on `attach`, then a traceback at exit)."""
    from gpuwizard.runner.control.follow import RunUpdate
    from gpuwizard.runs.records import GpuSample
    from gpuwizard.tui.base.messages import RunPolled
    from gpuwizard.tui.monitor.telemetry import Telemetry, TelemetryRow

    run = copied_run(tmp_path, state="running")
    app = GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        monitor = await monitor_on(pilot, app)
        telemetry = monitor.query_one("#telemetry", Telemetry)
        await telemetry.remove()  # what the teardown does to the panel before the queued poll is handled
        monitor.post_message(RunPolled(RunUpdate(gpu=[GpuSample(t=1.0, index=7, utilization=50.0)]), 0))
        await pilot.pause()
        await pilot.pause()
        assert app.is_running and not list(telemetry.query(TelemetryRow)), "the poll was dropped, nothing raised"


@pytest.mark.slow
async def test_a_gauged_run_shows_its_noise_scale_with_its_interval(tmp_path):
    """Issue 26: the live monitor shows B_noise during a gauged run, from the run's own gauge file (the demo's noise
    task on 2 gloo processes through torchrun, its weights held so the figure settles); read a few lines at a time,
    once the run ended it is the figure of the whole file."""
    from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE, estimate, read_gauge
    from gpuwizard.model import trust
    from support.presets import NOISE_PRESET

    path = tmp_path / "noisy.yaml"
    path.write_text(
        NOISE_PRESET.format(
            name="noisy", root=tmp_path, gpus=2, batch=256, accum=1, steps=400, dim=4, sigma=1.0, offset=0.25
        )
    )
    preset = load_preset(str(path))
    trust.grant_for_session(preset)
    run = start_run(prepare_run(preset))
    app = GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        monitor = await monitor_on(pilot, app)
        stats = monitor.query_one("#stats")
        assert await wait_until(pilot, lambda: "B~" in text_of(stats), 300), text_of(stats)
        shown = text_of(stats)
        assert re.search(r"B~[\d.e+]+ \([\d.e+]+-[\d.e+]+\)", shown), shown
        found = estimate(read_gauge(run.path / GAUGE_FILE).steps)
        assert found is not None and found.low is not None and found.high is not None
        figure = float(re.search(r"B~([\d.e+]+)", shown)[1])
        assert found.low / 2 <= figure <= found.high * 2, "the figure of this run's gauge file, a few steps earlier"
        await pilot.press("s", "y")
        assert await wait_until(pilot, lambda: monitor.final, 120)
        ended = estimate(read_gauge(run.path / GAUGE_FILE).steps)
        final_figure = ended.short() if ended is not None else None
        assert final_figure is not None
        assert await wait_until(pilot, lambda: final_figure in text_of(stats), 3 * NOISE_EVERY_S), (
            f"the new lines' figure is the whole file's: {final_figure} in {text_of(stats)!r}"
        )
