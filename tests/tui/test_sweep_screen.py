"""The Sweep screen driven with Pilot at 80x24 (issue 27): on real demo sweeps (a detached scheduler, real supervisors
and torchrun jobs on the CPU) from its rows to the comparison, the best saved and a monitor opened (b comes back),
and a sweep started from the wizard then stopped; on hand-written sweep folders a run folder that cannot be read, the
sweep ETA's arithmetic, the Runs screen's way in, the wizard's refusals of bad grids and `sweep watch` without a
terminal."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input

from gpuwizard.model.preset_files import load_preset
from gpuwizard.runner.sweep.manage import create_sweep, stop_whole
from gpuwizard.runs.sweeps import Sweep, SweepRun, listed_sweeps, read_sweep, sweeps_dir, write_sweep
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.dialogs.modals import AskGrid, AskText, Confirm, SweepPicker
from gpuwizard.tui.monitor.screen import MonitorScreen
from gpuwizard.tui.screens.runs import RunsScreen
from gpuwizard.tui.screens.sweep import SweepScreen
from gpuwizard.tui.wizard.problems import ProblemsScreen
from support.launches import marked_under
from support.presets import swept_preset
from support.tui import SIZE, goto, key_bar_fits, recorded, settle, text_of, wait_until

LRS = {"optim.lr": [1e-4, 2e-4]}
WAIT_S = 300


@pytest.fixture(autouse=True)
def stop_leftover_sweeps():
    """A failed assertion must not leave a sweep training on a shared 2-core machine."""
    yield
    for sweep_id in listed_sweeps():
        if not read_sweep(sweeps_dir() / sweep_id).ended:
            stop_whole(sweeps_dir() / sweep_id)


def by_hand(tmp_path: Path, sweep_id: str, runs: list[SweepRun]) -> Path:
    """A sweep folder as the scheduler writes it, without a scheduler."""
    folder = sweeps_dir() / sweep_id
    (folder / "runs").mkdir(parents=True)
    record = Sweep(
        sweep_id=sweep_id,
        preset="hand",
        source="hand",
        created=time.time(),
        grid={"optim.lr": [r.values["optim.lr"] for r in runs]},
        workdir=str(tmp_path),
        runs=runs,
    )
    write_sweep(folder, record)
    return folder


def run_of(index: int, state: str, path: Path | None = None) -> SweepRun:
    return SweepRun(
        index=index,
        values={"optim.lr": (index + 1) * 1e-4},
        preset_file=f"runs/{index:03d}.yaml",
        processes=1,
        device="cpu",
        state=state,  # type: ignore[arg-type]
        run_id=path.name if path else None,
        run_path=str(path) if path else None,
    )


def status_text(screen: SweepScreen) -> str:
    return text_of(screen.query_one("#sweep-status"))


@pytest.mark.slow
async def test_a_real_sweep_from_its_rows_to_the_comparison_the_best_saved_and_a_monitor_and_back(tmp_path):
    swept_preset(tmp_path, steps=30, step_time=0.05)
    made = create_sweep(load_preset("swept"), "swept", LRS, None, "final_loss", str(tmp_path))
    folder = sweeps_dir() / made.sweep_id
    app = GpuWizardApp(sweep=folder)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, SweepScreen)
        seen: list[set[str]] = [set(), set()]

        def ended() -> bool:
            for row in screen.state.rows if screen.state else []:
                seen[row["index"]].add(row["state"])
            return screen.state is not None and screen.state.sweep is not None and screen.state.sweep.ended

        assert await wait_until(pilot, ended, WAIT_S), status_text(screen)
        assert [r["state"] for r in screen.state.rows] == ["finished"] * 2, [r["error"] for r in screen.state.rows]
        assert await wait_until(pilot, lambda: screen.state.compared is not None, 30), "compared once both finished"
        assert all(s & {"queued", "starting", "running"} and "finished" in s for s in seen), seen
        table = screen.query_one("#sweep-table", DataTable)
        assert table.row_count == 2 and [str(c.label) for c in table.columns.values()][4:6] == ["final", "loss@eq"]
        best_run = screen.state.compared[1].run_id
        best = next(r for r in read_sweep(folder).runs if r.run_id == best_run)
        said = text_of(screen.query_one("#sweep-best"))
        assert f"best by final loss (smoothed): #{best.index + 1} lr={best.values['optim.lr']}" in said, said
        assert "one seed each" in said, "how sure: a single seed per value measures no noise"
        assert await wait_until(pilot, lambda: "sweep ended" in status_text(screen), 30), "its scheduler ends too"
        bar = key_bar_fits(screen)
        assert "Save best" in bar and "Stop sweep" not in bar, bar

        toasts = recorded(app)
        for attempt in range(2):
            await pilot.press("b")
            assert await wait_until(pilot, lambda: isinstance(app.screen, AskText), 10)
            app.screen.query_one(Input).value = "swept-best"
            await pilot.press("enter")
            assert await wait_until(pilot, lambda n=attempt + 1: len(toasts) == n, 30), toasts
            if attempt == 0:
                assert toasts[0].startswith("saved the best run's preset as swept-best"), toasts
                kept = load_preset("swept-best")
                assert kept.optim.lr == best.values["optim.lr"] and kept.output_dir is None
        assert "already exists" in toasts[1], toasts
        assert load_preset("swept-best") == kept, "an existing preset is never replaced"

        await pilot.press("down")
        chosen = read_sweep(folder).runs[table.cursor_row]
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen), 10)
        assert str(app.screen.run.path) == chosen.run_path
        assert "b Sweep" in key_bar_fits(app.screen), "a monitor opened from the Sweep screen shows the way back"
        await pilot.press("b")
        assert await wait_until(pilot, lambda: app.screen is screen, 10), "b returns to the Sweep screen"
        assert table.cursor_row == chosen.index and "Save best" in key_bar_fits(screen)
    assert marked_under(tmp_path / "data") == []


@pytest.mark.slow
async def test_a_sweep_started_from_the_wizard_then_stopped_leaves_no_process(tmp_path):
    swept_preset(tmp_path, steps=3000, step_time=0.05)
    app = GpuWizardApp(preset="swept")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await goto(pilot, app, 4)
        await pilot.press("f6")
        assert await wait_until(pilot, lambda: isinstance(app.screen, AskGrid), 10)
        assert app.screen.query_one("#answer", Input).value == "optim.lr=0.001,0.002", "the preset's lr and twice it"
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, SweepScreen), 120)
        screen = app.screen

        def both_step() -> bool:
            rows = screen.state.rows if screen.state else []
            return len(rows) == 2 and all(r["state"] == "running" and (r["step"] or 0) >= 5 for r in rows)

        assert await wait_until(pilot, both_step, WAIT_S), status_text(screen)
        assert await wait_until(
            pilot, lambda: "sweep ETA" in status_text(screen) and "ETA unknown" not in status_text(screen), 30
        )
        assert "scheduler running" in status_text(screen) and "queue: empty" in status_text(screen)
        assert "Stop sweep" in key_bar_fits(screen)
        scheduler = read_sweep(screen.folder).scheduler
        assert scheduler is not None and scheduler.alive()

        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 10)
        await pilot.press("y")
        stopped = lambda: screen.state is not None and [r["state"] for r in screen.state.rows] == ["stopped"] * 2  # noqa: E731
        assert await wait_until(pilot, stopped, 180), status_text(screen)
        assert marked_under(tmp_path / "data") == [], "no process of any run of the sweep"
        assert not scheduler.alive()
        assert await wait_until(pilot, lambda: "sweep stopped (u resumes it)" in status_text(screen), 10), status_text(
            screen
        )


async def test_a_run_folder_that_cannot_be_read_is_a_row_saying_so(tmp_path):
    garbled = tmp_path / "data" / "runs" / "20260101-000001-hand"
    garbled.mkdir(parents=True)
    (garbled / "status.json").write_text("{not json")
    folder = by_hand(
        tmp_path,
        "20260101-000000-hand-0000",
        [run_of(0, "finished", garbled), run_of(1, "running", tmp_path / "gone"), run_of(2, "queued")],
    )
    app = GpuWizardApp(sweep=folder)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert await wait_until(pilot, lambda: screen.state is not None and screen.query_one(DataTable).row_count, 10)
        table = screen.query_one("#sweep-table", DataTable)
        assert [str(table.get_row_at(i)[1]) for i in range(3)] == ["unreadable", "unreadable", "queued"]
        assert "status.json" in text_of(screen.query_one("#sweep-hint")), "the highlighted row says why"
        toasts = recorded(app)
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: toasts, 5) and "cannot be read" in toasts[0], toasts
        assert isinstance(app.screen, SweepScreen), "no monitor on a folder that cannot be read"
        said = status_text(screen)
        assert "scheduler not running (u resumes it)" in said and "queue: #3" in said, said
        assert "Resume" in key_bar_fits(screen)
    assert app.return_code in (None, 0), "no traceback"


async def test_a_look_that_fails_is_said_and_the_screen_goes_on_looking(tmp_path, monkeypatch):
    """A look that raised ended the poll worker without a word: the table stayed as of the look before, looking live
    (a tmux walk saw 'starting' and 'queued' for a minute after both runs had finished). Now the status line says the
    look failed, and the next look that succeeds takes the table on again."""
    from gpuwizard.tui.screens import sweep as sweep_screen

    folder = by_hand(tmp_path, "20260101-000000-hand-0000", [run_of(0, "queued"), run_of(1, "queued")])
    real, failing = sweep_screen.looked, [True]

    def looked(sweep):
        if failing[0]:
            raise OSError(5, "Input/output error")
        return real(sweep)

    monkeypatch.setattr(sweep_screen, "looked", looked)
    app = GpuWizardApp(sweep=folder)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert await wait_until(pilot, lambda: "the last look failed" in status_text(screen), 10), status_text(screen)
        assert "OSError: [Errno 5] Input/output error" in status_text(screen)
        assert screen.query_one(DataTable).row_count == 0, "nothing shown as if it had been read"
        failing[0] = False
        assert await wait_until(pilot, lambda: screen.query_one(DataTable).row_count == 2, 10)
        assert await wait_until(pilot, lambda: "the last look failed" not in status_text(screen), 10)
        assert "0 running, 2 queued, 0 ended" in status_text(screen), status_text(screen)
        toasts = recorded(app)
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: toasts, 5) and toasts[0] == "This run has not started yet.", toasts
    assert app.return_code in (None, 0), "no traceback"


async def test_the_runs_screen_opens_the_only_sweep_and_picks_among_several(tmp_path):
    first = by_hand(tmp_path, "20260101-000000-hand-0000", [run_of(0, "queued")])
    app = GpuWizardApp(preset="demo-cpu")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+l")
        assert await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.sweeps, 10)
        assert "w Sweeps" in key_bar_fits(app.screen)
        await pilot.press("w")
        assert await wait_until(pilot, lambda: isinstance(app.screen, SweepScreen), 10)
        assert app.screen.folder == first and "esc Back" in key_bar_fits(app.screen)
        await pilot.press("escape")
        newer = by_hand(tmp_path, "20260102-000000-hand-0001", [run_of(0, "queued")])
        assert await wait_until(pilot, lambda: len(app.screen.sweeps) == 2, 10)
        await pilot.press("w")
        assert await wait_until(pilot, lambda: isinstance(app.screen, SweepPicker), 10)
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, SweepScreen), 10)
        assert app.screen.folder == newer, "newest first"


async def test_the_wizard_refuses_a_bad_grid_in_the_app_before_anything_starts(tmp_path):
    swept_preset(tmp_path, steps=30, step_time=0.05)
    app = GpuWizardApp(preset="swept")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await goto(pilot, app, 3)
        assert "f6 Sweep" in key_bar_fits(app.screen)
        for grid, seeds, said in (
            ("", "", "the grid is empty"),
            ("optim.lrr=1e-4,2e-4", "", "is no field of the preset"),
            ("optim.lr=1e-4,2e-4", "two", "--seeds"),
        ):
            await pilot.press("f6")
            assert await wait_until(pilot, lambda: isinstance(app.screen, AskGrid), 10)
            app.screen.query_one("#answer", Input).value = grid
            app.screen.query_one("#seeds", Input).value = seeds
            await pilot.press("enter")
            assert await wait_until(pilot, lambda: isinstance(app.screen, ProblemsScreen), 30), grid
            shown = text_of(app.screen.query_one("#problems-list"))
            assert said in shown and "Traceback" not in shown, shown
            await pilot.press("escape")
            await settle(pilot, app)
    assert listed_sweeps() == [], "nothing started"


def test_sweep_watch_without_a_terminal_names_sweep_status(tmp_path, gw):
    folder = by_hand(tmp_path, "20260101-000000-hand-0000", [run_of(0, "queued")])
    result = gw("sweep", "watch")
    assert result.code == 2 and "needs a terminal" in result.err, result.err
    assert f"gpuwizard sweep status {folder.name}" in result.err and "Traceback" not in result.err
