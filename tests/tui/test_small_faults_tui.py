"""Small faults a new user saw (issue 25): help in the user's words, hints that follow the choice, a monitor header
and curves readable at 60x20, lr ticks in e-notation, ranks that ended shown as ended."""

from __future__ import annotations

import json
import math

import pytest
from textual.widgets import Label, Select, Static

from gpuwizard.model.preset_files import load_preset
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.base.keys import KeysScreen
from gpuwizard.tui.monitor.telemetry import TelemetryRow
from gpuwizard.tui.widgets.plots import MetricsPlot
from support.runs import CMP_RUNS, copied_run
from support.tui import SIZE, goto, monitor_on, settle, text_of, wait_until

NARROW = (60, 20)


async def open_keys(pilot, app) -> str:
    """The keys screen over the current one, its list as text; closed again after."""
    await pilot.press("f1")
    assert await wait_until(pilot, lambda: isinstance(app.screen, KeysScreen), 10)
    listed = text_of(app.screen.query_one("#keys-list"))
    await pilot.press("escape")
    await pilot.pause()
    return listed


async def test_the_keys_screen_says_where_keys_act_in_the_words_of_the_screen():
    """It said "in the focused FieldSelect": a class name; now the field by its label, the step, the log."""
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        for step, field, label in ((0, "#f-hardware-device", "device"), (2, "#f-mixed-precision", "precision")):
            await goto(pilot, app, step)
            focused = app.screen.query_one(field)
            focused.focus()
            await pilot.pause()
            classes = {type(node).__name__ for node in focused.ancestors_with_self}
            listed = await open_keys(pilot, app)
            titles = [line for line in listed.splitlines() if line.startswith("in ") or line == "everywhere"]
            assert f"in the field {label} (drop-down)" in titles and "in this step" in titles, titles
            assert not [name for name in classes if name in listed], (classes, titles)
        await goto(pilot, app, 1)
        app.screen.query_one("#f-dataset-repo-id").focus()
        await pilot.pause()
        assert "in the field dataset id (text field)" in await open_keys(pilot, app)


async def test_the_keys_screen_of_the_monitor_names_the_log(tmp_path):
    app = GpuWizardApp(run=copied_run(tmp_path, CMP_RUNS[1]))
    async with app.run_test(size=SIZE) as pilot:
        monitor = await monitor_on(pilot, app)
        listed = await open_keys(pilot, app)
        assert "in this log" in listed and "LogView" not in listed and type(monitor).__name__ not in listed


async def test_the_device_and_scheduler_hints_describe_the_option_chosen():
    """Both hints described one fixed option (cpu, slurm) whatever was chosen."""
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        step = app.screen.query_one("#gpus-step")

        async def choose(field: str, option: str) -> str:
            app.screen.query_one(f"#{field}", Select).value = option
            await settle(pilot, app)
            hint = app.screen.query_one(f"#{field}-hint", Label)
            assert hint.region.right <= step.content_region.right, "the hint is shown whole at 80 columns"
            return text_of(hint)

        for option in ("cuda", "auto", "cpu"):
            hint = await choose("f-hardware-device", option)
            assert ("CPU" in hint) == (option == "cpu") and ("GPU" in hint or "CUDA" in hint) != (option == "cpu")
            assert app.screen.preset.hardware.device == option
        for option in ("slurm", "local"):
            hint = await choose("f-launch-scheduler", option)
            assert ("sbatch" in hint) == (option == "slurm") and ("this machine" in hint) == (option == "local")
            assert app.screen.preset.launch.scheduler == option


def running_run(tmp_path):
    """A real 2-process demo run (30 metric lines), read as if at step 150 of 300 with an lr decaying from 1.1e-05
    (the curve whose ticks read 0.0000110)."""
    run = copied_run(tmp_path, CMP_RUNS[1], state="running")
    metrics = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    for i, metric in enumerate(metrics):
        metric["lr"] = 1e-5 + 1e-6 * math.cos(math.pi * i / len(metrics))
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    progress = json.loads((run.path / "progress.json").read_text())
    progress.update(step=150, eta_s=83.0, finished=False, lr=metrics[15]["lr"])
    (run.path / "progress.json").write_text(json.dumps(progress))
    return run


