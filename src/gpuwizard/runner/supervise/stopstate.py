"""Why the supervisor's job is being stopped, in one object: the reason (the first one stands), how often the user
asked (a second stop waits for nothing), and the checkpoint write a user's stop waits for."""

from __future__ import annotations

from collections.abc import Callable

from gpuwizard.core.kinds import StopReason


class StopState:
    """Set from the signal handler and the job's loop, read by both jobs and by the final status."""

    def __init__(self) -> None:
        self.reason: StopReason | None = None
        self.requests = 0
        self.checkpoint_seen: float | None = None
        self.linked_before: str | None = None
        """What `checkpoints/last` named when the current checkpoint write began."""
        self.wait_shown = False

    def request(self) -> None:
        """The user's stop (SIGTERM, SIGINT); a second one does not wait for a checkpoint write."""
        self.requests += 1
        self.stop_for(StopReason.USER)

    def stop_for(self, reason: StopReason) -> None:
        """A stop for `reason`, unless one is under way: a stop the user asked for stays the user's."""
        self.reason = self.reason or reason

    def folder_gone(self) -> None:
        """The run folder was deleted: whatever the reason was, there is nowhere left to record it."""
        self.reason = StopReason.FOLDER_GONE

    def ended_first(self) -> None:
        """The job ended on its own before a user's stop reached it: its own end is the truth."""
        if self.reason == StopReason.USER:
            self.reason = None

    def checkpoint_began(self, started: float | None, last: Callable[[], str | None]) -> None:
        """A checkpoint write the monitor saw start: what `last` named before it, read once per write."""
        if started is not None and started != self.checkpoint_seen:
            self.checkpoint_seen = started
            self.linked_before = last()

    def may_wait(self) -> bool:
        """Only the user's first stop waits for a checkpoint write."""
        return self.reason == StopReason.USER and self.requests <= 1

    def first_wait(self) -> bool:
        """True once: the wait is said in one event and one status change."""
        shown, self.wait_shown = self.wait_shown, True
        return not shown
