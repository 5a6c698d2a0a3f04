"""The typed records of a run folder (status.json, progress.json, job.json, events.jsonl and telemetry lines).

Every file crosses a process boundary (supervisor, wizard, `runs`, `attach`), so each is written and read through
one model carrying a format version (runs/recordio.py: the reading, the bounds, RecordError). Every value read is
untrusted: times are finite and plausible, whole numbers fit the arithmetic done on them, pids are pids.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from gpuwizard.core.codes import ACTIVE_STATES, FINAL_STATES, RunState
from gpuwizard.core.kinds import StopReason
from gpuwizard.runs.events import Event as Event
from gpuwizard.runs.recordio import MAX_RECORD_INT as MAX_RECORD_INT
from gpuwizard.runs.recordio import Count as Count
from gpuwizard.runs.recordio import Pid as Pid
from gpuwizard.runs.recordio import Record as Record
from gpuwizard.runs.recordio import RecordError as RecordError
from gpuwizard.runs.recordio import RecordT as RecordT
from gpuwizard.runs.recordio import Seconds as Seconds
from gpuwizard.runs.recordio import first_mistake as first_mistake
from gpuwizard.runs.recordio import known_or
from gpuwizard.runs.recordio import parse_lines as parse_lines
from gpuwizard.runs.recordio import parse_record as parse_record
from gpuwizard.runs.recordio import read_record as read_record
from gpuwizard.runs.recordio import read_small_file as read_small_file


# -- processes --------------------------------------------------------------------------------------
def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[19])


class ProcessRef(Record):
    """A process by pid, start time and boot, so a reused pid is never mistaken for it."""

    pid: Pid
    start_ticks: int
    boot_id: str

    @classmethod
    def of(cls, pid: int) -> ProcessRef | None:
        ticks = start_ticks(pid)
        return None if ticks is None else cls(pid=pid, start_ticks=ticks, boot_id=boot_id())

    def alive(self) -> bool:
        """The very process recorded: same boot, same pid, same start time, not a zombie."""
        return self.boot_id == boot_id() and start_ticks(self.pid) == self.start_ticks


# -- the records --------------------------------------------------------------------------------------
class LrSchedule(Record):
    """The lr a trainer's scheduler gives after `step` of the trainer's own steps, as its log shows it: a linear
    warmup, then a decay from the peak to `end` between `decay_start` and `decay_end` (each trainer module says
    how its upstream scheduler maps onto this, with the source it comes from)."""

    peak: float
    warmup_steps: int = 0
    warmup_start: float = 0.0
    """The share of the peak at step 0 (HF: 0; LeRobot's cosine and openpi: 1 / (warmup + 1))."""
    decay: Literal["constant", "linear", "cosine"] = "constant"
    decay_start: int = 0
    decay_end: int = 0
    end: float = 0.0
    """The lr the decay reaches at decay_end (an absolute lr, as upstream schedulers take it)."""
    lag: int = 0
    """The log at step N shows the lr after N - lag scheduler steps (the HF Trainer logs the lr its update used,
    read before lr_scheduler.step(): 1)."""
    averaged_over: int = 1
    """The log shows the mean lr of this many steps up to the logged one (LeRobot's AverageMeter over log_freq,
    openpi PyTorch's mean over log_interval)."""

    def logged_at(self, step: int) -> float:
        """The lr the trainer's log shows at `step`."""
        steps = range(max(0, step - self.averaged_over + 1), step + 1)
        return sum(self.lr_at(max(0, s - self.lag)) for s in steps) / len(steps)

    def lr_at(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.peak * (self.warmup_start + (1 - self.warmup_start) * step / self.warmup_steps)
        if self.decay == "constant":
            return self.peak
        progress = min(1.0, max(0.0, (step - self.decay_start) / max(1, self.decay_end - self.decay_start)))
        shape = 1 - progress if self.decay == "linear" else 0.5 * (1 + math.cos(math.pi * progress))
        return self.end + (self.peak - self.end) * shape

    def highest(self) -> float:
        return max(self.peak, self.end)

    def between(self, low: int, high: int) -> tuple[float, float]:
        """The lowest and highest lr logged from step low to high (monotone between the schedule's bends)."""
        bends = (b + self.lag for b in (self.warmup_steps, self.decay_start, self.decay_end))
        values = [self.logged_at(step) for step in (low, high, *(b for b in bends if low < b < high))]
        return min(values), max(values)


class Expectations(Record):
    """What the plan says the job should show."""

    steps: int
    lr: float
    warmup_steps: int
    schedule: LrSchedule | None = None
    """The lr at each step (the run-time lr check); None: the peak `lr` after a linear `warmup_steps`."""
    log_interval: int | None = None
    """Steps between loss lines that do not name their step (HF's logging_steps); None: they name it."""
    effective_batch: Count | None
    samples_per_step: Count | None = None
    """Samples one of the trainer's own steps trains on (the effective batch over its steps per update)."""
    world_size: Count
    hang_timeout_s: Seconds
    first_step_timeout_s: Seconds | None = None
    multi_node: bool = False
    baseline_green: bool = True


class Environment(Record):
    """environment.json: what this node ran with, so a difference between nodes (or between two runs) shows."""

    hostname: str
    node_rank: int = 0
    nodes: int = 1
    python: str
    torch: str | None = None
    trainer_package: str
    trainer_version: str | None = None
    driver: str | None = None
    cuda: str | None = None


class Job(Record):
    """job.json: what the supervisor starts and how it watches it."""

    argv: list[str]
    env: dict[str, str]
    unset: list[str]
    workdir: str
    trainer: str
    device: Literal["cpu", "cuda"]
    on_hang: Literal["report", "stop"]
    stop_grace_s: Seconds = 10.0
    expect: Expectations
    output_dir: str | None = None
    node_rank: int = 0
    """This node's rank in a multi-node job (each node has its own run folder and supervisor)."""
    python: str | None = None
    """The training environment's interpreter (it runs torch's Flight Recorder analyzer)."""
    scheduler: Literal["local", "slurm"] = "local"
    """slurm: the supervisor submits job.sbatch and follows the SLURM job instead of starting argv itself."""
    resume_chain: str | None = None
    """The first run of this run's resume chain (its own id for a fresh run), which the output folder's marker names;
    None for a run from before output folders were marked."""


class Status(Record):
    """status.json: the run's identity and state, rewritten atomically on each change."""

    run_id: str
    preset: str
    trainer: str
    policy: str
    world_size: Count
    nodes: Count = 1
    device: Literal["cpu", "cuda"]
    smoke: bool = False
    probe: str | None = None
    """Set for a short measurement run of `gpuwizard probe`: the probe's id."""
    sweep: str | None = None
    """Set for a run of `gpuwizard sweep`: the sweep's id (its sweep.json names the values it ran with)."""
    steps: int = Field(ge=0)
    """In the trainer's own steps, the unit its log counts (plan.trainer_steps)."""
    resumed_from: str | None = None
    """The run this one continues (`run --resume`)."""
    created: Seconds
    state: RunState = Field(strict=False)  # a plain string names the state too
    command: str
    on_hang: Literal["report", "stop"] = "report"
    supervisor: ProcessRef | None = None
    job: ProcessRef | None = None
    started: Seconds | None = None
    ended: Seconds | None = None
    exit_code: int | None = None
    job_exit_code: int | None = None
    stop_reason: Annotated[StopReason | None, known_or(StopReason, None)] = None
    """A reason this version does not know (a newer gpuwizard wrote it) reads as none given."""
    survivors: list[Pid] = []
    error: str | None = None
    gpu_memory_held_mb: dict[str, float] = {}
    slurm_job_id: str | None = None
    """Set for a run submitted with sbatch: its SLURM job id."""
    slurm_state: str | None = None
    """SLURM's state of that job (PENDING, RUNNING, ...), with squeue's reason while it waits."""
    slurm_reason: str | None = None

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def waiting_at_slurm(self) -> bool:
        """Submitted, and SLURM has not given it its nodes (or took them back): nothing of it runs."""
        return bool(self.slurm_job_id) and self.slurm_state in ("PENDING", "CONFIGURING", "REQUEUED", "SUSPENDED")

    @property
    def claims_active(self) -> bool:
        return self.state in ACTIVE_STATES

    def elapsed_s(self, now: float | None = None) -> float:
        """Wall time from start to end (or to now while it runs)."""
        start = self.started or self.created
        end = self.ended if self.final and self.ended else (now or time.time())
        return max(0.0, end - start)


class StatusUpdate(TypedDict, total=False):
    """The fields a status change sets (RunDir.update_status), each of Status's type: a misspelt one is a type error."""

    state: RunState
    supervisor: ProcessRef | None
    job: ProcessRef | None
    started: float | None
    ended: float | None
    exit_code: int | None
    job_exit_code: int | None
    stop_reason: StopReason | None
    survivors: list[int]
    error: str | None
    gpu_memory_held_mb: dict[str, float]
    slurm_job_id: str | None
    slurm_state: str | None
    slurm_reason: str | None


class Progress(Record):
    """progress.json: the newest step, loss, lr and rates the supervisor parsed."""

    step: int | None = None
    total: int | None = None
    loss: float | None = None
    lr: float | None = None
    samples_per_s: float | None = None
    samples_per_s_mean: float | None = None
    samples: int | None = None
    """Samples trained on so far, where the trainer's log says it exactly."""
    held_out_loss: float | None = None
    """The latest loss on held-out episodes (dataset.eval_split), where the trainer logs one."""
    best_held_out_loss: float | None = None
    """The lowest held-out loss so far, logged at best_held_out_step."""
    best_held_out_step: int | None = None
    eta_s: Seconds | None = None
    steps_per_s: float | None = Field(None, ge=0, allow_inf_nan=False)
    last_progress_t: Seconds | None = None
    started_t: Seconds = 0.0
    lines: int = 0
    checkpoints: int = 0
    finished: bool = False


class PlanSummary(BaseModel):
    """The plan.json keys a run's readers need (the file holds the whole plan, as `plan --json` prints it); trainer
    to strategy are what `compare` names where two runs on one count differ."""

    model_config = ConfigDict(extra="ignore")

    world_size: Count
    nodes: Count = 1
    device: str
    effective_batch: Count | None = None
    trainer_steps_per_update: Count = 1
    steps: int = Field(ge=0, le=MAX_RECORD_INT)
    trainer: str | None = None
    policy: str | None = None
    per_device_batch: int | None = None
    lr: float | None = None
    rule: str | None = None
    warmup_steps: int | None = None
    strategy: str | None = None


class Metric(Record):
    """One line of metrics.jsonl: a loss the log reported, with its step and time (the curves and `compare`)."""

    t: Seconds
    step: int | None = None
    loss: float
    lr: float | None = None
    samples_per_s: float | None = None
    kind: Literal["train", "held_out"] = "train"
    """held_out: the trainer's loss on episodes it does not train on (dataset.eval_split); readers of the training
    loss (curves, compare, the probe) keep to kind train."""


class GpuSample(Record):
    """One line of gpu.jsonl: one device at one moment (run_* are this run's share)."""

    t: Seconds
    index: int
    utilization: float | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    run_memory_mb: float | None = None
    run_utilization: float | None = None
    lost: bool = False
    node: str | None = None
    """The node it was read on, for samples from the nodes of a SLURM job (gpu-<node>.jsonl)."""


class RankState(Record):
    """One rank's process at one moment."""

    rank: int
    local_rank: int
    pid: Pid
    cpu: float | None
    rss_mb: float | None = None
    """Resident memory: a CPU run's memory per device."""
    status: str
    alive: bool = True
    ref: ProcessRef | None = None


class RanksSample(Record):
    """One line of ranks.jsonl."""

    t: Seconds
    ranks: list[RankState]
