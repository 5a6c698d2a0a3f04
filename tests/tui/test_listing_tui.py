"""The Open dialog and the Runs screen at 80x24 (issues 25 and 29): a CPU preset's row counts processes, not GPUs; the
Runs screen names the unit of its workers column and picks up runs that start or end while it is open."""

from __future__ import annotations

import shutil

from textual.widgets import DataTable

from gpuwizard.core import paths
from gpuwizard.core.codes import RunState
from gpuwizard.model.preset_files import load_preset
from gpuwizard.runs.rundir import RunDir
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.dialogs.modals import PresetPicker
from gpuwizard.tui.screens.runs import RunsScreen
from support.data import DATA
from support.presets import user_preset
from support.tui import SIZE, settle, wait_until

SAMPLE = DATA / "runs" / "20261201-005642-demo-cmp"
"""A real finished demo run on 1 CPU process."""


def prompts(picker: PresetPicker) -> dict[str, str]:
    options = picker.query_one("#presets")
    return {
        str(option.id): str(option.prompt)
        for option in (options.get_option_at_index(i) for i in range(options.option_count))
    }


async def test_the_open_dialog_counts_a_cpu_presets_processes_and_names_an_invalid_one():
    user_preset("broken", (paths.shipped_presets_dir() / "demo-cpu.yaml").read_text().replace("gpus: 2", "gpus: x"))
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+o")
        assert await wait_until(pilot, lambda: isinstance(app.screen, PresetPicker), 30)
        rows = prompts(app.screen)
        assert " 2 processes " in rows["shipped:demo-cpu"] and "GPU" not in rows["shipped:demo-cpu"], rows
        assert " 1 GPU " in rows["shipped:demo-gpu"], rows
        assert rows["yours:broken"].split() == ["broken", "yours", "(invalid:", "enter", "shows", "why)"]


def copied(run_id: str) -> RunDir:
    run = RunDir(paths.runs_dir() / run_id)
    shutil.copytree(SAMPLE, run.path)
    run.update_status(run_id=run_id)
    return run


async def test_the_runs_screen_names_its_workers_and_picks_up_runs_while_open():
    first = copied("20261201-010000-demo-cmp")
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+l")
        assert await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen) and len(app.screen.rows) == 1, 30)
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        table = screen.query_one("#runs-table", DataTable)
        assert [str(c.label) for c in table.ordered_columns][2] == "CPUs", "CPU runs count processes, not GPUs"
        assert str(table.get_row(first.run_id)[2]) == "1"

        second = copied("20261201-020000-demo-cmp")  # a run started from another terminal
        second.update_status(state=RunState.RUNNING, ended=None, exit_code=None)
        assert await wait_until(pilot, lambda: len(screen.rows) == 2, 30), "the new run shows by itself"
        table.move_cursor(row=1)  # the older run stays highlighted while the rows change
        second.update_status(state=RunState.STOPPED, stop_reason="user")
        assert await wait_until(pilot, lambda: str(table.get_row(second.run_id)[1]) == "stopped", 30)
        assert screen.selected() is not None and screen.selected()["run_id"] == first.run_id
