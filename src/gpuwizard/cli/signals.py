"""What a signal means to `gpuwizard run`: SIGINT and SIGTERM stop the run (as torchrun itself would), SIGHUP (the SSH
session dropped) detaches. Light on purpose: the handlers are in before the heavy modules of a launch load."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any

from gpuwizard.core.codes import ExitCode
from gpuwizard.runner.host.interrupt import StartCancelled

if TYPE_CHECKING:
    from gpuwizard.core.errors import UserError
    from gpuwizard.runs.rundir import RunDir

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
RETRY_S = 0.02
"""How soon a stop signal that arrived inside an import is delivered again."""


def importing(frame: FrameType | None) -> bool:
    """Whether the interrupted code runs inside an import: an exception raised there can break an extension
    module's own import of another (pydantic_core's Rust init panics when its `datetime` import fails)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


class RunSignals:
    """The signals of one `run` command. While the run starts, SIGINT and SIGTERM cut the start short (start_run
    undoes it); once its job is launched each one is a stop request, sent from the handler at once (so a stop reaches
    the run even while the output is blocked); SIGHUP never interrupts: it detaches once the start is over."""

    def __init__(self) -> None:
        self.run: RunDir | None = None
        self.stops = 0
        self.last: signal.Signals | None = None
        self.hangup = False
        self.failure: UserError | None = None
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        """Every handled signal not ignored already (`nohup` ignores SIGHUP, a shell's `&` SIGINT); only the main
        thread gets signals, so a command run from another keeps the defaults."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in HANDLED:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                self.previous[sig] = signal.signal(sig, self.handle)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous.clear()

    def handle(self, signum: int, frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        if sig == signal.SIGHUP:
            self.hangup = True
            return
        if self.run is None and importing(frame):  # the same signal again in a moment, outside the import
            timer = threading.Timer(RETRY_S, os.kill, (os.getpid(), signum))
            timer.daemon = True
            timer.start()
            return
        self.last = sig
        if self.run is None:
            raise StartCancelled(f"stopped by {sig.name} before the job started")
        from gpuwizard.cli.runs import stop_recorded  # loaded by now: the run is launched
        from gpuwizard.core.errors import UserError

        self.stops += 1
        try:
            stop_recorded(self.run)
        except UserError as exc:
            self.failure = exc

    def launched(self, run: RunDir) -> None:
        """start_run's on_launched: from here on a stop signal is for the run."""
        self.run = run

    def cut_short(self, exc: StartCancelled) -> int:
        """The start was cut short (start_run has undone it): what is left of it, and the exit code."""
        with contextlib.suppress(OSError):
            if exc.recorded is not None:
                sys.stderr.write(f"run {exc.recorded.run_id}: {exc.why}; it is recorded as stopped\n")
            else:
                sys.stderr.write(f"{exc.why}: nothing was started\n")
        if exc.recorded is not None:
            return ExitCode.STOPPED
        return 128 + int(self.last) if self.last is not None else int(ExitCode.INTERRUPTED)

    def stopping_text(self, first: bool) -> str:
        name = self.last.name if self.last is not None else "a stop"
        if not first:
            return f"\n{name} again: stopping at once...\n"
        return (
            f"\n{name}: stopping the job (every rank, then a forced kill after 10 s; a checkpoint being written is "
            "waited for, a second Ctrl-C or SIGTERM stops at once)...\n"
        )
