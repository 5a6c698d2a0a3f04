"""The live monitor (also what `gpuwizard attach` opens): log, progress, telemetry, events with next steps."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Input, Label, ProgressBar, Sparkline, Static
from textual.worker import get_current_worker

from gpuwizard.codes import RunState
from gpuwizard.runner.follow import RunFollower, RunUpdate, progress_parts, request_stack_dump, request_stop
from gpuwizard.runner.logindex import LogIndex
from gpuwizard.runner.records import Event, Progress, Status
from gpuwizard.runner.rundir import RunDir
from gpuwizard.tui.logview import LogView
from gpuwizard.tui.messages import RunPolled, RunStarted, SearchDone
from gpuwizard.tui.plots import MetricsPlot
from gpuwizard.tui.widgets import KeyBar

HISTORY = 60
NODE_TELEMETRY_GRACE_S = 30.0
"""How long a running SLURM job may go without GPU samples from its nodes before the monitor says why."""
STATE_STYLES = {
    RunState.FINISHED: "bold $success",
    RunState.FAILED: "bold $error",
    RunState.HUNG: "bold $error",
    RunState.STOPPED: "bold $warning",
}
ACK_TIMEOUT_S = 2.0


class TelemetryRow(Horizontal):
    """One GPU (or one rank on CPU runs): a sparkline and its latest figures."""

    def __init__(self, key: str, title: str):
        super().__init__(classes="telemetry-row")
        self.key = key
        self.history: deque[float] = deque(maxlen=HISTORY)
        self.title_label = Label(title, classes="telemetry-title")
        self.spark = Sparkline([], summary_function=max, classes="telemetry-spark")
        self.value = Label("", classes="telemetry-value")

    def compose(self) -> ComposeResult:
        yield self.title_label
        yield self.spark
        yield self.value

    def push(self, value: float, text: str) -> None:
        self.history.append(value)
        self.spark.data = list(self.history)
        self.value.update(text)


class MonitorScreen(Screen[None]):
    BINDINGS = [
        Binding("s", "stop", "Stop", priority=True),
        Binding("m", "smoke", "Smoke"),
        Binding("p", "retry_p2p", "P2P"),
        Binding("d", "dump", "Stack"),
        Binding("r", "resume", "Resume"),
        Binding("v", "view", "Log/plots"),
        Binding("l", "metric", "Metric", show=False),
        Binding("x", "x_axis", "Step/time", show=False),
        Binding("g", "log_scale", "Log loss", show=False),
        Binding("slash", "search", "Find"),
        Binding("n", "next_match", "Next match", show=False),
        Binding("f", "follow", "Follow"),
        Binding("w", "wizard", "Wizard"),
        Binding("escape", "close_search", "Close search", show=False),
    ]

    def __init__(self, run: RunDir):
        super().__init__()
        self.run = run
        self.index = LogIndex(run.log)
        self.status: Status | None = None
        self.problem: str | None = None
        self.progress: Progress | None = None
        self.events: list[Event] = []
        self.ack = threading.Event()
        self.search_text = ""
        self.search_from = 0
        self.shown_stats = ""
        self.node_samples_seen = False
        self.view = "log"

    @property
    def final(self) -> bool:
        return self.status is not None and self.status.final

    def compose(self) -> ComposeResult:
        yield Static("", id="run-title")
        with Horizontal(id="progress-row"):
            yield ProgressBar(total=100, show_eta=False, show_percentage=False, id="progress")
            yield Static("", id="stats")
        yield Static("", id="banner")
        yield LogView(self.index, id="log")
        yield MetricsPlot(id="plots")
        yield Input(placeholder="search the log (enter: find, n: next, esc: close)", id="search")
        yield Static("", id="telemetry-note")
        yield Vertical(id="telemetry")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#search", Input).display = False
        self.query_one("#banner", Static).display = False
        self.query_one("#log", LogView).focus()
        self.refresh_title()
        self.follow()

    # -- polling thread: reads files, posts messages, never touches widgets -------------------
    @work(thread=True, exclusive=True, group="follow", exit_on_error=False)
    def follow(self) -> None:
        worker = get_current_worker()
        follower = RunFollower(self.run, read_log=False)  # the pane reads the log file itself, through the index
        try:
            while not worker.is_cancelled:
                update = follower.poll()
                grew = self.index.extend()
                busy = bool(grew or update.events or update.gpu)
                self.ack.clear()
                self.post_message(RunPolled(update, self.index.line_count))
                self.ack.wait(ACK_TIMEOUT_S)  # back-pressure: the next read waits for the UI
                final = update.status is not None and update.status.final
                if final and not busy:
                    time.sleep(0.5)
                elif not busy:
                    time.sleep(0.1)
        finally:
            follower.close()

    @on(RunPolled)
    def _polled(self, message: RunPolled) -> None:
        try:
            self.apply(message.update, message.line_count)
        finally:
            self.ack.set()

    def apply(self, update: RunUpdate, line_count: int) -> None:
        log = self.query_one("#log", LogView)
        log.grow(line_count)
        if update.progress:
            self.progress = update.progress
        status_changed = update.status != self.status or update.problem != self.problem
        self.status, self.problem = update.status or self.status, update.problem
        for unreadable in update.unreadable:  # a FIFO or folder in place of a run file: said, never waited on
            self.notify(unreadable, title="Run folder", severity="warning", timeout=10, markup=False)
        if update.events:
            self.events += update.events
            self.show_banner()
            for event in update.events:
                self.notify(
                    event.title,
                    severity="error" if event.severity == "error" else "information",
                    timeout=6,
                    markup=False,
                )
        if update.metrics and self.status is not None:
            self.query_one("#plots", MetricsPlot).add(update.metrics, self.status.started or self.status.created)
        self.apply_telemetry(update)
        self.refresh_progress()
        if status_changed:
            self.refresh_title()
            self.show_banner()
        if log.auto_scroll and (update.events or status_changed):
            self.call_after_refresh(log.follow, True)  # layout changes (banner) must not stop following

    def apply_telemetry(self, update: RunUpdate) -> None:
        box = self.query_one("#telemetry", Vertical)
        for sample in update.gpu:
            if sample.node:
                self.node_samples_seen = True
                row = self._row(box, f"gpu-{sample.node}-{sample.index}", f"{sample.node} GPU{sample.index}")
            else:
                row = self._row(box, f"gpu{sample.index}", f"GPU{sample.index}")
            if sample.lost:
                row.push(0, "LOST")
                continue
            util = sample.utilization or 0.0
            mem = f"{(sample.memory_used_mb or 0) / 1024:.1f}/{(sample.memory_total_mb or 0) / 1024:.0f}G"
            row.push(util, f"{util:3.0f}% {mem} {sample.temperature_c or 0:.0f}C {sample.power_w or 0:.0f}W")
        self.show_telemetry_note()
        if self.status is not None and self.status.device == "cpu":
            for sample in update.ranks[-HISTORY:]:
                for rank in sample.ranks:
                    cpu = rank.cpu or 0.0
                    self._row(box, f"rank{rank.rank}", f"rank {rank.rank}").push(cpu, f"CPU {cpu:4.0f}% pid {rank.pid}")

    def show_telemetry_note(self) -> None:
        """A SLURM job's GPUs are sampled on its nodes into the run folder; none arriving means the folder is not on
        a filesystem the nodes share, and then the monitor has only what this machine sees."""
        s = self.status
        waiting = (
            s is not None
            and s.slurm_job_id is not None
            and s.device == "cuda"
            and s.started is not None
            and not self.node_samples_seen
            and time.time() - s.started > NODE_TELEMETRY_GRACE_S
        )
        note = self.query_one("#telemetry-note", Static)
        if waiting != note.display:
            note.update(
                "No GPU samples from the nodes: the run folder is not on a filesystem they share, so telemetry is "
                "local only."
            )
            note.display = waiting

    def _row(self, box: Vertical, key: str, title: str) -> TelemetryRow:
        for row in box.query(TelemetryRow):
            if row.key == key:
                return row
        row = TelemetryRow(key, title)
        box.mount(row)
        return row

    # -- rendering ---------------------------------------------------------------------------
    def refresh_title(self) -> None:
        s = self.status
        if s is None:
            text = self.problem or "reading the run folder..."
            self.query_one("#run-title", Static).update(
                Content.assemble((" ? ", "reverse bold $warning"), f" {self.run.run_id} · {text}")
            )
            return
        style = STATE_STYLES.get(s.state, "bold $accent")
        self.query_one("#run-title", Static).update(
            Content.assemble(
                (f" {s.state} ", f"reverse {style}"),
                f" {self.run.run_id} · {s.trainer} · {s.policy} · {s.world_size}x{s.device}"
                + (" · smoke" if s.smoke else "")
                + (
                    f" · SLURM {s.slurm_job_id} {(s.slurm_state or '').lower()}"
                    + (f" ({s.slurm_reason})" if s.slurm_reason else "")
                    if s.slurm_job_id
                    else ""
                ),
            )
        )

    def refresh_progress(self) -> None:
        p, s = self.progress or Progress(), self.status
        total = p.total or (s.steps if s else 0)
        bar = self.query_one("#progress", ProgressBar)
        if total and bar.total != total:
            bar.update(total=total)
        if p.step is not None:
            bar.update(progress=p.step)
        text = " · ".join([f"{p.step if p.step is not None else '-'}/{total or '?'}", *progress_parts(p, s)])
        if text != self.shown_stats:  # a repaint per poll would cost every idle SSH session bandwidth
            self.shown_stats = text
            self.query_one("#stats", Static).update(text)

    def show_banner(self) -> None:
        banner = self.query_one("#banner", Static)
        important = [e for e in self.events if e.severity in ("error", "warning")]
        if important:
            event = important[-1]
            parts: list[Any] = [
                (f" {event.title} ", "bold reverse $error" if event.severity == "error" else "bold reverse $warning"),
                "\n",
            ]
            if event.detail:
                parts.append(event.detail[:400] + "\n")
            if event.suggestion:
                parts.append(("next: " + event.suggestion[:400] + "\n", "bold"))
            parts.append(
                (
                    "keys: s stop · m smoke repro · p retry with NCCL_P2P_DISABLE=1 · d stack dump of every rank",
                    "$text-muted",
                )
            )
            text = Content.assemble(*parts)
            banner.set_class(event.severity == "error", "-error")
        elif self.status is None and self.problem:
            text = Content.styled(f"This run folder cannot be read: {self.problem}", "bold")
            banner.set_class(True, "-error")
        elif self.status is not None and self.status.final:
            why = f": {self.status.error}" if self.status.error else ""
            resume = "" if self.status.state == "finished" else " Press r to resume from its last checkpoint."
            text = Content.styled(
                f"Run {self.status.state} (exit code {self.status.exit_code}){why}. Folder: {self.run.path}.{resume}",
                "bold",
            )
        else:
            return
        banner.update(text)
        banner.display = True

    # -- actions --------------------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.status is None or self.final:
            self.notify("The run has already ended.")
            return
        from gpuwizard.tui.dialogs import Confirm

        def stop(yes: bool) -> None:
            if yes:
                request_stop(self.run)
                self.notify("Stopping every rank (forced kill after 10 s)...")

        self.app.push_screen(Confirm("Stop this run? Every process of it is signalled, then killed."), stop)

    def action_dump(self) -> None:
        if request_stack_dump(self.run):
            self.notify("Dumping every rank's stack (py-spy); the result appears as an event.")
        else:
            self.notify("The run's supervisor is not running.", severity="warning")

    def restart(self, smoke: bool, env: list[str], resume: bool = False) -> None:
        if not self.final:
            request_stop(self.run)
        if resume:
            message = "Resuming from the last checkpoint"
        elif smoke:
            message = "Starting a smoke repro (50 steps, batch 2)"
        else:
            message = "Restarting with " + " ".join(env)
        self.notify(message + "...")
        self.relaunch(smoke, env, resume)

    @work(thread=True, exclusive=True, group="relaunch", exit_on_error=False)
    def relaunch(self, smoke: bool, env: list[str], resume: bool) -> None:
        from gpuwizard.errors import UserError
        from gpuwizard.runner.launch import relaunch

        deadline = time.monotonic() + self.run.job().stop_grace_s + 60  # the forced kill, then a loaded machine
        while not self.run.status().final:
            if time.monotonic() > deadline:
                self.post_message(RunStarted(None, f"Run {self.run.run_id} has not ended yet; nothing started.", []))
                return
            time.sleep(0.2)
        try:
            run = relaunch(self.run, smoke=smoke, env=env, resume=resume)
        except UserError as exc:
            self.post_message(RunStarted(None, exc.paragraph(), []))
            return
        self.post_message(RunStarted(run.path, None, []))

    @on(RunStarted)
    def _run_started(self, message: RunStarted) -> None:
        if message.error:
            self.notify(message.error, severity="error", timeout=10, markup=False)
        elif message.run_path is not None:
            self.app.open_monitor(RunDir(message.run_path), replace=True)

    def action_resume(self) -> None:
        if self.status is None or not self.final:
            self.notify("The run is still going: stop it first (s), then resume it.", severity="warning")
            return
        if self.status.smoke:
            self.notify("A smoke run cannot be resumed; start the full run from the wizard.", severity="warning")
            return
        self.restart(smoke=False, env=[], resume=True)

    def action_smoke(self) -> None:
        self.restart(smoke=True, env=[])

    def action_retry_p2p(self) -> None:
        self.restart(smoke=False, env=["NCCL_P2P_DISABLE=1"])

    def action_view(self) -> None:
        """log -> plots -> both: the curves beside or instead of the log."""
        log, plots = self.query_one("#log", LogView), self.query_one("#plots", MetricsPlot)
        showing = ("log", "plots", "both")[(("log", "plots", "both").index(self.view) + 1) % 3]
        self.view = showing
        log.display = showing in ("log", "both")
        plots.display = showing in ("plots", "both")
        if plots.display:
            plots.redraw()

    def action_metric(self) -> None:
        self.query_one("#plots", MetricsPlot).cycle_metric()

    def action_x_axis(self) -> None:
        self.query_one("#plots", MetricsPlot).toggle_x()

    def action_log_scale(self) -> None:
        self.query_one("#plots", MetricsPlot).toggle_log()

    def action_follow(self) -> None:
        log = self.query_one("#log", LogView)
        log.follow(not log.auto_scroll)
        self.notify("Following the log tail." if log.auto_scroll else "Paused following; f resumes.")

    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.display = True
        box.focus()

    def action_close_search(self) -> None:
        box = self.query_one("#search", Input)
        if box.display:
            box.display = False
            self.query_one("#log", LogView).focus()

    @on(Input.Submitted, "#search")
    def _search(self, event: Input.Submitted) -> None:
        log = self.query_one("#log", LogView)
        self.search_text = event.value
        self.search_from = log.highlight + 1 if log.highlight is not None else log.scroll_offset.y
        log.focus()
        self.action_next_match()

    def action_next_match(self) -> None:
        if self.search_text:
            self.notify(f"Searching the whole log for {self.search_text!r}...", timeout=2)
            self.search(self.search_text, self.search_from)

    @work(thread=True, exclusive=True, group="search", exit_on_error=False)
    def search(self, needle: str, start: int) -> None:
        """Scan the log file (every line of it) off the UI thread; the result comes back as a message."""
        self.post_message(SearchDone(needle, self.index.search(needle, start)))

    @on(SearchDone)
    def _found(self, message: SearchDone) -> None:
        if message.needle != self.search_text:
            return
        if message.line is None:
            self.notify(f"No match for {message.needle!r}", severity="warning")
            return
        log = self.query_one("#log", LogView)
        log.show_line(message.line)
        self.search_from = message.line + 1
        self.notify(
            f"line {message.line + 1}: {log.line(message.line)[:120]}",
            title=f"match for {message.needle!r}",
            markup=False,
        )

    def action_wizard(self) -> None:
        from gpuwizard.preset import load_preset_file

        self.app.open_wizard(load_preset_file(self.run.path / "preset.yaml"))
