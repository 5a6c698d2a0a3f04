"""Whose an output folder is: the marker a run leaves beside the folder its trainer writes, naming the run and the
first run of its resume chain, so a resume takes only checkpoints its own chain wrote.

The marker sits where the output folder's lock does (runner/host/locks.py): beside the folder,
`.<name>.gpuwizard-run.json` in its parent, or inside it where the parent cannot be written. One per node, like the
lock: the nodes of a job started by hand share one folder and each has its own run id.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from pydantic import Field

from gpuwizard.core.yamlio import atomic_write
from gpuwizard.runs.records import Job, Record, RecordError, Seconds, read_record
from gpuwizard.runs.rundir import RunDir, list_runs

OWNER_MODE = 0o644
"""Readable by everyone who may share the folder: whoever resumes from it checks whose it is."""


class OutputOwner(Record):
    """The marker of an output folder: the run writing it, and the first run of that run's resume chain."""

    run_id: str
    chain: str
    """The first run of the resume chain (the run's own id for a fresh run): every run of one chain may resume it."""
    node_rank: int = Field(0, ge=0)
    t: Seconds = Field(default_factory=time.time)


def owner_files(output_dir: Path, node_rank: int = 0) -> list[Path]:
    """Where the marker of an output folder may be, in order: beside it, then inside it."""
    out = Path(output_dir).resolve()
    suffix = f"-node{node_rank}" if node_rank else ""
    return [out.parent / f".{out.name}.gpuwizard-run{suffix}.json", out / f".gpuwizard-run{suffix}.json"]


def read_owner(output_dir: Path, node_rank: int = 0) -> OutputOwner | None:
    """The run that marked the folder as its own, or None (no marker, or one that cannot be read)."""
    for path in owner_files(output_dir, node_rank):
        with contextlib.suppress(RecordError):
            return read_record(path, OutputOwner)
    return None


def write_owner(output_dir: Path, owner: OutputOwner) -> Path:
    """Mark the folder as the owner's: beside it, or inside an existing folder whose parent cannot be written;
    OSError when neither can be."""
    beside, inside = owner_files(output_dir, owner.node_rank)
    try:
        beside.parent.mkdir(parents=True, exist_ok=True)
        target = beside
        atomic_write(target, owner.to_json_text(), make_parents=False)
    except PermissionError:
        if not inside.parent.is_dir():
            raise
        target = inside
        atomic_write(target, owner.to_json_text(), make_parents=False)
    with contextlib.suppress(OSError):
        os.chmod(target, OWNER_MODE)  # mkstemp makes it 0600
    return target


def newest_full_run(preset_name: str, output_dir: Path | None = None) -> tuple[RunDir, Job] | None:
    """The newest run of a preset that `run --resume` would continue: not a smoke run or a probe's measurement, and
    on `output_dir` when one is given (a preset with a fixed folder)."""
    wanted = str(output_dir.resolve()) if output_dir is not None else None
    return next(((run, job) for run, job in full_runs(preset_name) if wanted is None or job.output_dir == wanted), None)


def full_runs(preset_name: str) -> Iterator[tuple[RunDir, Job]]:
    """A preset's runs that a resume may continue, newest first: not smoke runs or a probe's, with a readable job
    that names its output folder."""
    for entry in list_runs(preset_name):
        status = entry.status
        if status is None or status.smoke or status.probe:
            continue
        try:
            job = entry.run.job()
        except RecordError:
            continue
        if job.output_dir:
            yield entry.run, job
