"""After a real probe (1 and 2 gloo processes of the demo, `gpuwizard probe --steps 40`), at 80x24 (issue 25): the
Scaling step names the recommended configuration and how sure it is, and the Runs screen hides the probe's runs
until p shows them (the key in the key bar and in ? help)."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from gpuwizard.model.preset_files import load_preset
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.screens.runs import RunsScreen
from gpuwizard.tui.wizard.screen import STEPS
from support.presets import demo_preset
from support.tui import goto, key_bar_fits, settle, text_of, wait_until

pytestmark = pytest.mark.slow
SCALING = [name for name, _ in STEPS].index("scaling")


def probed(gw, name: str) -> None:
    demo_preset(name, "batch: {size: 4}\noptim: {lr: 1.0e-3, steps: 200}\ntrainer_options: {episodes: 4}")
    result = gw("probe", "--trust", name, "--gpus", "1,2", "--batch", "4", "--steps", "40")
    assert result.code == 0, result.err


async def test_the_scaling_step_names_the_newest_probes_recommendation(gw):
    probed(gw, "tui-rec")
    app = GpuWizardApp(preset=load_preset("tui-rec"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await goto(pilot, app, SCALING)
        line = app.screen.query_one("#probe-recommendation")
        assert await wait_until(pilot, lambda: line.display and "probe recommends" in text_of(line), 60)
        said = " ".join(text_of(line).split())
        assert said.startswith("probe recommends 1 process at batch 4 (") or said.startswith(
            "probe recommends 2 processes at batch 4 ("
        ), said
        assert "samples/s, judged in " in said and said.endswith(("; sure", "; likely", "; cannot tell")), said


async def test_the_runs_screen_hides_probe_runs_until_p_shows_them(gw):
    probed(gw, "tui-hide")
    app = GpuWizardApp(preset=load_preset("tui-hide"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+l")
        assert await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.history, 30)
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        table = screen.query_one("#runs-table", DataTable)
        assert table.row_count == 0 and screen.hidden_probes == 4  # the grid's 2 runs, then both again
        assert text_of(screen.query_one("#runs-hint")) == "no runs but 4 probe runs: p shows them"
        assert "p Probes" in key_bar_fits(screen)
        await pilot.press("p")
        assert await wait_until(pilot, lambda: table.row_count == 4, 30)
        assert all("(probe)" in str(table.get_row_at(i)[-1]) for i in range(2))
        assert "p shows" not in text_of(screen.query_one("#runs-hint"))
        await pilot.press("p")
        assert await wait_until(pilot, lambda: table.row_count == 0, 30)
        assert "p shows or hides them" in screen.HELP
        await pilot.press("question_mark")
        await pilot.pause()
        assert await wait_until(pilot, lambda: "Probes" in help_text(app), 30), help_text(app)


def help_text(app: GpuWizardApp) -> str:
    """What the ? help shows (the screen it opened)."""
    from textual.widgets import Static

    return " ".join(text_of(w) for w in app.screen.query(Static))
