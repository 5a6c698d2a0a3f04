"""A start cut short on purpose: a stop signal to `run`, the wizard quit while it launched. start_run undoes the
start and says on the exception what is left of it. Imports nothing, so a signal handler can raise it while the
heavy modules of a launch still load."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuwizard.runs.rundir import RunDir


class StartCancelled(KeyboardInterrupt):
    """`why` goes into the run's record; `recorded` names the run folder that says it stopped, None when nothing was
    published."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why
        self.recorded: RunDir | None = None
