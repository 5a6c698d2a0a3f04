"""The Runs screen (history: open, mark and compare, resume) and the compare view with its loss curves."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker, WorkerState

from gpuwizard.errors import UserError
from gpuwizard.runner.follow import clock
from gpuwizard.tui.messages import CompareReady, RunsLoaded, RunStarted
from gpuwizard.tui.widgets import KeyBar

COLUMNS = ("*", "state", "run", "preset", "GPUs", "step", "time", "smp/s", "baseline")


def short_id(run_id: str, preset: str) -> str:
    """The run id without its preset's name (the preset has its own column): 20261201-010717."""
    return run_id.removesuffix(f"-{preset}")


class RunsScreen(Screen[None]):
    """Every run, newest first; the history is read off the UI thread."""

    BINDINGS = [
        Binding("enter", "open", "Open"),
        Binding("space", "mark", "Mark"),
        Binding("c", "compare", "Compare marked"),
        Binding("r", "resume", "Resume"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.marked: set[str] = set()

    def compose(self) -> ComposeResult:
        yield Static("Runs · newest first · space marks runs to compare", id="runs-title")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="runs-hint")
        yield KeyBar()

    def on_mount(self) -> None:
        table = self.query_one("#runs-table", DataTable)
        table.add_columns(*COLUMNS)
        table.focus()
        self.load()

    @work(thread=True, exclusive=True, group="runs", exit_on_error=False)
    def load(self) -> None:
        from gpuwizard.runner.rundir import green_baselines, history_row, list_runs

        entries = list_runs()
        green, now = green_baselines(entries), time.time()
        self.post_message(RunsLoaded([history_row(entry, green, now) for entry in entries]))

    @on(Worker.StateChanged)
    def _load_failed(self, event: Worker.StateChanged) -> None:
        """A history that cannot be read at all (the runs folder itself) is said, not left as an empty table."""
        if event.worker.group == "runs" and event.state == WorkerState.ERROR:
            error = event.worker.error
            text = error.paragraph() if isinstance(error, UserError) else f"{type(error).__name__}: {error}"
            self.query_one("#runs-hint", Static).update(Text(f"the run history cannot be read: {text}"))

    @on(RunsLoaded)
    def _loaded(self, message: RunsLoaded) -> None:
        self.rows = message.rows
        table = self.query_one("#runs-table", DataTable)
        table.clear()
        for row in self.rows:
            table.add_row(*map(Text, self.cells(row)), key=row["run_id"])  # folder text is never markup
        hint = "no runs yet: ctrl+r in the wizard starts one" if not self.rows else f"{len(self.rows)} runs"
        self.query_one("#runs-hint", Static).update(hint)

    def cells(self, row: dict[str, Any]) -> list[str]:
        mark = "*" if row["run_id"] in self.marked else ""
        if row["state"] == "corrupt":
            return [mark, "corrupt", row["run_id"], row.get("problem") or "", "", "", "", "", ""]
        gpus = f"{row['world_size']}" + (f" ({row['nodes']} nodes)" if row["nodes"] > 1 else "")
        if row["slurm_job_id"]:
            gpus += " slurm"
        step = f"{row['step'] if row['step'] is not None else '-'}/{row['steps']}"
        rate = f"{row['samples_per_s']:.0f}" if row["samples_per_s"] else "-"
        smoke = " smoke" if row["smoke"] else ""
        resumed = f" <- {short_id(row['resumed_from'], row['preset'])}" if row["resumed_from"] else ""
        baseline = "green" if row["baseline_green"] else "never"
        return [
            mark,
            row["state"] + smoke,
            short_id(row["run_id"], row["preset"]) + resumed,
            row["preset"],
            gpus,
            step,
            clock(row["duration_s"]),  # runner.follow's: the same time the headless status lines show
            rate,
            baseline,
        ]

    @on(DataTable.RowSelected, "#runs-table")
    def _row_selected(self) -> None:
        self.action_open()

    def selected(self) -> dict[str, Any] | None:
        table = self.query_one("#runs-table", DataTable)
        if not self.rows or table.cursor_row is None or table.cursor_row >= len(self.rows):
            return None
        return self.rows[table.cursor_row]

    def action_open(self) -> None:
        from gpuwizard.runner.rundir import RunDir

        row = self.selected()
        if row is not None:
            self.app.open_monitor(RunDir(Path(row["path"])))

    def action_mark(self) -> None:
        row = self.selected()
        if row is None or row["state"] == "corrupt":
            return
        self.marked ^= {row["run_id"]}
        table = self.query_one("#runs-table", DataTable)
        table.update_cell(row["run_id"], table.ordered_columns[0].key, "*" if row["run_id"] in self.marked else "")
        self.query_one("#runs-hint", Static).update(f"{len(self.marked)} marked: c compares them")

    def action_compare(self) -> None:
        from gpuwizard.runner.rundir import RunDir

        if len(self.marked) < 2:
            self.notify("Mark two or more runs with space, then press c.", severity="warning")
            return
        runs = [RunDir(Path(row["path"])) for row in self.rows if row["run_id"] in self.marked]
        self.app.push_screen(CompareScreen(runs))

    def action_resume(self) -> None:
        from gpuwizard.runner.rundir import RunDir

        row = self.selected()
        if row is None or row["state"] in ("corrupt", "running", "starting", "stopping"):
            self.notify("Pick a run that has ended.", severity="warning")
            return
        if row["smoke"]:
            self.notify("A smoke run cannot be resumed.", severity="warning")
            return
        self.notify(f"Resuming {row['run_id']} from its last checkpoint...")
        self.resume(RunDir(Path(row["path"])))

    @work(thread=True, exclusive=True, group="resume", exit_on_error=False)
    def resume(self, run: Any) -> None:
        from gpuwizard.errors import UserError
        from gpuwizard.runner.launch import relaunch

        try:
            started = relaunch(run, resume=True)
        except UserError as exc:
            self.post_message(RunStarted(None, exc.paragraph(), []))
            return
        self.post_message(RunStarted(started.path, None, []))

    @on(RunStarted)
    def _started(self, message: RunStarted) -> None:
        from gpuwizard.runner.rundir import RunDir

        if message.error:
            self.notify(message.error, severity="error", timeout=10, markup=False)
        elif message.run_path is not None:
            self.app.open_monitor(RunDir(message.run_path))

    def action_back(self) -> None:
        self.app.pop_screen()


class CompareScreen(Screen[None]):
    """`gpuwizard compare` as a view: the table, the verdict, and every run's loss against samples seen."""

    BINDINGS = [
        Binding("x", "x_axis", "Samples/time"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, runs: list[Any]) -> None:
        super().__init__()
        self.runs = runs
        self.result: Any = None
        self.by_time = False
        self.plot: Any = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="compare-body"):
            yield Static("Comparing...", id="compare-text")
        yield KeyBar()

    def on_mount(self) -> None:
        self.compute()

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False)
    def compute(self) -> None:
        from gpuwizard.compare import CompareError, compare, compare_text

        try:
            result = compare(self.runs)
        except CompareError as exc:
            self.post_message(CompareReady(None, str(exc)))
            return
        self.post_message(CompareReady(result, compare_text(result)))

    @on(CompareReady)
    async def _ready(self, message: CompareReady) -> None:
        self.query_one("#compare-text", Static).update(message.text)
        self.result = message.result
        if self.result is None:
            return
        from textual_plot import PlotWidget

        self.plot = PlotWidget(id="compare-curves")
        await self.query_one("#compare-body").mount(self.plot)
        self.plot.margin_top = 0
        self.draw()

    def draw(self) -> None:
        self.plot.clear()
        for run in self.result.runs:
            points = [(p.wall_s / 60 if self.by_time else p.samples, p.loss) for p in run.curve]
            if len(points) >= 2:
                self.plot.plot([x for x, _ in points], [y for _, y in points], label=f"{run.gpus}: {run.run_id[-20:]}")
        self.plot.set_xlabel("minutes" if self.by_time else "samples seen")
        self.plot.show_legend()

    def action_x_axis(self) -> None:
        if self.plot is not None:
            self.by_time = not self.by_time
            self.draw()

    def action_back(self) -> None:
        self.app.pop_screen()
