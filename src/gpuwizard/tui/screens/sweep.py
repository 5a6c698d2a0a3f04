"""The Sweep screen: every run of a sweep live (its values, device, state, step, loss, ETA), the queue, the sweep's own
ETA and its scheduler; at the end the runs compared and the best named; stop, resume and save the best from here."""

from __future__ import annotations

import threading
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from gpuwizard.core.kinds import SweepState
from gpuwizard.core.safetext import safe_line, safe_text
from gpuwizard.core.table import column_widths
from gpuwizard.runner.control.follow import clock
from gpuwizard.runner.sweep.view import (
    ACTIVE,
    PENDING,
    SweepRow,
    best_text,
    eta_text,
    looked,
    resume_text,
    stop_text,
    sweep_eta,
    values_label,
)
from gpuwizard.tui.base.messages import SweepDone, SweepLookFailed, SweepPolled
from gpuwizard.tui.widgets.fields import KeyBar

if TYPE_CHECKING:
    from collections.abc import Callable

    from textual import getters

    from gpuwizard.analysis.compare.runs import Comparison, RunFacts
    from gpuwizard.tui.base.apphost import AppHost

    ComparisonKey = tuple[tuple[str | None, SweepState], ...]
    """Each run's id and state: an ended sweep's comparison is made once per set of ended runs."""
    Compared = tuple[Comparison, RunFacts] | None

POLL_S = 1.0
COLUMNS = ("#", "state", "on", "step", "loss", "ETA", "values")
"""The values last: cut at the right edge at 80 columns, whole in the line under the table."""
ENDED_COLUMNS = ("#", "state", "on", "step", "final", "loss@eq", "time", "values")


def polled(folder: Path, cache: dict[ComparisonKey, Compared]) -> SweepPolled:
    """The sweep now (read-only: only the scheduler and the stop write sweep.json); its comparison is made once per
    set of ended runs."""
    from gpuwizard.runner.sweep.manage import sweep_comparison
    from gpuwizard.runner.sweep.scheduler import scheduler_alive
    from gpuwizard.runs.records import RecordError
    from gpuwizard.runs.sweeps import read_sweep

    try:
        sweep = read_sweep(folder)
    except RecordError as exc:
        return SweepPolled(None, [], False, None, f"{folder / 'sweep.json'} cannot be read: {exc}")
    rows = looked(sweep)
    key = tuple((r.run_id, r.state) for r in sweep.runs)
    if sweep.ended and key not in cache:
        cache.clear()
        cache[key] = sweep_comparison(sweep)
    return SweepPolled(sweep, rows, scheduler_alive(sweep), cache.get(key) if sweep.ended else None)


def stopped(folder: Path) -> str:
    from gpuwizard.runner.sweep.manage import stop_whole

    return stop_text(folder.name, stop_whole(folder))


def resumed(folder: Path) -> str:
    from gpuwizard.runner.sweep.manage import resume_sweep

    return resume_text(folder.name, resume_sweep(folder))


def saved_best(folder: Path, name: str) -> str:
    from gpuwizard.runner.sweep.manage import save_best

    return save_best(folder, name)


