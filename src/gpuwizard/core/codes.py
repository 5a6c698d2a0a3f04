"""Exit codes (of every command) and run states, one name each, used everywhere."""

from __future__ import annotations

from enum import IntEnum, StrEnum


class ExitCode(IntEnum):
    """What `gpuwizard` exits with; any other non-zero code is the job's own."""

    OK = 0
    FAILED = 1
    INVALID = 2
    HANG = 3
    STOPPED = 4
    NOT_STARTED = 127
    INTERRUPTED = 130


class RunState(StrEnum):
    """Where a run stands, as written in its status.json."""

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    FINISHED = "finished"
    FAILED = "failed"
    HUNG = "hung"
    STOPPED = "stopped"


ACTIVE_STATES = frozenset({RunState.STARTING, RunState.RUNNING, RunState.STOPPING})
FINAL_STATES = frozenset({RunState.FINISHED, RunState.FAILED, RunState.HUNG, RunState.STOPPED})
