"""The live monitor (also what `gpuwizard attach` opens): log, progress, telemetry, events with next steps."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, Horizontal
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Input, ProgressBar, Static
from textual.worker import get_current_worker

from gpuwizard.core.codes import RunState
from gpuwizard.core.kinds import EventKind
from gpuwizard.runner.control.follow import RunFollower, RunUpdate, clock, progress_parts
from gpuwizard.runner.control.stopping import request_stack_dump
from gpuwizard.runs.logindex import LogIndex
from gpuwizard.runs.records import Event, Progress, Status
from gpuwizard.runs.rundir import RunDir
from gpuwizard.tui.base.messages import NoiseRead, RunPolled, RunStarted, SearchDone
from gpuwizard.tui.monitor.banner import banner, important, live_title, open_hang, stalled_for, trained
from gpuwizard.tui.monitor.header import fitted_stats, run_title
from gpuwizard.tui.monitor.lifecycle import RunLifecycle
from gpuwizard.tui.monitor.notices import RunNotices
from gpuwizard.tui.monitor.search import LogSearch
from gpuwizard.tui.monitor.telemetry import LOCAL_ONLY_NOTE, Telemetry
from gpuwizard.tui.widgets.fields import KeyBar
from gpuwizard.tui.widgets.logview import LogView
from gpuwizard.tui.widgets.plots import MetricsPlot

if TYPE_CHECKING:
    from textual import getters

    from gpuwizard.tui.base.apphost import AppHost

ACK_TIMEOUT_S = 2.0
POLL_S = 0.1
FINAL_POLL_S = 0.5
NOISE_EVERY_S = 10.0
"""How often a gauged run's noise scale is estimated again (from the gauge lines appended since the last time)."""


