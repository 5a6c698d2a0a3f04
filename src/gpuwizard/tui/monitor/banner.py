"""What the monitor's banner says: the newest warning or error with a live clock, or how the run ended.

Pure functions of the run's records and the time, so the banner is redrawn each second while a hang lasts and its
text is cut only between whole sentences (`e` shows all of it)."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import Any

from textual.content import Content

from gpuwizard.core.codes import RunState
from gpuwizard.core.kinds import EventKind, Severity
from gpuwizard.core.safetext import safe_line, safe_text
from gpuwizard.runner.control.follow import clock
from gpuwizard.runs.events import CheckpointWait, Hang
from gpuwizard.runs.records import Event, Progress, Status

CLAUSE_END = re.compile(r"(?<=[.;!?])\s+(?=\S)")
MORE = " … e: all of it"


@dataclass
class Banner:
    body: Content
    error: bool
    keys: str
    """The keys that act on it, shown on its bottom border."""


def important(events: list[Event], status: Status | None) -> Event | None:
    """The newest warning or error; once the run has ended only an error (the cause) outranks how it ended."""
    for event in reversed(events):
        if event.severity == Severity.ERROR or (event.severity == Severity.WARNING and not (status and status.final)):
            return event
    return None


def open_hang(events: list[Event], progress: Progress | None, status: Status | None) -> Event | None:
    """The hang being suffered now: reported, with no step since, on a run still going."""
    if status is None or status.final:
        return None
    hang = next((e for e in reversed(events) if e.kind == EventKind.HANG_SUSPECTED), None)
    if hang is None or (progress and progress.last_progress_t and progress.last_progress_t > hang.t):
        return None
    return hang


def stalled_for(hang: Event, end: float) -> float:
    data = Hang.of(hang)
    return end - (hang.t - (data.stale_s if data else 0.0))


def live_title(event: Event, progress: Progress | None, status: Status | None, now: float) -> str:
    """The event's title, its clock kept running: how long without progress, how long a stop has waited."""
    if event.kind == EventKind.HANG_SUSPECTED:
        last = progress.last_progress_t if progress else None
        resumed = bool(last and last > event.t)
        if last is not None and resumed:
            end = last
        else:
            end = status.ended if status is not None and status.final and status.ended else now
        return f"hang suspected: no progress for {clock(stalled_for(event, end))}" + (
            " (progress resumed)" if resumed else ""
        )
    if event.kind == EventKind.STOP_WAITS_FOR_CHECKPOINT and status is not None and not status.final:
        wait = CheckpointWait.of(event)
        started = wait.started_t if wait else event.t
        return f"{event.title}: {clock(now - started)} of at most {clock(wait.limit_s if wait else None)}"
    return event.title


def rows(text: str, width: int) -> int:
    return len(textwrap.wrap(text, max(10, width))) or 1


def fit(paragraphs: list[str], width: int, budget: int) -> tuple[list[str], bool]:
    """A prefix of each paragraph, grown a sentence (or clause) at a time, taking turns, while all fit `budget` rows
    of `width`: the diagnosis and the next step both start to show, and nothing is cut mid-sentence."""
    sentences = [CLAUSE_END.split(p) for p in paragraphs]
    taken = [0] * len(paragraphs)

    def shown(counts: list[int]) -> list[str]:
        return [" ".join(parts[:n]) for parts, n in zip(sentences, counts) if n]

    def height(counts: list[int]) -> int:
        texts = shown(counts)
        cut = counts != [len(parts) for parts in sentences]
        return sum(rows(t + (MORE if cut and i == len(texts) - 1 else ""), width) for i, t in enumerate(texts))

    grew = True
    while grew:
        grew = False
        for i, parts in enumerate(sentences):
            if taken[i] < len(parts) and height([*taken[:i], taken[i] + 1, *taken[i + 1 :]]) <= budget:
                taken[i] += 1
                grew = True
    return shown(taken), taken != [len(parts) for parts in sentences]


def trained(progress: Progress | None) -> bool:
    """The run reached a step: only then may a checkpoint exist to resume from."""
    return progress is not None and progress.step is not None


def banner(
    events: list[Event],
    status: Status | None,
    progress: Progress | None,
    problem: str | None,
    folder: str,
    now: float,
    width: int,
    budget: int,
    hang_keys: str,
    can_continue: bool = False,
) -> Banner | None:
    """The banner for this moment, or None when there is nothing to say."""
    event = important(events, status)
    if event is not None:
        title = safe_line(live_title(event, progress, status, now))  # every string from the job or the folder
        detail, suggestion = safe_text(event.detail), safe_text(event.suggestion)
        paragraphs = [p for p in (detail, "next: " + suggestion if suggestion else "") if p]
        shown, cut = fit(paragraphs, width, budget - rows(title, width))
        parts: list[Any] = [
            (f" {title} ", "bold reverse $error" if event.severity == Severity.ERROR else "bold reverse $warning")
        ]
        for text in shown:
            parts += ["\n", (text, "bold") if text.startswith("next: ") else text]
        if cut:
            parts.append((MORE, "$text-muted"))
        if event.kind == EventKind.STOP_WAITS_FOR_CHECKPOINT:
            keys = "s stop at once · e details"
        elif status is not None and status.final and not trained(progress):  # no checkpoint: a resume cannot start
            keys = "w wizard (start again) · e details"
        elif status is not None and status.final:
            keys = "r resume · m smoke repro · e details"
        else:
            keys = f"{hang_keys} · e details"
        return Banner(Content.assemble(*parts), event.severity == Severity.ERROR, keys)
    if status is None and problem:
        return Banner(Content.styled(safe_line(f"This run folder cannot be read: {problem}"), "bold"), True, "")
    if status is not None and status.final:
        why = f": {safe_line(status.error)}" if status.error else ""
        if status.state == RunState.FINISHED:
            then = " r continues it to more steps." if can_continue and not status.smoke else ""
        elif not trained(progress):  # stopped before its first step: nothing was saved
            then = "" if status.smoke else " It trained no step, so there is no checkpoint: w starts it again."
        else:
            then = "" if status.smoke else " r resumes it from its last checkpoint."
        text = f"Run {status.state} (exit code {status.exit_code}){why}. Folder: {folder}.{then}"
        return Banner(Content.styled(text, "bold"), status.state in (RunState.FAILED, RunState.HUNG), "")
    return None
