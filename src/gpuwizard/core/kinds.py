"""The words one process writes and another compares (stop reasons, event kinds and severities, problem levels, sweep
and probe states; a run's states are core/codes.py's RunState): one enum each, so a misspelt word is a type error
instead of a branch that never runs. Each is a StrEnum whose values are the words the run, sweep and probe folders
already hold, so folders written before read the same."""

from __future__ import annotations

from enum import StrEnum


class StopReason(StrEnum):
    """Why a run was stopped, as status.json's `stop_reason` says it."""

    USER = "user"
    USER_SUPERVISOR_GONE = "user (supervisor was gone)"
    HANG = "hang"
    DIVERGED = "diverged"
    FOLDER_GONE = "run folder deleted"


class EventKind(StrEnum):
    """What an events.jsonl line reports; the failure signatures' kinds included."""

    BATCH_MISMATCH = "batch_mismatch"
    FLIGHT_RECORDER = "flight_recorder"
    GPU_LOST = "gpu_lost"
    GPU_MEMORY_HELD = "gpu_memory_held"
    HANG_SUSPECTED = "hang_suspected"
    INPUT_BOUND = "input_bound"
    LOSS_NONFINITE = "loss_nonfinite"
    LR_MISMATCH = "lr_mismatch"
    OUTPUT_SAMPLED = "output_sampled"
    RANK_FAILED = "rank_failed"
    SLOW_PROGRESS = "slow_progress"
    SLURM_PENDING = "slurm_pending"
    SLURM_PENDING_LONG = "slurm_pending_long"
    STACK_DUMP = "stack_dump"
    STOP_WAITS_FOR_CHECKPOINT = "stop_waits_for_checkpoint"
    COLLECTIVE_TIMEOUT = "collective_timeout"
    NCCL_ERROR = "nccl_error"
    GLOO_ERROR = "gloo_error"
    EXIT_ABORT = "exit_abort"
    OUT_OF_MEMORY = "out_of_memory"
    DISK_FULL = "disk_full"
    RENDEZVOUS_FAILED = "rendezvous_failed"
    OVERFITTING = "overfitting"
    UNKNOWN = "unknown"
    """An event of a kind this version does not know (a newer gpuwizard wrote it): read, and shown by its title."""


class Severity(StrEnum):
    """How loudly an event is shown."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class ProblemLevel(StrEnum):
    """A Problem's weight: an error refuses, a warning is shown and allowed, a note informs."""

    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


class SweepState(StrEnum):
    """Where one run of a sweep stands, as sweep.json says it; the last four are ended."""

    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"
    HUNG = "hung"


class ProbeState(StrEnum):
    """Where a probe stands, as its probe.json says it."""

    RUNNING = "running"
    FINISHED = "finished"
    STOPPED = "stopped"
    FAILED = "failed"
