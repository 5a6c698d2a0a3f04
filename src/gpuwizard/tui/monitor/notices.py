"""What the monitor tells the user beyond its panes and banner: a toast per note, and the bell and desktop notice that
settings.notify asks for at a fresh hang and at the run's end."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Protocol

from gpuwizard.core.kinds import EventKind, Severity
from gpuwizard.core.safetext import safe_line

if TYPE_CHECKING:
    from textual.app import App
    from textual.notifications import SeverityLevel

    from gpuwizard.model.settings_schema import NotifySettings
    from gpuwizard.runner.supervise.notify import Notice
    from gpuwizard.runs.records import Event
    from gpuwizard.runs.rundir import RunDir

FRESH_EVENT_S = 5.0
"""Events this much older than the monitor are history: they show, but ring no bell."""


class NoticeHost(Protocol):
    """The monitor screen, as its notices see it."""

    @property
    def app(self) -> App[Any]: ...
    @property
    def run(self) -> RunDir: ...

    def notify(
        self,
        message: str,
        *,
        title: str = ...,
        severity: SeverityLevel = ...,
        timeout: float | None = ...,
        markup: bool = ...,
    ) -> None: ...


class RunNotices:
    """The toasts of one monitored run and its notifications, with the settings read once."""

    def __init__(self, host: NoticeHost, opened_t: float):
        self.host = host
        self.opened_t = opened_t
        self.settings: NotifySettings | None = None

    def announce(self, event: Event) -> None:
        """A toast for a note; a warning or an error is the banner's, with its next step (a toast of it too covered
        half the log at 80x24, a `/` match among it); a fresh hang rings."""
        if event.severity == Severity.INFO:
            self.host.notify(safe_line(event.title), severity="information", timeout=4, markup=False)
        if event.kind == EventKind.HANG_SUSPECTED and event.t >= self.opened_t - FRESH_EVENT_S:
            from gpuwizard.runner.supervise.notify import hang_notice

            self.tell(hang_notice(self.host.run.run_id, event, str(self.host.run.path)))

    def tell(self, notice: Notice) -> None:
        """The bell and the desktop notification settings.notify asks for (the supervisor runs its command)."""
        from gpuwizard.model.settings import notify_settings
        from gpuwizard.runner.supervise.notify import desktop_sequences, wanted

        settings = self.settings = self.settings or notify_settings()
        if not wanted(notice, settings):
            return
        app = self.host.app
        if settings.bell:
            app.bell()
        terminal = sys.__stderr__  # the stream Textual draws on; it has no call for other sequences
        if settings.desktop and not app.is_headless and terminal is not None:
            try:
                terminal.write(desktop_sequences(notice))  # one write, between two of Textual's frames
                terminal.flush()
            except (OSError, ValueError):
                pass  # the terminal went away; the run goes on
