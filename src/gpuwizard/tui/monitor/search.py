"""`/` and `n` in the monitor: the whole log file searched off the event loop (a long run's log is far larger than
the pane), each search going on from the last match."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeVar

from textual.widget import Widget
from textual.widgets import Input

from gpuwizard.tui.base.messages import SearchDone
from gpuwizard.tui.widgets.logview import LogView

if TYPE_CHECKING:
    from textual.message import Message
    from textual.notifications import SeverityLevel
    from textual.worker import Worker

    from gpuwizard.runs.logindex import LogIndex

W = TypeVar("W", bound=Widget)


class SearchHost(Protocol):
    """The monitor screen, as its search sees it: the log's index, its pane and search box, and its means."""

    @property
    def index(self) -> LogIndex: ...

    def query_one(self, selector: str, expect_type: type[W]) -> W: ...
    def notify(
        self,
        message: str,
        *,
        title: str = ...,
        severity: SeverityLevel = ...,
        timeout: float | None = ...,
        markup: bool = ...,
    ) -> None: ...
    def post_message(self, message: Message) -> bool: ...
    def run_worker(
        self, work: Callable[[], None], *, group: str, exit_on_error: bool, exclusive: bool, thread: bool
    ) -> Worker[None]: ...


class LogSearch:
    """The text searched for and the line the next search starts from."""

    def __init__(self, host: SearchHost):
        self.host = host
        self.text = ""
        self.start = 0

    def open(self) -> None:
        box = self.host.query_one("#search", Input)
        box.display = True
        box.focus()

    def close(self) -> None:
        box = self.host.query_one("#search", Input)
        if box.display:
            box.display = False
            self.host.query_one("#log", LogView).focus()

    def submitted(self, text: str) -> None:
        """A new search, from the highlighted line on (or the top of the pane)."""
        log = self.host.query_one("#log", LogView)
        self.text = text
        self.start = log.highlight + 1 if log.highlight is not None else log.scroll_offset.y
        log.focus()
        self.next()

    def next(self) -> None:
        if self.text:
            self.host.notify(f"Searching the whole log for {self.text!r}...", timeout=2)
            work = partial(self.scan, self.host.index, self.text, self.start)
            self.host.run_worker(work, group="search", exit_on_error=False, exclusive=True, thread=True)

    def scan(self, index: LogIndex, needle: str, start: int) -> None:
        """Every line of the log file from `start` (on a worker thread); the result comes back as a message."""
        self.host.post_message(SearchDone(needle, index.search(needle, start)))

    def found(self, message: SearchDone) -> None:
        if message.needle != self.text:
            return
        if message.line is None:
            self.host.notify(f"No match for {message.needle!r}", severity="warning")
            return
        log = self.host.query_one("#log", LogView)
        log.show_line(message.line)
        self.start = message.line + 1
        self.host.notify(
            f"line {message.line + 1}: {log.line(message.line)[:120]}",
            title=f"match for {message.needle!r}",
            markup=False,
        )
