"""The sweep folder as a file format: <data>/sweeps/<id>/sweep.json (the grid, its runs and their states) and each
run's preset beside it. The scheduler and the commands that stop or resume a sweep change it under one lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gpuwizard.core import paths
from gpuwizard.core.errors import UserError, problem
from gpuwizard.core.kinds import SweepState
from gpuwizard.core.schema import rule_error
from gpuwizard.core.yamlio import atomic_write
from gpuwizard.runs.records import ProcessRef, Record, RecordError, read_record

ENDED = frozenset({SweepState.FINISHED, SweepState.FAILED, SweepState.STOPPED, SweepState.HUNG})
ACTIVE = frozenset({SweepState.STARTING, SweepState.RUNNING})
SWEEP_FILE = "sweep.json"


class SweepRun(Record):
    """One combination: the values it sets, where it runs and how far it got."""

    index: int = Field(ge=0)
    values: dict[str, Any]
    preset_file: str
    """Its full preset, in the sweep folder (runs/NN.yaml)."""
    processes: int = Field(ge=1)
    """Processes (CPU) or GPUs it takes on this machine."""
    device: Literal["cpu", "cuda"]
    state: SweepState = Field(SweepState.QUEUED, strict=False)  # as read back from JSON, a plain string
    run_id: str | None = None
    run_path: str | None = None
    devices: list[int] = []
    """The GPUs it was placed on (CUDA_VISIBLE_DEVICES); empty on the CPU."""
    resume_from: str | None = None
    """The run a resumed sweep continues this one from (its checkpoint)."""
    error: str | None = None
    array: str | None = None
    """On SLURM: the job id of the array it runs in (its ArrayJobId)."""
    task: int | None = Field(None, ge=0)
    """Its task in that array: squeue and scontrol name it ARRAY_TASK, and so does its run's status."""
    own_job: str | None = None
    """On SLURM: why it went as a job of its own instead of a task of an array."""

    @field_validator("preset_file", "run_id", "run_path", "resume_from")
    @classmethod
    def _a_path(cls, value: str | None) -> str | None:
        if value is not None and "\0" in value:
            raise rule_error(None, "contains a NUL byte, which no path holds", None, value)
        return value

    @field_validator("preset_file")
    @classmethod
    def _in_the_sweep(cls, value: str) -> str:
        if value.startswith("/") or ".." in value.split("/"):
            raise rule_error(None, "is no file of the sweep folder", None, value)
        return value

    @property
    def array_task(self) -> str | None:
        return f"{self.array}_{self.task}" if self.array is not None and self.task is not None else None


class SlurmArray(Record):
    """One `sbatch --array` of a SLURM sweep: runs that share one shape (nodes, tasks, GPUs, CPUs, time, partition,
    sbatch options), submitted held and released once each of its runs is staged."""

    job_id: str
    """Its ArrayJobId: `scancel` of it cancels every task."""
    runs: list[int]
    """The sweep's run each task runs: task T runs runs[T]."""
    held: bool = True
    """Submitted held and neither released nor cancelled yet (a scheduler killed while staging its runs)."""


class Sweep(Record):
    """A sweep of one preset: its grid, the metric that names the best run, its runs and its scheduler."""

    sweep_id: str
    preset: str
    source: str
    created: float
    grid: dict[str, list[Any]]
    seeds: int | None = None
    metric: str = "final_loss"
    workdir: str
    """The folder the sweep was started from: relative output folders are relative to it."""
    runs: list[SweepRun]
    scheduler: ProcessRef | None = None
    stopped: bool = False
    """`sweep stop` ended it: the scheduler starts nothing more."""
    slurm: bool = False
    """The runs go to SLURM, as job arrays (one per shape): the cluster queues them, not this machine's devices."""
    arrays: list[SlurmArray] = []
    """On SLURM: every array submitted for it, resumed runs' new ones included."""

    @model_validator(mode="after")
    def _runs_in_order(self) -> Sweep:
        """Each run's index is its place in the list: the commands look a run up by it."""
        for place, run in enumerate(self.runs):
            if run.index != place:
                raise rule_error(f"runs.{place}.index", f"must be {place}, its place in the list", None, run.index)
        return self

    @property
    def ended(self) -> bool:
        return all(r.state in ENDED for r in self.runs)


def sweeps_dir() -> Path:
    return paths.data_dir() / "sweeps"


def new_sweep_id(preset: str) -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + f"{preset[:40]}-{secrets.token_hex(2)}"


def read_sweep(folder: Path) -> Sweep:
    return read_record(folder / SWEEP_FILE, Sweep)


def write_sweep(folder: Path, sweep: Sweep) -> None:
    atomic_write(folder / SWEEP_FILE, sweep.to_json_text() + "\n")


@contextlib.contextmanager
def changing(folder: Path) -> Iterator[Sweep]:
    """Read, change and write sweep.json under its lock, so the scheduler and `sweep stop` never lose a change."""
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        sweep = read_sweep(folder)
        yield sweep
        write_sweep(folder, sweep)
    finally:
        os.close(fd)


def find_sweep(sweep_id: str) -> Path | None:
    """The sweep folder an id names, or its unique start; None when none or several match."""
    base = sweeps_dir()
    if not sweep_id or "/" in sweep_id or "\0" in sweep_id or sweep_id.startswith("."):
        return None
    try:
        if (base / sweep_id / SWEEP_FILE).is_file():
            return base / sweep_id
        found = [p for p in base.iterdir() if p.name.startswith(sweep_id) and (p / SWEEP_FILE).is_file()]
    except OSError:  # a name longer than a file name may be, an unreadable folder
        return None
    return found[0] if len(found) == 1 else None


def chosen_sweep(sweep_id: str | None) -> Path:
    """The folder of the sweep an id names (or the newest), one paragraph when there is none."""
    if sweep_id is None:
        newest = listed_sweeps()
        if not newest:
            raise UserError(
                problem(
                    "SWEEP_ID", "there are no sweeps yet", "start one with `gpuwizard sweep PRESET --set FIELD=V1,V2`"
                )
            )
        return readable(sweeps_dir() / newest[0])
    folder = find_sweep(sweep_id)
    if folder is None:
        raise UserError(
            problem(
                "SWEEP_ID",
                "no sweep (or more than one) has this id",
                f"see the sweeps in {sweeps_dir()}",
                value=sweep_id,
            )
        )
    return readable(folder)


def readable(folder: Path) -> Path:
    """The folder of a sweep whose sweep.json reads, or one paragraph saying why it does not and what still works."""
    try:
        read_sweep(folder)
    except RecordError as exc:
        raise UserError(
            problem(
                "SWEEP_ID",
                f"sweep {folder.name} cannot be shown, stopped or resumed: {exc}",
                f"its runs are runs of their own (`gpuwizard runs`, `gpuwizard stop RUN_ID`); look inside {folder}, "
                "or remove the folder once none of its runs is running",
                value=folder.name,
            )
        ) from None
    return folder


def listed_sweeps() -> list[str]:
    """Sweep ids, newest first."""
    try:
        return sorted((p.name for p in sweeps_dir().iterdir() if (p / SWEEP_FILE).is_file()), reverse=True)
    except OSError:
        return []
