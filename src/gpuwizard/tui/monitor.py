"""The live monitor (also what `gpuwizard attach` opens): log, progress, telemetry, events with next steps."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.geometry import Size
from textual.widgets import Input, Label, Log, ProgressBar, Sparkline, Static
from textual.worker import get_current_worker

from gpuwizard.runner.follow import RunFollower, RunUpdate, is_final, progress_parts, request_stack_dump, request_stop
from gpuwizard.runner.rundir import RunDir
from gpuwizard.tui.messages import RunPolled, RunStarted
from gpuwizard.tui.widgets import KeyBar

LOG_MAX_LINES = 50_000
HISTORY = 60
ACK_TIMEOUT_S = 2.0


class JobLog(Log):
    """Textual's Log with a batch append for floods: our lines never hold newlines, and the width is
    estimated with one C-level pass instead of a per-line cell-width thread (relies on Log internals;
    textual is pinned)."""

    tail_max_y = 0.0
    """max_scroll_y when the view last sat on the tail: a view still there is following."""

    def on_resize(self) -> None:
        """Keep following the tail when the pane changes height (a banner or a telemetry row appears)."""
        if self.auto_scroll and self.scroll_y >= self.tail_max_y:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
            self.tail_max_y = self.max_scroll_y

    def write_lines(self, lines: Iterable[str], scroll_end: bool | None = None) -> JobLog:
        lines = lines if isinstance(lines, list) else list(lines)
        if not lines:
            return self
        at_end = self.is_vertical_scroll_end
        follow = self.auto_scroll if scroll_end is None else scroll_end
        if len(lines) > self.max_lines:
            lines = lines[-self.max_lines :]
        start = len(self._lines)
        self._lines.extend(lines)
        self._width = max(self._width, max(map(len, lines)))
        if len(self._lines) > self.max_lines:
            self._prune_max_lines()
            start = max(0, len(self._lines) - len(lines))
        self.virtual_size = Size(self._width, len(self._lines))
        self.refresh_lines(start, len(lines))
        if follow and at_end and not self.is_vertical_scrollbar_grabbed:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
            self.tail_max_y = self.max_scroll_y
        else:
            self.refresh()
        return self


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
        Binding("slash", "search", "Find"),
        Binding("n", "next_match", "Next match", show=False),
        Binding("f", "follow", "Follow"),
        Binding("w", "wizard", "Wizard"),
        Binding("escape", "close_search", "Close search", show=False),
    ]

    def __init__(self, run: RunDir):
        super().__init__()
        self.run = run
        self.status: dict[str, Any] = run.status()
        self.progress: dict[str, Any] = {}
        self.events: list[dict[str, Any]] = []
        self.ack = threading.Event()
        self.search_text = ""
        self.search_from = 0
        self.lines_seen = 0
        self.shown_stats = ""

    def compose(self) -> ComposeResult:
        yield Static("", id="run-title")
        with Horizontal(id="progress-row"):
            yield ProgressBar(total=self.status.get("steps") or 100, show_eta=False, show_percentage=False, id="progress")
            yield Static("", id="stats")
        yield Static("", id="banner")
        yield JobLog(max_lines=LOG_MAX_LINES, highlight=False, id="log")
        yield Input(placeholder="search the log (enter: find, n: next, esc: close)", id="search")
        yield Vertical(id="telemetry")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#search", Input).display = False
        self.query_one("#banner", Static).display = False
        self.query_one("#log", Log).focus()
        self.refresh_title()
        if is_final(self.status):
            self.show_banner()
        self.follow()

    # -- polling thread: reads files, posts messages, never touches widgets -------------------
    @work(thread=True, exclusive=True, group="follow", exit_on_error=False)
    def follow(self) -> None:
        worker = get_current_worker()
        follower = RunFollower(self.run)
        try:
            while not worker.is_cancelled:
                update = follower.poll()
                busy = bool(update.lines or update.events or update.gpu)
                self.ack.clear()
                self.post_message(RunPolled(update))
                self.ack.wait(ACK_TIMEOUT_S)  # back-pressure: the next read waits for the UI
                if is_final(update.status) and not busy:
                    time.sleep(0.5)
                elif not busy:
                    time.sleep(0.1)
        finally:
            follower.close()

    @on(RunPolled)
    def _polled(self, message: RunPolled) -> None:
        try:
            self.apply(message.update)
        finally:
            self.ack.set()

    def apply(self, update: RunUpdate) -> None:
        log = self.query_one("#log", Log)
        if update.lines:
            log.write_lines(update.lines)
            self.lines_seen += len(update.lines)
        if update.progress:
            self.progress = update.progress
        status_changed = update.status != self.status
        self.status = update.status or self.status
        if update.events:
            self.events += update.events
            self.show_banner()
            for event in update.events:
                self.notify(event.get("title", ""), severity="error" if event.get("severity") == "error" else "information", timeout=6)
        self.apply_telemetry(update)
        self.refresh_progress()
        if status_changed:
            self.refresh_title()
            if is_final(self.status):
                self.show_banner()
        if log.auto_scroll and (update.lines or update.events or status_changed):
            self.call_after_refresh(log.scroll_end, animate=False)  # layout changes (banner) must not stop following

    def apply_telemetry(self, update: RunUpdate) -> None:
        box = self.query_one("#telemetry", Vertical)
        for sample in update.gpu:
            key = f"gpu{sample['index']}"
            row = self._row(box, key, f"GPU{sample['index']}")
            if sample.get("lost"):
                row.push(0, "LOST")
                continue
            util = sample.get("utilization") or 0.0
            mem = f"{(sample.get('memory_used_mb') or 0) / 1024:.1f}/{(sample.get('memory_total_mb') or 0) / 1024:.0f}G"
            row.push(util, f"{util:3.0f}% {mem} {sample.get('temperature_c', 0):.0f}C {sample.get('power_w', 0):.0f}W")
        if self.status.get("device") == "cpu":
            for sample in update.ranks[-HISTORY:]:
                for rank in sample["ranks"]:
                    cpu = rank.get("cpu") or 0.0
                    self._row(box, f"rank{rank['rank']}", f"rank {rank['rank']}").push(cpu, f"CPU {cpu:4.0f}% pid {rank['pid']}")

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
        state = s.get("state", "?")
        style = {"finished": "bold $success", "failed": "bold $error", "hung": "bold $error", "stopped": "bold $warning"}.get(state, "bold $accent")
        self.query_one("#run-title", Static).update(Content.assemble(
            (f" {state} ", f"reverse {style}"), f" {self.run.run_id} · {s.get('trainer')} · {s.get('policy')} · {s.get('world_size')}x{s.get('device')}"
            + (" · smoke" if s.get("smoke") else "")))

    def refresh_progress(self) -> None:
        p, s = self.progress, self.status
        total = p.get("total") or s.get("steps") or 0
        bar = self.query_one("#progress", ProgressBar)
        if total and bar.total != total:
            bar.update(total=total)
        if p.get("step") is not None:
            bar.update(progress=p["step"])
        text = " · ".join([f"{p.get('step') if p.get('step') is not None else '-'}/{total or '?'}", *progress_parts(p, s)])
        if text != self.shown_stats:  # a repaint per poll would cost every idle SSH session bandwidth
            self.shown_stats = text
            self.query_one("#stats", Static).update(text)

    def show_banner(self) -> None:
        banner = self.query_one("#banner", Static)
        important = [e for e in self.events if e.get("severity") in ("error", "warning")]
        state = self.status.get("state")
        if important:
            event = important[-1]
            parts: list[Any] = [(f" {event['title']} ", "bold reverse $error" if event["severity"] == "error" else "bold reverse $warning"), "\n"]
            if event.get("detail"):
                parts.append(event["detail"][:400] + "\n")
            if event.get("suggestion"):
                parts.append(("next: " + event["suggestion"][:400] + "\n", "bold"))
            parts.append(("keys: s stop · m smoke repro · p retry with NCCL_P2P_DISABLE=1 · d stack dump of every rank", "$text-muted"))
            text = Content.assemble(*parts)
            banner.set_class(event["severity"] == "error", "-error")
        elif is_final(self.status):
            code = self.status.get("exit_code")
            text = Content.styled(f"Run {state} (exit code {code}). Folder: {self.run.path}", "bold")
        else:
            return
        banner.update(text)
        banner.display = True

    # -- actions --------------------------------------------------------------------------------
    def action_stop(self) -> None:
        if is_final(self.status):
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

    def restart(self, smoke: bool, env: list[str]) -> None:
        from gpuwizard.preset import load_preset_file

        preset = load_preset_file(self.run.path / "preset.yaml")
        if not is_final(self.status):
            request_stop(self.run)
        self.notify(("Starting a smoke repro (50 steps, batch 2)" if smoke else "Restarting with " + " ".join(env)) + "...")
        self.relaunch(preset, smoke, env)

    @work(thread=True, exclusive=True, group="relaunch", exit_on_error=False)
    def relaunch(self, preset: Any, smoke: bool, env: list[str]) -> None:
        from gpuwizard.errors import UserError
        from gpuwizard.runner.launch import prepare_run, start_run

        deadline = time.monotonic() + 20
        while not is_final(self.run.status()) and time.monotonic() < deadline:
            time.sleep(0.2)
        try:
            run = start_run(prepare_run(preset, smoke=smoke, env=env), on_hang="report")
        except UserError as exc:
            self.post_message(RunStarted(None, exc.paragraph(), []))
            return
        self.post_message(RunStarted(run.path, None, []))

    @on(RunStarted)
    def _run_started(self, message: RunStarted) -> None:
        if message.error:
            self.notify(message.error, severity="error", timeout=10)
        elif message.run_path is not None:
            self.app.switch_screen(MonitorScreen(RunDir(message.run_path)))

    def action_smoke(self) -> None:
        self.restart(smoke=True, env=[])

    def action_retry_p2p(self) -> None:
        self.restart(smoke=False, env=["NCCL_P2P_DISABLE=1"])

    def action_follow(self) -> None:
        log = self.query_one("#log", Log)
        log.auto_scroll = not log.auto_scroll
        if log.auto_scroll:
            log.scroll_end(animate=False)
        self.notify("Following the log tail." if log.auto_scroll else "Paused following; f resumes.")

    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.display = True
        box.focus()

    def action_close_search(self) -> None:
        box = self.query_one("#search", Input)
        if box.display:
            box.display = False
            self.query_one("#log", Log).focus()

    @on(Input.Submitted, "#search")
    def _search(self, event: Input.Submitted) -> None:
        self.search_text, self.search_from = event.value, 0
        self.query_one("#log", Log).focus()
        self.action_next_match()

    def action_next_match(self) -> None:
        if not self.search_text:
            return
        log = self.query_one("#log", Log)
        lines = log.lines
        needle = self.search_text.lower()
        for offset in range(len(lines)):
            index = (self.search_from + offset) % max(len(lines), 1)
            if needle in lines[index].lower():
                log.auto_scroll = False
                log.scroll_to(y=max(0, index - 2), animate=False)
                self.search_from = index + 1
                self.notify(f"line {index + 1}: {lines[index][:120]}", title=f"match for {self.search_text!r}")
                return
        self.notify(f"No match for {self.search_text!r}", severity="warning")

    def action_wizard(self) -> None:
        from gpuwizard.preset import load_preset_file
        from gpuwizard.tui.wizard import WizardScreen

        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            self.app.switch_screen(WizardScreen(load_preset_file(self.run.path / "preset.yaml")))
