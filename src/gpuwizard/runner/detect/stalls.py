"""What the ranks' CPU, the GPUs and the log's data-loading share say about a job that is stuck or slow (no I/O)."""

from __future__ import annotations

from collections import deque

from gpuwizard.core.kinds import EventKind, Severity
from gpuwizard.runs.events import RankVerdict
from gpuwizard.runs.records import Event, GpuSample, RankState

BUSY_CPU_PERCENT = 50.0
INPUT_BOUND_SHARE = 0.5
"""A job whose steps spend at least this share waiting for data (or whose GPUs idle while the CPUs are saturated)
is input bound."""
INPUT_BOUND_WINDOW = 5
INPUT_BOUND_CPU_PERCENT = 90.0
INPUT_BOUND_GPU_UTIL = 40.0
INPUT_BOUND_AFTER_S = 60.0
WORKING_CPU_PERCENT = 5.0
"""A rank using at least this much CPU is doing something: a rank blocked on a dead peer uses next to none."""
STOPPED_STATUSES = ("stopped", "tracing-stop")
"""psutil's names for a process that is not running at all (kill -STOP, a debugger)."""


class InputBoundWatch:
    """Says once that a job waits on data: by the log's data_s share of each step, or idle GPUs beside busy CPUs."""

    def __init__(self) -> None:
        self.data_shares: deque[float] = deque(maxlen=INPUT_BOUND_WINDOW)
        self.reported = False
        self.starved_since: float | None = None

    def by_log(self, data_s: float, step_s: float) -> list[Event]:
        """One logged step's data-loading time against its step time."""
        self.data_shares.append(data_s / step_s)
        if self.reported or len(self.data_shares) < INPUT_BOUND_WINDOW:
            return []
        share = sum(self.data_shares) / len(self.data_shares)
        if share < INPUT_BOUND_SHARE:
            return []
        return [self.event(f"data loading takes {share:.0%} of every step (data_s against step_s in the log)")]

    def by_devices(
        self, now: float, ranks: list[RankState], gpus: list[GpuSample] | None, stepped: bool
    ) -> list[Event]:
        """GPUs mostly idle while every rank's CPU is saturated, for a minute: the ranks are busy feeding them."""
        powered = [g for g in gpus or [] if g.utilization is not None and not g.lost]
        live = [r for r in ranks if r.cpu is not None and r.alive]
        starved = (
            bool(powered)
            and bool(live)
            and sum(g.utilization or 0 for g in powered) / len(powered) < INPUT_BOUND_GPU_UTIL
            and all((r.cpu or 0) >= INPUT_BOUND_CPU_PERCENT for r in live)
        )
        if not starved or not stepped:
            self.starved_since = None
            return []
        self.starved_since = self.starved_since or now
        if self.reported or now - self.starved_since < INPUT_BOUND_AFTER_S:
            return []
        util = sum(g.utilization or 0 for g in powered) / len(powered)
        return [
            self.event(
                f"the GPUs average {util:.0f}% utilization while every rank's CPU is saturated, for "
                f"{now - self.starved_since:.0f} s"
            )
        ]

    def event(self, why: str) -> Event:
        self.reported = True
        return Event(
            kind=EventKind.INPUT_BOUND,
            severity=Severity.WARNING,
            title="the job waits on data",
            detail=f"{why}: more GPUs will not make it faster.",
            suggestion="Raise the dataloader workers per process (LeRobot: trainer_options.num_workers), keep the "
            "dataset on local disk rather than a network filesystem, and decode video on more cores; openpi #600 "
            "and GR00T #362 turned out to be this.",
        )


def ranks_working(ranks: list[RankState], gpus: list[GpuSample] | None) -> bool:
    """Every rank alive and running, some using CPU, and the GPUs not spin-waiting in a collective."""
    if not ranks or any(not r.alive or r.status in STOPPED_STATUSES for r in ranks):
        return False
    if not any((r.cpu or 0) >= WORKING_CPU_PERCENT for r in ranks):
        return False
    return not classify_ranks(ranks, gpus).spinning


def classify_ranks(ranks: list[RankState], gpus: list[GpuSample] | None) -> RankVerdict:
    """Read the per-rank evidence: all busy (slow), all idle (host-side stall), or one rank unlike the rest."""
    live = [r for r in ranks if r.cpu is not None]
    cpu = {r.rank: r.cpu for r in ranks if r.cpu is not None}
    dead = [r.rank for r in ranks if not r.alive]
    stopped = [r.rank for r in ranks if r.alive and r.status in STOPPED_STATUSES]
    busy_cpu = bool(live) and all((r.cpu or 0) >= BUSY_CPU_PERCENT for r in live)
    spinning = False
    busy_gpu = True
    if gpus:
        powered = [
            (g.utilization or 0, g.power_w / g.power_limit_w) for g in gpus if g.power_w is not None and g.power_limit_w
        ]
        busy_gpu = bool(powered) and all(share > 0.4 for _, share in powered)
        spinning = bool(powered) and all(utilization >= 95 and share < 0.4 for utilization, share in powered)
    differing = None
    if dead:
        differing = dead[0]
    elif stopped:
        differing = stopped[0]
    elif len(live) >= 2:
        values = sorted(cpu.values())
        median = values[len(values) // 2]
        outliers = [r for r, v in cpu.items() if abs(v - median) >= max(20.0, 0.5 * median)]
        if len(outliers) == 1:
            differing = outliers[0]
    parts = [
        f"CPU per rank: {', '.join(f'rank {r} {v:.0f}%' for r, v in sorted(cpu.items()))}."
        if cpu
        else "No per-rank CPU data."
    ]
    if dead:
        parts.append(f"Rank(s) {', '.join(map(str, dead))} exited.")
    if stopped:
        parts.append(
            f"Rank(s) {', '.join(map(str, stopped))} stopped (SIGSTOP, a debugger or a tracer): not running at all."
        )
    if spinning:
        parts.append("GPUs at ~100% utilization on low power: NCCL kernels spin-waiting.")
    return RankVerdict(
        busy=busy_cpu and busy_gpu and not spinning and not dead and not stopped,
        spinning=spinning,
        cpu=cpu,
        differing_rank=differing,
        summary=" ".join(parts),
    )
