"""The Runs screen (history: open, mark and compare, resume) and the compare view with its loss curves."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import Worker, WorkerState, get_current_worker

from gpuwizard.core.codes import ACTIVE_STATES
from gpuwizard.core.errors import UserError
from gpuwizard.core.safetext import safe_line, safe_text
from gpuwizard.core.table import column_widths
from gpuwizard.core.units import counted
from gpuwizard.runner.control.follow import clock
from gpuwizard.tui.base.messages import CompareReady, OpenSweep, RunsLoaded, RunStarted
from gpuwizard.tui.widgets.fields import KeyBar

if TYPE_CHECKING:
    from textual import getters
    from textual_plot import PlotWidget

    from gpuwizard.analysis.compare.runs import Comparison
    from gpuwizard.runs.rundir import RunDir
    from gpuwizard.tui.base.apphost import AppHost

COLUMNS = ("*", "state", "on", "step", "time", "smp/s", "run")
"""The run id is last and whole (it names the preset): short columns first, so none is pushed off at 80 columns."""
REFRESH_S = 2.0
"""How often the open screen reads the history again (an ended run's files are not read again: runs/listing.py)."""


class RunsScreen(Screen[None]):
    """Every run, newest first; the history is read off the UI thread."""

    if TYPE_CHECKING:
        app = getters.app(AppHost)  # gpuwizard's app, beyond Textual's (tui/base/apphost.py)

    HELP = (
        "Every run, newest first. The line under the table names the highlighted run whole; y copies its id. "
        "A probe's short measurement runs are hidden: p shows or hides them."
    )
    BINDINGS = [
        Binding("enter", "open", "Open", key_display="enter", priority=True),  # before the table's own enter
        Binding("space", "mark", "Mark"),
        Binding("c", "compare", "Compare"),
        Binding("r", "resume", "Resume"),
        Binding("w", "sweeps", "Sweeps"),
        Binding("y", "copy_id", "Copy id"),
        Binding("p", "probes", "Probes"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        """The rows shown (probe runs only with show_probes)."""
        self.history: list[dict[str, Any]] = []
        self.sweeps: list[str] = []
        """The sweep ids, newest first."""
        self.show_probes = False
        self.hidden_probes = 0
        self.marked: set[str] = set()
        self.mixed = False
        """Runs on GPUs and on the CPU in one table: each cell names its unit."""
        self.shown: tuple[list[str], list[int], list[list[str]]] = ([], [], [])
        """The run ids, column widths and cells the table holds."""
        self.closed = threading.Event()
        """Set when the screen goes: the refreshing worker ends."""

    def compose(self) -> ComposeResult:
        yield Static("Runs · newest first · space marks runs to compare · ? lists every key", id="runs-title")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="runs-hint")
        yield KeyBar()

    def on_mount(self) -> None:
        table = self.query_one("#runs-table", DataTable)
        for label in COLUMNS:
            table.add_column(label, key=label)
        table.focus()
        self.load()

    def on_unmount(self) -> None:
        self.closed.set()

    @work(thread=True, exclusive=True, group="runs", exit_on_error=False)
    def load(self) -> None:
        """The history now and every REFRESH_S while the screen is open, so new and ended runs show by themselves."""
        from gpuwizard.runs.listing import listed_runs
        from gpuwizard.runs.rundir import green_baselines, history_row
        from gpuwizard.runs.sweeps import listed_sweeps

        worker = get_current_worker()
        while not worker.is_cancelled:
            entries = listed_runs()
            green, now = green_baselines(entries), time.time()
            rows = [history_row(entry, green, now) for entry in entries]
            self.post_message(RunsLoaded(rows, listed_sweeps()))
            if self.closed.wait(REFRESH_S):
                return

    @on(Worker.StateChanged)
    def _load_failed(self, event: Worker.StateChanged) -> None:
        """A history that cannot be read at all (the runs folder itself) is said, not left as an empty table."""
        if event.worker.group == "runs" and event.state == WorkerState.ERROR:
            error = event.worker.error
            text = error.paragraph() if isinstance(error, UserError) else f"{type(error).__name__}: {error}"
            self.query_one("#runs-hint", Static).update(Text(f"the run history cannot be read: {text}"))

    @on(RunsLoaded)
    def _loaded(self, message: RunsLoaded) -> None:
        had, self.sweeps = bool(self.sweeps), message.sweeps
        if had != bool(self.sweeps):
            self.refresh_bindings()
        if message.rows != self.history:
            self.history = message.rows
            self.fill()

    def fill(self) -> None:
        """The table from the history, probe runs only when asked (p); the marks of hidden runs are dropped, and the
        highlighted run stays highlighted."""
        was = self.selected()
        self.rows = [row for row in self.history if self.show_probes or not row.get("probe")]
        self.hidden_probes = len(self.history) - len(self.rows)
        self.marked &= {row["run_id"] for row in self.rows}
        table = self.query_one("#runs-table", DataTable)
        devices = {row["device"] for row in self.rows if row["state"] != "corrupt"}
        self.mixed = len(devices) > 1  # one kind of device: the header says it, the cells count
        cells = [[safe_line(cell) for cell in self.cells(row)] for row in self.rows]
        ids, widths = [row["run_id"] for row in self.rows], column_widths(COLUMNS, cells)  # fixed before a row is drawn
        if (ids, widths) == self.shown[:2]:  # the same runs, the same widths (a refresh): only what changed is drawn
            for run_id, new, old in zip(ids, cells, self.shown[2], strict=True):
                for label, cell, before in zip(COLUMNS, new, old, strict=True):
                    if cell != before:
                        table.update_cell(run_id, label, Text(cell))
        else:
            table.clear(columns=True)
            unit = "on" if self.mixed else "GPUs" if devices == {"cuda"} else "CPUs"
            for label, width in zip(COLUMNS, widths, strict=True):
                table.add_column(unit if label == "on" else label, key=label, width=max(width, len(unit)))
            for run_id, row_cells in zip(ids, cells, strict=True):
                table.add_row(*(Text(cell) for cell in row_cells), key=run_id)  # plain text: no markup
            if was is not None and was["run_id"] in ids:
                table.move_cursor(row=ids.index(was["run_id"]), animate=False)
        self.shown = (ids, widths, cells)
        self.describe()

    def cells(self, row: dict[str, Any]) -> list[str]:
        mark = "*" if row["run_id"] in self.marked else ""
        if row["state"] == "corrupt":
            return [mark, "corrupt", "", "", "", "", f"{row['run_id']}: {row.get('problem') or 'cannot be read'}"]
        unit = (" GPU" if row["device"] == "cuda" else " CPU") if self.mixed else ""  # else the header names it
        gpus = f"{row['world_size']}{unit}" + (f"/{row['nodes']}n" if row["nodes"] > 1 else "")
        step = f"{row['step'] if row['step'] is not None else '-'}/{row['steps']}"
        rate = f"{row['samples_per_s']:.0f}" if row["samples_per_s"] else "-"
        tags = [
            tag
            for tag, on in (("smoke", row["smoke"]), ("probe", row.get("probe")), ("resumed", row["resumed_from"]))
            if on
        ]
        return [
            mark,
            row["state"],
            gpus,
            step,
            clock(row["duration_s"]),  # runner.follow's: the same time the headless status lines show
            rate,
            row["run_id"] + (f" ({', '.join(tags)})" if tags else ""),
        ]

    def describe(self) -> None:
        """The highlighted run under the table: its whole id and what the columns leave out."""
        hint = self.query_one("#runs-hint", Static)
        row = self.selected()
        if row is None:
            hint.update(
                f"no runs but {self.hidden_probes} probe runs: p shows them"
                if self.hidden_probes
                else "no runs yet: ctrl+r in the wizard starts one"
            )
            return
        if row["state"] == "corrupt":
            hint.update(safe_text(f"{row['run_id']}: {row.get('problem') or 'cannot be read'}\n{row['path']}"))
            return
        facts = [f"preset {row['preset']}"]
        if row["nodes"] > 1:
            facts.append(f"{row['world_size']} processes on {row['nodes']} nodes")
        if row["slurm_job_id"]:
            facts.append(f"SLURM job {row['slurm_job_id']}")
        if row["smoke"]:
            facts.append("smoke run")
        if row.get("probe"):
            facts.append(f"a measurement of probe {row['probe']}")
        if row["resumed_from"]:
            facts.append(f"resumed from {row['resumed_from']}")
        one = counted(1, row.get("device") or "cuda")
        facts.append(f"a green baseline on {one} exists" if row["baseline_green"] else f"never green on {one}")
        marked = f" · {len(self.marked)} marked: c compares them" if self.marked else ""
        hidden = f" · {self.hidden_probes} probe runs hidden: p shows them" if self.hidden_probes else ""
        hint.update(
            Content.assemble(
                (safe_line(row["run_id"]), "bold"),
                f"  ({len(self.rows)} run{'' if len(self.rows) == 1 else 's'}{marked}{hidden})\n",
                safe_line(" · ".join(facts)),
            )
        )

    @on(DataTable.RowHighlighted, "#runs-table")
    def _highlighted(self) -> None:
        self.describe()

    def action_copy_id(self) -> None:
        row = self.selected()
        if row is not None:
            self.app.copy_to_clipboard(row["run_id"])
            self.notify(f"Copied {row['run_id']} (OSC 52: works over SSH in most terminals).", markup=False)

    @on(DataTable.RowSelected, "#runs-table")
    def _row_selected(self) -> None:
        self.action_open()

    def selected(self) -> dict[str, Any] | None:
        table = self.query_one("#runs-table", DataTable)
        if not self.rows or table.cursor_row is None or table.cursor_row >= len(self.rows):
            return None
        return self.rows[table.cursor_row]

    def action_open(self) -> None:
        from gpuwizard.runs.rundir import RunDir

        row = self.selected()
        if row is not None:
            self.app.open_monitor(RunDir(Path(row["path"])))

    def action_mark(self) -> None:
        row = self.selected()
        if row is None or row["state"] == "corrupt":
            return
        self.marked ^= {row["run_id"]}
        table = self.query_one("#runs-table", DataTable)
        table.update_cell(row["run_id"], "*", "*" if row["run_id"] in self.marked else "")
        self.describe()

    def action_compare(self) -> None:
        from gpuwizard.runs.rundir import RunDir

        if len(self.marked) < 2:
            self.notify("Mark two or more runs with space, then press c.", severity="warning")
            return
        runs = [RunDir(Path(row["path"])) for row in self.rows if row["run_id"] in self.marked]
        self.app.push_screen(CompareScreen(runs))

    def action_resume(self) -> None:
        from gpuwizard.runs.rundir import RunDir

        row = self.selected()
        if row is None or row["state"] == "corrupt" or row["state"] in ACTIVE_STATES:
            self.notify("Pick a run that has ended.", severity="warning")
            return
        if row["smoke"]:
            self.notify("A smoke run cannot be resumed.", severity="warning")
            return
        self.notify(safe_line(f"Resuming {row['run_id']} from its last checkpoint..."), markup=False)
        self.resume(RunDir(Path(row["path"])))

    @work(thread=True, exclusive=True, group="resume", exit_on_error=False)
    def resume(self, run: RunDir) -> None:
        from gpuwizard.core.errors import UserError
        from gpuwizard.runner.launch.start import relaunch

        try:
            started = relaunch(run, resume=True)
        except UserError as exc:
            self.post_message(RunStarted(None, exc.paragraph(), []))
            return
        self.post_message(RunStarted(started.path, None, []))

    @on(RunStarted)
    def _started(self, message: RunStarted) -> None:
        from gpuwizard.runs.rundir import RunDir

        if message.error:
            self.notify(safe_text(message.error), severity="error", timeout=10, markup=False)
        elif message.run_path is not None:
            self.app.open_monitor(RunDir(message.run_path))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The sweeps key only where there is a sweep."""
        return bool(self.sweeps) if action == "sweeps" else True

    def action_sweeps(self) -> None:
        """The newest sweep's screen at once when there is one, else a pick of them, newest first."""
        from gpuwizard.runs.sweeps import sweeps_dir
        from gpuwizard.tui.dialogs.modals import SweepPicker

        def chosen(sweep_id: str | None) -> None:
            if sweep_id:
                self.post_message(OpenSweep(sweeps_dir() / sweep_id))  # the app opens it (tui/app.py)

        if len(self.sweeps) == 1:
            chosen(self.sweeps[0])
        elif self.sweeps:
            self.app.push_screen(SweepPicker(self.sweeps), chosen)

    def action_probes(self) -> None:
        self.show_probes = not self.show_probes
        self.fill()
        self.notify("Probe runs shown." if self.show_probes else "Probe runs hidden.")

    def action_back(self) -> None:
        self.app.pop_screen()


class CompareScreen(Screen[None]):
    """`gpuwizard compare` as a view: the table, the verdict, and every run's loss against samples seen."""

    HELP = "The runs are lettered A, B, ... in the table and the curves; the lines at the top name each one whole."

    BINDINGS = [
        Binding("x", "x_axis", "Samples/time"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, runs: list[RunDir]) -> None:
        super().__init__()
        self.runs = runs
        self.result: Comparison | None = None
        self.by_time = False
        self.plot: PlotWidget | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="compare-body"):
            yield Static("Comparing...", id="compare-text")
        yield KeyBar()

    def on_mount(self) -> None:
        self.compute()

    @work(thread=True, exclusive=True, group="compare", exit_on_error=False)
    def compute(self) -> None:
        from gpuwizard.analysis.compare.runs import CompareError, compare, compare_text

        try:
            result = compare(self.runs)
        except CompareError as exc:
            self.post_message(CompareReady(None, str(exc)))
            return
        self.post_message(CompareReady(result, compare_text(result)))

    @on(CompareReady)
    async def _ready(self, message: CompareReady) -> None:
        self.query_one("#compare-text", Static).update(Content(safe_text(message.text)))  # run ids: no markup
        self.result = message.result
        if self.result is None:
            return
        from textual_plot import PlotWidget

        plot = self.plot = PlotWidget(id="compare-curves")
        await self.query_one("#compare-body").mount(plot)
        plot.margin_top = 0
        self.draw()

    def draw(self) -> None:
        from gpuwizard.analysis.compare.runs import curve_label, run_labels

        result, plot = self.result, self.plot
        if result is None or plot is None:
            return
        labels = run_labels(result)
        plot.clear()
        for run in result.runs:
            points = [(p.wall_s / 60 if self.by_time else p.samples, p.loss) for p in run.curve]
            if len(points) >= 2:
                label = curve_label(run, labels[run.run_id])
                plot.plot([x for x, _ in points], [y for _, y in points], label=label)
        plot.set_xlabel("minutes" if self.by_time else "samples seen")
        from textual_plot import LegendLocation

        plot.show_legend(LegendLocation.TOPRIGHT)  # loss curves start high on the left, so the top right is free

    def action_x_axis(self) -> None:
        if self.plot is not None:
            self.by_time = not self.by_time
            self.draw()

    def action_back(self) -> None:
        self.app.pop_screen()