class SweepScreen(Screen[None]):
    """One sweep, read by a worker every POLL_S; the table keeps its highlighted run across refreshes."""

    if TYPE_CHECKING:
        app = getters.app(AppHost)  # gpuwizard's app, beyond Textual's (tui/base/apphost.py)

    HELP = (
        "Every run of the sweep, as its own run folder says: enter opens its monitor. The sweep's ETA assumes the "
        "queued runs take as long as the runs seen so far (the range: the shortest to the longest). Once every run "
        "has ended the table shows the comparison (loss@eq: loss at the samples every run saw) and names the best."
    )
    BINDINGS = [
        Binding("enter", "open", "Monitor", priority=True),  # before the table's own enter
        Binding("s", "stop", "Stop sweep"),
        Binding("u", "resume", "Resume"),
        Binding("b", "save_best", "Save best"),
        Binding("c", "compare", "Compare"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, folder: Path):
        super().__init__()
        self.folder = folder
        self.state: SweepPolled | None = None
        self.slots = 0
        """The most runs seen running at once: how many the queued ones share."""
        self.busy = ""
        """What a stop or resume under way is doing."""
        self.failed = ""
        """Why the newest look at the sweep failed ('' once one succeeds): the table is as of the look before."""
        self.shown: tuple[tuple[str, ...], list[list[str]]] = ((), [])
        self.closed = threading.Event()

    def compose(self) -> ComposeResult:
        yield Static(safe_line(f"Sweep {self.folder.name}"), id="sweep-title")
        yield Static("reading the sweep...", id="sweep-status")
        yield DataTable(id="sweep-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="sweep-hint")
        yield Static("", id="sweep-best")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#sweep-table", DataTable).focus()
        self.query_one("#sweep-best").display = False
        self.follow()

    def on_unmount(self) -> None:
        self.closed.set()

    @work(thread=True, exclusive=True, group="sweep", exit_on_error=False)
    def follow(self) -> None:
        cache: dict[ComparisonKey, Compared] = {}
        while True:
            try:
                self.post_message(polled(self.folder, cache))
            except Exception as exc:
                # any failure is said and the look tried again: a worker that raised would end without a word,
                # leaving a table that looks live
                self.post_message(SweepLookFailed(f"{type(exc).__name__}: {exc}"))
            if self.closed.wait(POLL_S):
                return

    @on(SweepLookFailed)
    def _look_failed(self, message: SweepLookFailed) -> None:
        self.failed = f"{time.strftime('%H:%M:%S')}: {message.error}"
        self.describe()

    @on(SweepPolled)
    def _polled(self, message: SweepPolled) -> None:
        before = self.state
        self.state = message
        self.failed = ""
        self.slots = max(self.slots, sum(r["state"] in ACTIVE for r in message.rows))
        self.fill()
        self.describe()
        if before is None or (before.alive, before.compared is None, before.sweep and before.sweep.ended) != (
            message.alive,
            message.compared is None,
            message.sweep and message.sweep.ended,
        ):
            self.refresh_bindings()

    def cells(self, row: SweepRow, best: str | None) -> list[str]:
        compared = self.state.compared if self.state else None
        facts = {f.run_id: f for f in compared[0].runs} if compared else {}
        number = f"{row['index'] + 1}" + ("*" if best and row["run_id"] == best else "")
        state = "unreadable" if row["unreadable"] else row["state"]
        step = "-" if row["step"] is None else str(row["step"])
        step += f"/{row['total']}" if row["total"] else ""
        values = values_label(row["values"], row["trained"])
        if facts:
            f = facts.get(row["run_id"] or "")
            final = "-" if f is None or f.final_loss is None else f"{f.final_loss:.4g}"
            at_eq = "-" if f is None or f.loss_at_equal_samples is None else f"{f.loss_at_equal_samples:.4g}"
            took = "-" if f is None else clock(f.duration_s)
            return [number, state, row["device"], step, final, at_eq, took, values]
        loss = "-" if row["loss"] is None else f"{row['loss']:.4g}"
        eta = clock(row["eta_s"]) if row["state"] in ACTIVE and row["eta_s"] is not None else ""
        return [number, state, row["device"], step, loss, eta, values]

    def fill(self) -> None:
        """The table from the newest poll: only the cells that changed are drawn, the columns rebuilt when the
        comparison arrives or a width changes."""
        state = self.state
        if state is None:
            return
        table = self.query_one("#sweep-table", DataTable)
        best = state.compared[1].run_id if state.compared else None
        labels = ENDED_COLUMNS if state.compared else COLUMNS
        cells = [[safe_line(c) for c in self.cells(row, best)] for row in state.rows]
        widths = tuple(map(str, column_widths(labels, cells)))
        if (labels + widths, len(cells)) == (self.shown[0], len(self.shown[1])):
            for index, (new, old) in enumerate(zip(cells, self.shown[1], strict=True)):
                for label, cell, was in zip(labels, new, old, strict=True):
                    if cell != was:
                        table.update_cell(str(index), label, Text(cell))
        else:
            cursor = table.cursor_row
            table.clear(columns=True)
            for label, width in zip(labels, widths, strict=True):
                table.add_column(label, key=label, width=int(width))
            for index, row_cells in enumerate(cells):
                table.add_row(*(Text(c) for c in row_cells), key=str(index))
            if cursor is not None and cursor < len(cells):
                table.move_cursor(row=cursor, animate=False)
        self.shown = (labels + widths, cells)

    def describe(self) -> None:
        """The lines around the table: the scheduler, the sweep's ETA, the queue; the highlighted run whole; the
        best once every run has ended."""
        state = self.state
        status, hint, best = (self.query_one(f"#sweep-{n}", Static) for n in ("status", "hint", "best"))
        stale = f"the last look failed ({self.failed}); the table is older, looking again" if self.failed else ""
        if state is None or state.sweep is None:
            status.update(safe_text(" · ".join(p for p in (stale, state and state.error) if p)))
            return
        sweep, rows = state.sweep, state.rows
        self.query_one("#sweep-title", Static).update(
            safe_line(f"Sweep {sweep.sweep_id} · {sweep.preset} · {len(rows)} runs · ? lists every key")
        )
        counted = (SweepState.RUNNING, SweepState.STARTING, SweepState.QUEUED, PENDING)
        counts = {s: sum(r["state"] == s for r in rows) for s in counted}
        ended = len(rows) - sum(counts.values())
        if self.busy:
            scheduler = self.busy
        elif state.alive:
            scheduler = "scheduler running"
        elif sweep.stopped:
            scheduler = "sweep stopped (u resumes it)"
        elif sweep.ended:
            unfinished = sum(r["state"] != SweepState.FINISHED for r in rows)
            scheduler = "sweep ended" + (f" (u resumes the {unfinished} not finished)" if unfinished else "")
        else:
            scheduler = "scheduler not running (u resumes it)"
        queued = [f"#{r['index'] + 1}" for r in rows if r["state"] == SweepState.QUEUED]
        queue = "queue: " + (" ".join(queued[:8]) + (f" +{len(queued) - 8}" if len(queued) > 8 else "") or "empty")
        active = counts[SweepState.RUNNING] + counts[SweepState.STARTING]
        pending = f"{counts[PENDING]} pending at SLURM, " if counts[PENDING] else ""
        parts = [
            stale,
            scheduler,
            f"{active} running, {pending}{counts[SweepState.QUEUED]} queued, {ended} ended",
            queue,
        ]
        if not sweep.ended and (state.alive or active):
            parts.append(eta_text(sweep_eta(rows, self.slots), self.slots))
        status.update(safe_text(" · ".join(p for p in parts if p)))
        table = self.query_one("#sweep-table", DataTable)
        row = rows[table.cursor_row] if rows and table.cursor_row is not None and table.cursor_row < len(rows) else None
        if row is not None:
            facts = [
                f"#{row['index'] + 1} {values_label(row['values'], row['trained'])}",
                f"run {row['run_id'] or '(not started)'}",
            ]
            if row["resumed_from"]:
                facts.append(f"continues {row['resumed_from']}")
            why = row["unreadable"] or row["error"]
            hint.update(safe_text(" · ".join(facts) + (f"\n{why}" if why else "")))
        compared = state.compared
        best.display = sweep.ended
        if compared is not None:
            keys = "b saves its preset · c compares the runs in full"
            best.update(safe_text(f"{best_text(sweep, compared[1], compared[0].runs)}\n{keys}"))
        elif sweep.ended:
            finished = sum(r["state"] == SweepState.FINISHED for r in rows)
            best.update(f"no comparison: {finished} run(s) finished and it takes two; u resumes the others")

    @on(DataTable.RowHighlighted, "#sweep-table")
    def _highlighted(self) -> None:
        self.describe()
        self.refresh_bindings()

    @on(DataTable.RowSelected, "#sweep-table")
    def _row_selected(self) -> None:
        self.action_open()

    def selected(self) -> SweepRow | None:
        table = self.query_one("#sweep-table", DataTable)
        rows = self.state.rows if self.state else []
        if table.cursor_row is None or not 0 <= table.cursor_row < len(rows):
            return None
        return rows[table.cursor_row]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Keys that cannot apply now are greyed out (open, on a run not started) or hidden."""
        state = self.state
        sweep = state.sweep if state else None
        if action == "open":
            row = self.selected()
            return None if row is None or row["run_id"] is None else True
        if action == "stop":
            return sweep is not None and not self.busy and (state is not None and state.alive or not sweep.ended)
        if action == "resume":
            finished = sweep is not None and all(r.state == SweepState.FINISHED for r in sweep.runs)
            return sweep is not None and not self.busy and state is not None and not state.alive and not finished
        if action in ("save_best", "compare"):
            return state is not None and state.compared is not None
        if action == "back":
            stack = self.app.screen_stack  # the first screen of `sweep watch` has only Textual's default under it
            return self in stack and stack.index(self) > 1
        return True

    def action_open(self) -> None:
        from gpuwizard.runs.rundir import RunDir

        row = self.selected()
        if row is None or row["run_id"] is None:
            starting = row is not None and row["state"] == SweepState.STARTING
            said = "is starting: its monitor opens once its run folder is made" if starting else "has not started yet"
            self.notify(f"This run {said}.", severity="warning")
        elif row["unreadable"]:
            self.notify(safe_line(row["unreadable"]), severity="warning", markup=False)
        elif self.state and self.state.sweep:
            path = self.state.sweep.runs[row["index"]].run_path
            if path:
                self.app.open_monitor(RunDir(Path(path)))

    def action_stop(self) -> None:
        from gpuwizard.tui.dialogs.modals import Confirm

        def answer(yes: bool | None) -> None:
            if yes:
                self.act("stopping the scheduler, then every run...", partial(stopped, self.folder))

        question = f"Stop sweep {self.folder.name}: its scheduler and every run of it? (u resumes it later)"
        self.app.push_screen(Confirm(question), answer)

    def action_resume(self) -> None:
        self.act("resuming...", partial(resumed, self.folder))

    def action_save_best(self) -> None:
        from gpuwizard.tui.dialogs.modals import AskText

        def save(name: str | None) -> None:
            if name:
                self.act("", partial(saved_best, self.folder, name))

        preset = self.state.sweep.preset if self.state and self.state.sweep else "sweep"
        self.app.push_screen(AskText("Save the best run's preset as", "name", f"{preset}-best"), save)

    def act(self, doing: str, what: Callable[[], str]) -> None:
        self.busy = doing
        self.describe()
        self.refresh_bindings()
        self.in_worker(what)

    @work(thread=True, exclusive=True, group="sweep-act", exit_on_error=False)
    def in_worker(self, what: Callable[[], str]) -> None:
        """A stop, resume or save off the event loop; what went wrong is one paragraph in a toast."""
        from gpuwizard.core.errors import UserError
        from gpuwizard.runs.records import RecordError

        try:
            self.post_message(SweepDone(what()))
        except (UserError, RecordError, OSError) as exc:
            self.post_message(SweepDone(exc.paragraph() if isinstance(exc, UserError) else str(exc), failed=True))

    @on(SweepDone)
    def _done(self, message: SweepDone) -> None:
        self.busy = ""
        self.notify(safe_text(message.text), severity="error" if message.failed else "information", markup=False)
        self.describe()
        self.refresh_bindings()

    def action_compare(self) -> None:
        from gpuwizard.runs.rundir import RunDir
        from gpuwizard.tui.screens.runs import CompareScreen

        sweep = self.state.sweep if self.state else None
        if sweep is not None:
            runs = [RunDir(Path(r.run_path)) for r in sweep.runs if r.state == SweepState.FINISHED and r.run_path]
            self.app.push_screen(CompareScreen(runs))

    def action_back(self) -> None:
        self.app.pop_screen()