@pytest.mark.parametrize("size", [NARROW, SIZE])
async def test_the_monitor_header_keeps_the_rate_and_the_eta(tmp_path, size):
    app = GpuWizardApp(run=running_run(tmp_path))
    async with app.run_test(size=size) as pilot:
        monitor = await monitor_on(pilot, app)
        stats = monitor.query_one("#stats", Static)
        assert await wait_until(pilot, lambda: "150/300" in text_of(stats), 30)
        await pilot.pause()
        text = text_of(stats)
        assert "smp/s" in text and "ETA 01:23" in text, text
        assert len(text) <= stats.content_region.width and stats.region.right <= monitor.size.width, text


def labels_of(canvas) -> list[str]:
    """The words a tick margin of the curve shows, row by row."""
    return [word for y in range(canvas.size.height) for word in canvas.render_line(y).text.split()]


@pytest.mark.parametrize("size", [NARROW, SIZE])
@pytest.mark.parametrize("keys", [("v",), ("v", "v"), ("v", "v", "x")], ids=["curve", "both", "both-minutes"])
async def test_curve_ticks_never_run_together_and_the_lr_reads_in_e_notation(tmp_path, size, keys):
    app = GpuWizardApp(run=running_run(tmp_path))
    async with app.run_test(size=size) as pilot:
        monitor = await monitor_on(pilot, app)
        plots = monitor.query_one("#plots", MetricsPlot)
        assert await wait_until(pilot, lambda: len(plots.metrics) == 30, 30)
        await pilot.press(*keys, "l")
        assert await wait_until(pilot, lambda: plots.ready and plots.title_text.startswith("lr against"), 30)
        curve = plots.plot
        lrs = [m.lr for m in plots.metrics if m.lr is not None]

        def lr_ticks_drawn() -> bool:
            """The left margin shows numbers in the lr's range: the lr curve has been drawn at this size."""
            try:
                values = [float(word) for word in labels_of(curve.query_one("#margin-left"))]
            except ValueError:
                return False
            return len(values) >= 2 and all(min(lrs) <= v <= max(lrs) for v in values)

        assert await wait_until(pilot, lr_ticks_drawn, 30), labels_of(curve.query_one("#margin-left"))
        xs = [float(word) for word in labels_of(curve.query_one("#margin-bottom"))]  # run together: not a number
        lows = [m.step for m in plots.metrics] if "x" not in keys else [0.0, (plots.metrics[-1].t - plots.started) / 60]
        assert len(xs) >= 2 and xs == sorted(set(xs)), xs
        assert min(lows) <= xs[0] and xs[-1] <= max(lows), (xs, lows)
        ys = labels_of(curve.query_one("#margin-left"))
        assert len(ys) >= 2 and len(set(ys)) == len(ys), ys
        assert all("e-0" in y and len(y) <= 8 for y in ys), ys


@pytest.mark.parametrize("last_sample", ["alive", "exited"])
async def test_ranks_of_an_ended_run_show_as_ended_without_a_cpu_figure(tmp_path, last_sample):
    """After a stop the last sample may still show the ranks busy; a rank sampled as exited showed `CPU 0%`."""
    run = copied_run(tmp_path, CMP_RUNS[1], state="stopped" if last_sample == "alive" else "finished")
    samples = (run.path / "ranks.jsonl").read_text().splitlines()
    if last_sample == "alive":
        samples = [line for line in samples if '"exited"' not in line]
    (run.path / "ranks.jsonl").write_text("\n".join(samples) + "\n")
    last = json.loads(samples[-1])["ranks"]
    assert {r["status"] == "exited" for r in last} == {last_sample == "exited"}
    app = GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        monitor = await monitor_on(pilot, app)
        assert await wait_until(pilot, lambda: len(monitor.query(TelemetryRow)) == len(last), 30)
        await pilot.pause()
        shown = {row.key: text_of(row.value) for row in monitor.query(TelemetryRow)}
        assert all(text.startswith("ended") and "CPU" not in text for text in shown.values()), shown
        assert sorted(shown) == sorted(f"rank{r['rank']}" for r in last)