class MonitorScreen(Screen[None]):
    """The run, followed from its folder; stopping and restarting it are a part it holds (`lifecycle`)."""

    if TYPE_CHECKING:
        app = getters.app(AppHost)  # gpuwizard's app, beyond Textual's (tui/base/apphost.py)

    BINDINGS = [
        Binding("s", "stop", "Stop", priority=True, tooltip="Stop every process of the run (asks first)."),
        Binding("r", "resume", "Resume", tooltip="Resume from the last checkpoint, or continue a finished run."),
        Binding("v", "view", "View", tooltip="Cycle the log, the curves, and both."),
        Binding("slash", "search", "Find", tooltip="Search the whole log (n: next match)."),
        Binding("w", "wizard", "Wizard", tooltip="Back to the wizard; the run goes on."),
        Binding("b", "sweep", "Sweep", tooltip="Back to the Sweep screen this monitor was opened from."),
        Binding("d", "dump", "Stacks", show=False, tooltip="Dump every rank's stack (py-spy) and show them."),
        Binding("e", "details", "Details", show=False, tooltip="The newest warning or error in full, with stacks."),
        Binding("f", "follow", "Follow tail", show=False, tooltip="Follow the log's tail again, or stop following."),
        Binding("y", "copy_command", "Copy command", show=False, tooltip="Copy the run's exact command (OSC 52)."),
        Binding("m", "smoke", "Smoke repro", show=False, tooltip="Stop (asks first) and start a 50-step smoke run."),
        Binding("p", "retry_p2p", "Retry P2P off", show=False, tooltip="Stop (asks first), rerun NCCL_P2P_DISABLE=1."),
        Binding("l", "metric", "Next curve", show=False, tooltip="Curves: loss, lr, samples/s."),
        Binding("x", "x_axis", "Step/time axis", show=False, tooltip="Curves: against step or wall time."),
        Binding("g", "log_scale", "Log-scale loss", show=False, tooltip="Curves: the loss on a log scale."),
        Binding("n", "next_match", "Next match", show=False, tooltip="The next line matching the search."),
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
        self.shown_stats = ""
        self.noise = ""
        """A gauged run's noise scale (NoiseRead), shown on the progress line."""
        self.shown_banner: tuple[Content, str, bool] | None = None
        self.view = "log"
        self.opened_t = time.time()
        self.dump_wanted = False
        self.notices = RunNotices(self, self.opened_t)
        self.lifecycle = RunLifecycle(self)
        self.search = LogSearch(self)

    @property
    def final(self) -> bool:
        return self.status is not None and self.status.final

    def compose(self) -> ComposeResult:
        yield Static("", id="run-title")
        with Horizontal(id="progress-row"):
            yield ProgressBar(total=100, show_eta=False, show_percentage=False, id="progress")
            yield Static("", id="stats")
        yield Static("", id="banner")
        with Container(id="panes"):
            yield LogView(self.index, id="log")
            yield MetricsPlot(id="plots")
        yield Input(placeholder="search the log (enter: find, n: next, esc: close)", id="search")
        yield Static(LOCAL_ONLY_NOTE, id="telemetry-note")
        yield Telemetry(id="telemetry")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#search", Input).display = False
        self.query_one("#banner", Static).display = False
        self.query_one("#log", LogView).focus()
        self.refresh_title()
        self.follow()
        self.follow_noise()
        self.set_interval(1.0, self.tick)

    def on_resize(self) -> None:
        self.show_banner()
        self.refresh_progress()

    # -- polling thread: reads files, posts messages, never touches widgets -------------------
    @work(thread=True, exclusive=True, group="follow", exit_on_error=False)
    def follow(self) -> None:
        worker = get_current_worker()
        follower = RunFollower(self.run, read_log=False)  # the pane reads the log file itself, through the index
        try:
            while not worker.is_cancelled:
                started = time.monotonic()
                update = follower.poll()
                grew = self.index.extend()  # everything new: a flood is caught up in one poll
                busy = bool(grew or update.events or update.gpu)
                self.ack.clear()
                self.post_message(RunPolled(update, self.index.line_count))
                self.ack.wait(ACK_TIMEOUT_S)  # back-pressure: the next read waits for the UI
                final = update.status is not None and update.status.final
                # at most POLL_S apart even while lines pour in: each poll relays out the screen, and keys come first
                pause = FINAL_POLL_S if final and not busy else POLL_S
                time.sleep(max(0.0, pause - (time.monotonic() - started)))
        finally:
            follower.close()

    @work(thread=True, exclusive=True, group="noise", exit_on_error=False)
    def follow_noise(self) -> None:
        """A gauged run's noise scale every NOISE_EVERY_S, beside the follower: its first look reads the whole gauge
        file (a long run's takes seconds), and that never holds up the log and progress."""
        from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE, GaugeFollower

        worker = get_current_worker()
        gauge = GaugeFollower(self.run.path / GAUGE_FILE)
        next_at = 0.0
        try:
            while not worker.is_cancelled:  # short naps: a closed screen's worker ends at once, not NOISE_EVERY_S later
                if time.monotonic() >= next_at:
                    next_at = time.monotonic() + NOISE_EVERY_S
                    found = gauge.look()
                    if found is not None and (text := found.short()) is not None:
                        self.post_message(NoiseRead(text))
                time.sleep(POLL_S)
        finally:
            gauge.close()

    @on(NoiseRead)
    def _noise(self, message: NoiseRead) -> None:
        self.noise = message.text
        self.refresh_progress()

    @on(RunPolled)
    def _polled(self, message: RunPolled) -> None:
        try:
            if any(panel.is_attached for panel in self.query(Telemetry)):  # not while the screen is torn down
                self.apply(message.update, message.line_count)
        finally:
            self.ack.set()

    def apply(self, update: RunUpdate, line_count: int) -> None:
        self.query_one("#log", LogView).grow(line_count)
        if update.progress:
            self.progress = update.progress
        was_final = self.final if self.status is not None else None
        status_changed = update.status != self.status or update.problem != self.problem
        self.status, self.problem = update.status or self.status, update.problem
        for unreadable in update.unreadable:  # a FIFO or folder in place of a run file: said, never waited on
            self.notify(unreadable, title="Run folder", severity="warning", timeout=10, markup=False)
        if update.events:
            self.events += update.events
            for event in update.events:
                self.announce(event)
        if update.metrics and self.status is not None:
            self.query_one("#plots", MetricsPlot).add(update.metrics, self.status.started or self.status.created)
        self.query_one("#telemetry", Telemetry).apply(update, self.status)
        self.query_one("#telemetry-note").display = self.query_one("#telemetry", Telemetry).local_only(self.status)
        self.refresh_progress()
        if update.events or status_changed:
            self.show_banner()
        if status_changed:
            self.refresh_title()
            self.refresh_bindings()
            if was_final is False and self.final and self.status is not None:
                from gpuwizard.runner.supervise.notify import final_notice

                self.notices.tell(final_notice(self.status, str(self.run.path)))

    def announce(self, event: Event) -> None:
        """The stacks asked for with `d` open at once; a note is a toast (warnings and errors the banner shows)."""
        if event.kind == EventKind.STACK_DUMP and self.dump_wanted:
            self.dump_wanted = False
            self.show_details(event)
        else:
            self.notices.announce(event)

    def tick(self) -> None:
        """Once a second: the clocks of an open hang or a waiting stop keep running (text redrawn only on change)."""
        if self.status is not None and not self.final:
            self.refresh_progress()
            self.show_banner()

    # -- rendering ---------------------------------------------------------------------------
    def refresh_title(self) -> None:
        self.query_one("#run-title", Static).update(run_title(self.run.run_id, self.status, self.problem))

    def refresh_progress(self) -> None:
        p, s = self.progress or Progress(), self.status
        total = p.total or (s.steps if s else 0)
        bar = self.query_one("#progress", ProgressBar)
        if total and bar.total != total:
            bar.update(total=total)
        if p.step is not None:
            bar.update(progress=p.step)
        parts = progress_parts(p, s)
        if s is not None and s.state == RunState.STOPPING:
            parts = [part for part in parts if not part.startswith("ETA ")]
        hang = open_hang(self.events, self.progress, s)
        if hang is not None:  # no rate or ETA while nothing moves: how long it has not
            parts = [part for part in parts if not part.startswith("ETA ") and not part.endswith(" smp/s")]
            parts.append(f"stalled {clock(stalled_for(hang, time.time()))}")
        if self.noise:
            parts.append(self.noise)
        head = f"{p.step if p.step is not None else '-'}/{total or '?'}"
        row = self.query_one("#progress-row")
        text, bar.display = fitted_stats(head, parts, self.size.width - row.styles.gutter.width)
        if text != self.shown_stats:  # a repaint per poll would cost every idle SSH session bandwidth
            self.shown_stats = text
            self.query_one("#stats", Static).update(text)
            if hang is not None:
                self.show_banner()  # its clock and this one tick together

    def p2p_applies(self) -> bool:
        """NCCL_P2P_DISABLE means something only to NCCL: CUDA runs with more than one process."""
        return self.status is not None and self.status.device == "cuda" and self.status.world_size > 1

    def show_banner(self) -> None:
        box = self.query_one("#banner", Static)
        width = (box.size.width or self.size.width) - 4  # border and padding
        keys = "s stop · d stacks · m smoke repro" + (" · p NCCL_P2P_DISABLE=1" if self.p2p_applies() else "")
        shown = banner(
            self.events,
            self.status,
            self.progress,
            self.problem,
            str(self.run.path),
            time.time(),
            width,
            max(3, min(6, self.size.height // 6)),
            keys,
            can_continue=self.lifecycle.can_continue(),
        )
        if shown is None:
            return
        key = (shown.body, shown.keys, shown.error)
        if key != self.shown_banner:
            self.shown_banner = key
            box.update(shown.body)
            box.border_subtitle = shown.keys
            box.set_class(shown.error, "-error")
        box.display = True

    # -- actions --------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Keys that cannot apply to this run are neither shown nor taken."""
        running = self.status is not None and not self.final
        if action in ("stop", "dump"):
            return running
        if action == "resume":  # a run that never reached a step has no checkpoint: w starts it again
            return self.final and not (self.status is not None and self.status.smoke) and trained(self.progress)
        if action == "retry_p2p":
            return self.p2p_applies()
        if action == "details":
            return important(self.events, self.status) is not None
        if action == "sweep":
            return self.app.sweep_under(self)
        return True

    def action_stop(self) -> None:
        self.lifecycle.stop()

    def action_resume(self) -> None:
        self.lifecycle.resume()

    def action_smoke(self) -> None:
        self.lifecycle.smoke()

    def action_retry_p2p(self) -> None:
        self.lifecycle.retry_p2p()

    @on(RunStarted)
    def _run_started(self, message: RunStarted) -> None:
        self.lifecycle.run_started(message)

    def action_dump(self) -> None:
        if request_stack_dump(self.run):
            self.dump_wanted = True
            self.notify("Dumping every rank's stack with py-spy; they open here in a few seconds.")
        else:
            self.notify("The run's supervisor is not running.", severity="warning")

    def action_details(self) -> None:
        event = important(self.events, self.status)
        if event is not None:
            self.show_details(event)

    def show_details(self, event: Event) -> None:
        from gpuwizard.tui.monitor.details import EventDetails

        self.app.push_screen(EventDetails(event, live_title(event, self.progress, self.status, time.time())))

    def action_copy_command(self) -> None:
        if self.status is None:
            return
        self.app.copy_to_clipboard(self.status.command)
        self.notify("Copied the exact command (OSC 52: your terminal must allow clipboard writes).", timeout=4)

    def action_view(self) -> None:
        """log -> plots -> both: the curves instead of the log, or side by side with it (stacked at 80x24, each
        would get a few rows; side by side each keeps the full height)."""
        log, plots = self.query_one("#log", LogView), self.query_one("#plots", MetricsPlot)
        showing = ("log", "plots", "both")[(("log", "plots", "both").index(self.view) + 1) % 3]
        self.view = showing
        self.query_one("#panes").set_class(showing == "both", "-both")
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
        log.follow(not log.following)  # the pane's border says which

    def action_search(self) -> None:
        self.search.open()

    def action_close_search(self) -> None:
        self.search.close()

    @on(Input.Submitted, "#search")
    def _search(self, event: Input.Submitted) -> None:
        self.search.submitted(event.value)

    def action_next_match(self) -> None:
        self.search.next()

    @on(SearchDone)
    def _found(self, message: SearchDone) -> None:
        self.search.found(message)

    def action_wizard(self) -> None:
        from gpuwizard.model.preset_files import load_preset_file

        self.app.open_wizard(load_preset_file(self.run.path / "preset.yaml"))

    def action_sweep(self) -> None:
        self.app.pop_screen()
