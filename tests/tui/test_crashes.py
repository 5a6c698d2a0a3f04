"""What used to crash the app, driven with its Pilot at 80x24: a preset deleted while the Open dialog lists it, curves
of a loss that overflows, and a crash that must end `gpuwizard --preset X` with a non-zero exit code."""

from __future__ import annotations

import json
import math
from functools import partial

import pytest

from gpuwizard.core import paths
from gpuwizard.core.codes import ExitCode
from gpuwizard.model.preset_files import load_preset
from gpuwizard.tui import entry
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.dialogs.modals import AskText, Confirm, PresetPicker
from gpuwizard.tui.widgets.plots import METRICS, MetricsPlot
from gpuwizard.tui.wizard.screen import WizardScreen
from support.presets import user_preset
from support.runs import CMP_RUNS, copied_run
from support.tui import SIZE, monitor_on, settle, text_of, wait_until

GONE = "version: 1\nname: gone\ntrainer: demo\npolicy: demo\ndataset: {repo_id: demo/so100_reach}\n"


def option_ids(picker: PresetPicker) -> list[str | None]:
    options = picker.query_one("#presets")
    return [options.get_option_at_index(i).id for i in range(options.option_count)]


@pytest.mark.parametrize("key", ["enter", "ctrl+d", "delete"])
async def test_a_preset_deleted_while_the_open_dialog_lists_it_is_reported_and_the_list_refreshes(key):
    """Open, duplicate and delete each name the preset that is gone in one line, and the list drops it."""
    user_preset("gone", GONE)
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+o")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PresetPicker), 10)
        picker = app.screen
        assert isinstance(picker, PresetPicker)
        picker.query_one("#presets").highlighted = option_ids(picker).index("yours:gone")
        (paths.user_presets_dir() / "gone.yaml").unlink()  # another terminal: `gpuwizard presets delete gone`
        await pilot.press(key)
        if key == "ctrl+d":
            assert await wait_until(pilot, lambda: isinstance(app.screen, AskText), 10)
            await pilot.press("enter")
        elif key == "delete":
            assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 10)
            await pilot.press("y")
        assert await wait_until(pilot, lambda: "yours:gone" not in option_ids(picker), 10), option_ids(picker)
        assert app.screen is picker and app.is_running
        shown = text_of(picker.query_one("#picker-error"))
        assert shown == "Your preset 'gone' no longer exists (deleted since this list was shown).", shown
        assert "shipped:demo-cpu" in option_ids(picker), "the rest of the list is still there"
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, WizardScreen), 10)


def metric_line(t: float, step: int, loss: float, lr: float | None = 1e-3, rate: float | None = 400.0) -> str:
    """One metrics.jsonl line as the supervisor writes it (non-finite numbers as JSON's NaN and Infinity)."""
    fields = {"format": 1, "t": t, "step": step, "loss": loss, "lr": lr, "samples_per_s": rate}
    return json.dumps(fields, allow_nan=True) + "\n"


async def test_curves_of_huge_and_non_finite_values_are_drawn_without_them(tmp_path):
    """A loss of 1e308 once raised OverflowError in the plot (ValueError with -1e308 beside it) and ended the app,
    exit 0; with an lr and a rate past any scale, NaN and infinities, each curve now leaves them out and says how
    many."""
    run = copied_run(tmp_path, CMP_RUNS[1])
    metrics = run.path / "metrics.jsonl"
    last = json.loads(metrics.read_text().splitlines()[-1])
    wild = [1e308, -1e308, math.inf, -math.inf, math.nan, 1.7e308]
    with metrics.open("a") as fh:
        for i, value in enumerate(wild):
            fh.write(metric_line(last["t"] + i + 1, last["step"] + 10 * (i + 1), value, value, value))
        fh.write(metric_line(last["t"] + 20, last["step"] + 100, 0.05))
    app = GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        monitor = await monitor_on(pilot, app)
        plots = monitor.query_one("#plots", MetricsPlot)
        assert await wait_until(pilot, lambda: len(plots.metrics) == 30 + len(wild) + 1, 30)
        await pilot.press("v")
        assert await wait_until(pilot, lambda: plots.ready, 30)
        for keys, expected in (
            ([], "loss against step · 31 points, 6 left out"),
            (["g"], "log10 loss against step · 33 points, 4 left out"),  # log10(1e308) is 308: drawn
            (["x"], "log10 loss against minutes · 33 points, 4 left out"),
            (["g", "l"], "lr against minutes · 31 points, 6 left out"),
            (["l"], "samples/s against minutes · 31 points, 6 left out"),
        ):
            await pilot.press(*keys)
            shown = partial(title_shows, monitor, expected)
            assert await wait_until(pilot, shown, 10), (keys, plot_title(monitor))
        await pilot.pause(0.3)
        assert app.is_running and plots.plot is not None and plots.plot.size.height >= 8


def plot_title(monitor) -> str:
    return str(monitor.query_one("#plot-title").render())


def title_shows(monitor, expected: str) -> bool:
    return expected in plot_title(monitor)


async def test_a_flat_curve_of_large_values_is_drawn(tmp_path):
    """samples/s of exactly 1e10 at every step: textual-plot widened the flat range by 1e-6, which a float that
    large cannot hold, and raised "math domain error"."""
    run = copied_run(tmp_path, CMP_RUNS[1])
    metrics = run.path / "metrics.jsonl"
    first = json.loads(metrics.read_text().splitlines()[0])
    metrics.write_text("".join(metric_line(first["t"] + i, 10 * (i + 1), 0.1, 1e-3, 1e10) for i in range(5)))
    app = GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        monitor = await monitor_on(pilot, app)
        plots = monitor.query_one("#plots", MetricsPlot)
        assert await wait_until(pilot, lambda: len(plots.metrics) == 5, 30)
        await pilot.press("v", "l", "l")
        expected = "samples/s against step · 5 points"
        assert await wait_until(pilot, lambda: plots.ready and expected in plot_title(monitor), 30)
        await pilot.pause(0.3)
        assert app.is_running and METRICS[plots.metric] == "samples/s"


def crash_on_open(screen: WizardScreen) -> None:
    """A handler with a bug in it, as the KeyError of a deleted preset once was."""
    raise RuntimeError("a bug in a handler")


async def press_open(pilot) -> None:
    await settle(pilot, pilot.app)
    await pilot.press("ctrl+o")
    await wait_until(pilot, lambda: not pilot.app.is_running, 30)


def test_a_crash_in_a_handler_ends_gpuwizard_with_a_failure_code(monkeypatch, capsys):
    """`gpuwizard --preset X` after an unhandled exception: Textual prints the traceback and App.run returns; the
    exit code must say it failed (it was 0, as if the user had quit)."""
    monkeypatch.setattr(WizardScreen, "action_open", crash_on_open)
    real_run = GpuWizardApp.run
    monkeypatch.setattr(GpuWizardApp, "run", lambda app: real_run(app, headless=True, size=SIZE, auto_pilot=press_open))
    assert entry.run_app(preset="demo-cpu") == ExitCode.FAILED
    err = capsys.readouterr().err
    assert "RuntimeError" in err and "a bug in a handler" in err, err
