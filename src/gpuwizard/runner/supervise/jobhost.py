"""What the job followers (localjob.follow_local, slurmjob.follow_slurm) use of the supervisor that owns the job:
its run folder and job record, its stop and failure state, and the writes that must never kill it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runner.host.cgroup import JobCgroup
from gpuwizard.runner.host.locks import OutputLock
from gpuwizard.runs.records import Event, GpuSample, Job
from gpuwizard.runs.rundir import RunDir
from gpuwizard.runs.tail import Chunk

if TYPE_CHECKING:
    from gpuwizard.gpus.sampler import GpuSampler


class JobHost(Protocol):
    """runner.supervisor.Supervisor, as the followers see it."""

    run: RunDir
    job_cfg: Job
    job: subprocess.Popen[bytes] | None
    stop_reason: str | None
    failure: str | None
    dump_requested: bool
    gpu_sampler: GpuSampler | None
    run_pids: set[int]
    job_umask: int
    output_lock: OutputLock | None
    cgroup: JobCgroup | None

    def persist(self, write: Callable[..., object], *args: Any, **kwargs: Any) -> None: ...
    def set_status(self, **fields: Any) -> None: ...
    def folder_gone(self) -> bool: ...
    def release_space(self) -> None: ...
    def ingest(self, monitor: JobMonitor, chunk: Chunk) -> None: ...
    def record(self, events: list[Event]) -> None: ...
    def full_disk(self) -> str | None: ...
    def write_gpu_samples(self, samples: list[GpuSample]) -> None: ...
    def gpu_samples(self, mono: float) -> list[GpuSample]: ...
    def handle_hang(self, monitor: JobMonitor, event: Event) -> None: ...
    def waits_for_checkpoint(self, monitor: JobMonitor, now: float) -> bool: ...
    def end_without_folder(self, survivors: list[int]) -> int: ...
    def finish(self, rc: int, survivors: list[int]) -> int: ...
