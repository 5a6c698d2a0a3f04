"""events.jsonl: one Event per line, and the typed `data` of the events whose data a reader uses (a hang's stall
and stacks, a stop's wait for a checkpoint, a stack dump). Writers fill `data` through a payload's `data()` and
readers read it through its `of(event)`, so a misspelt key is a type error on both sides."""

from __future__ import annotations

import time
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuwizard.core.kinds import EventKind, Severity
from gpuwizard.runs.recordio import Record, Seconds, known_or


class Event(Record):
    """One line of events.jsonl: something the user must see (a hang, a failed rank, a plan mismatch)."""

    kind: Annotated[EventKind, known_or(EventKind, EventKind.UNKNOWN)]
    """A kind this version does not know (a newer gpuwizard wrote it) reads as UNKNOWN: the event is still shown by
    its title, severity and detail, and nothing that keys on a kind mistakes it for another."""
    severity: Severity = Field(strict=False)  # as read back from JSON, a plain string
    title: str
    detail: str = ""
    suggestion: str = ""
    rank: int | None = None
    t: Seconds = Field(default_factory=time.time)
    data: dict[str, Any] = {}


class Payload(BaseModel):
    """The typed data of one kind of event. Closed when written (a misspelt field is refused); read back from a line
    leniently: keys it does not name are left aside, and a line that does not hold it reads as None."""

    model_config = ConfigDict(extra="forbid")

    def data(self) -> dict[str, Any]:
        return self.model_dump()

    @classmethod
    def of(cls, event: Event) -> Self | None:
        try:
            return cls.model_validate({k: v for k, v in event.data.items() if k in cls.model_fields})
        except ValidationError:
            return None


class CheckpointWait(Payload):
    """stop_waits_for_checkpoint: a stop waits for the checkpoint being written, from `started_t` (wall time) for at
    most `limit_s`."""

    started_t: Seconds
    limit_s: Seconds


class Stacks(Payload):
    """stack_dump (and a hang's `stacks`): every rank's main thread, innermost frame first, and what they show."""

    ok: bool
    note: str
    per_rank: dict[int, list[str]]
    outside_collective: list[int]
    """Ranks not inside a collective while the others are: the likely cause of a hang."""
    files: list[str]
    """py-spy's whole dump of each rank (every frame of every thread)."""
    unreadable: list[int] = []


class RankVerdict(Payload):
    """slow_progress (and a hang's verdict): what the ranks' CPU and the GPUs' power say about a stall."""

    busy: bool
    """Every rank uses CPU and the GPUs draw power: a slow step, not a hang."""
    spinning: bool
    """The GPUs run at full utilization on low power: NCCL kernels waiting in a collective."""
    cpu: dict[int, float]
    differing_rank: int | None
    summary: str


class Hang(RankVerdict):
    """hang_suspected: no progress for `stale_s` against a limit of `limit_s`, the verdict, and the stacks taken."""

    stale_s: Seconds
    limit_s: Seconds
    stacks: Stacks | None = None
