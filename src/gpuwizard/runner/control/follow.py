"""Reads a run folder as it grows (log, events, samples, progress, status) and words its progress; stopping a run
is control/stopping.py."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic

from gpuwizard.runs.records import (
    Event,
    GpuSample,
    Metric,
    Progress,
    RanksSample,
    RecordError,
    RecordT,
    Status,
    parse_lines,
)
from gpuwizard.runs.rundir import RunDir
from gpuwizard.runs.tail import LogTail


@dataclass
class RunUpdate:
    """What is new in a run folder since the last poll; `status` is None while status.json cannot be read."""

    lines: list[str] = field(default_factory=list)
    bar: str | None = None
    events: list[Event] = field(default_factory=list)
    gpu: list[GpuSample] = field(default_factory=list)
    ranks: list[RanksSample] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)
    progress: Progress | None = None
    status: Status | None = None
    problem: str | None = None
    unreadable: list[str] = field(default_factory=list)
    """Files of the folder that newly cannot be read (a FIFO or folder in their place), one line each."""


NODE_FILES_EVERY_S = 2.0
"""How often a follower looks for new per-node GPU files (gpu-<node>.jsonl of a SLURM job)."""


class LinesTail(Generic[RecordT]):
    """The records appended to a JSON-lines file; lines that are not a record are counted, not fatal."""

    def __init__(self, path: os.PathLike[str], kind: type[RecordT]):
        self.tail = LogTail(path)
        self.kind = kind

    def read(self) -> list[RecordT]:
        chunk = self.tail.read()
        if chunk.text is None:
            return []
        records, _ = parse_lines(chunk.text, self.kind)  # a line that is not a record is skipped
        return records


class RunFollower:
    """Incremental reader of one run folder; `poll()` returns what is new since the last call.

    With `read_log=False` the log's lines are not shipped (a pane that reads the file itself only needs its size).
    """

    def __init__(self, run: RunDir, log_offset: int = 0, read_log: bool = True):
        self.run = run
        self.read_log = read_log
        self.log = LogTail(run.log, offset=log_offset, chunk=1 << 20)  # small batches keep keys responsive in a flood
        self.events = LinesTail(run.events_file, Event)
        self.gpu = LinesTail(run.gpu_file, GpuSample)
        self.ranks = LinesTail(run.ranks_file, RanksSample)
        self.metrics = LinesTail(run.metrics_file, Metric)
        self.node_gpu: dict[Path, LinesTail[GpuSample]] = {}
        self._nodes_looked = -NODE_FILES_EVERY_S
        self._progress_mtime = 0.0
        self._told: set[str] = set()

    def poll(self) -> RunUpdate:
        update = RunUpdate()
        if self.read_log:
            chunk = self.log.read()
            update.lines, update.bar = chunk.lines, chunk.bar
        else:
            self.log.check()  # the pane reads the log itself; a log that cannot be read is still said
        update.events = self.events.read()
        update.gpu = self.gpu.read()
        if time.monotonic() - self._nodes_looked >= NODE_FILES_EVERY_S:  # a listing, not on every 0.1 s poll
            self._nodes_looked = time.monotonic()
            for path in sorted(self.run.path.glob("gpu-*.jsonl")):  # the nodes of a SLURM job, one file each
                if path not in self.node_gpu:
                    self.node_gpu[path] = LinesTail(path, GpuSample)
        for tail in self.node_gpu.values():
            update.gpu += tail.read()
        update.ranks = self.ranks.read()
        update.metrics = self.metrics.read()
        try:
            mtime = (self.run.path / "progress.json").stat().st_mtime
        except OSError:
            mtime = 0.0
        if mtime != self._progress_mtime:
            self._progress_mtime = mtime
            update.progress = self.run.progress()
        try:
            update.status = self.run.status()
        except RecordError as exc:
            update.problem = str(exc)
        problems = {tail.problem for tail in self._tails() if tail.problem}
        update.unreadable = sorted(problems - self._told)
        self._told = problems
        return update

    def _tails(self) -> list[LogTail]:
        return [
            self.log,
            self.events.tail,
            self.gpu.tail,
            self.ranks.tail,
            self.metrics.tail,
            *(t.tail for t in self.node_gpu.values()),
        ]

    def close(self) -> None:
        for tail in self._tails():
            tail.close()


def clock(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "--:--"
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def progress_parts(progress: Progress | None, status: Status | None) -> list[str]:
    """loss, lr, samples/s and ETA, as shown in status lines and the monitor."""
    p = progress or Progress()
    parts = []
    if p.loss is not None:
        parts.append(f"loss {p.loss:.4g}")
    if p.held_out_loss is not None:
        low = p.best_held_out_loss
        best = f" (best {low:.4g} at step {p.best_held_out_step})" if low is not None else ""
        parts.append(f"held-out {p.held_out_loss:.4g}{best}")
    if p.lr is not None:
        parts.append(f"lr {p.lr:.2e}")
    if p.samples_per_s is not None:
        parts.append(f"{p.samples_per_s:.0f} smp/s")
    if p.step is not None and not (status and status.final):
        parts.append(f"ETA {clock(p.eta_s)}")
    return parts


def status_line(progress: Progress | None, status: Status, now: float | None = None) -> str:
    """One line: elapsed, state, step/total, then progress_parts."""
    p = progress or Progress()
    step, total = p.step, p.total or status.steps
    parts = [f"[{clock(status.elapsed_s(now))}]", str(status.state)]
    if status.waiting_at_slurm:
        reason = f": {status.slurm_reason}" if status.slurm_reason else ""
        parts.append(f"SLURM job {status.slurm_job_id} {(status.slurm_state or '').lower()}{reason}")
    elif step is not None:
        pct = f" ({100 * step / total:.0f}%)" if total else ""
        parts.append(f"step {step}/{total or '?'}{pct}")
    else:
        parts.append("waiting for the first step")
    return "  ".join(parts + progress_parts(progress, status))


def event_text(event: Event) -> str:
    text = f"{event.severity.upper()}: {event.title}"
    if event.detail:
        text += f"\n  {event.detail}"
    if event.suggestion:
        text += f"\n  next: {event.suggestion}"
    return text
