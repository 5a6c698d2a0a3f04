"""Does the next GPU pay in time to the same loss, not only in samples/s? McCandlish et al. (2018): the steps to a
given loss at global batch B are S = S_min (1 + B_noise / B) and the samples E = E_min (1 + B / B_noise). So against
the one-GPU configuration (global batch B0, step time t0), a configuration at B and t reaches the same loss in

    time ratio    = (1 + B_noise / B) / (1 + B_noise / B0) * t / t0
    samples ratio = (B + B_noise) / (B0 + B_noise)

It buys wall clock where the time ratio is below WALL_CLOCK_BAR, and keeps its data efficiency (the bigger batch's
extra samples are not wasted) while the samples ratio stays under DATA_BAR: which advice the evidence gives. Both
ratios are also taken at the ends of B_noise's interval and of the step times' spread, as ranges; whether the next
GPU pays, and how sure that is, is the probe's one decision (analysis/probe/decision.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuwizard.runs.records import Record

WALL_CLOCK_BAR = 0.9
"""The same loss at least 10% sooner: less is within what a probe's few steps tell apart."""
DATA_BAR = 1.25
"""Up to 25% more samples to the same loss still counts as data-efficient (the batch is not far past B_noise)."""


@dataclass(frozen=True)
class Config:
    """One configuration: its GPU count, per-device batch, global batch and step time (median, shortest, longest)."""

    gpus: int
    batch: int
    global_batch: int
    step_s: float
    step_low: float
    step_high: float
    predicted: bool


class LossTime(Record):
    """One configuration's time and samples to the same loss, against the one-GPU configuration."""

    gpus: int
    per_device_batch: int
    global_batch: int
    predicted: bool
    """Its step time comes from the throughput model, not a run of its own."""
    steps_ratio: float
    time_ratio: float
    time_low: float
    time_high: float
    samples_ratio: float
    samples_low: float
    samples_high: float


def steps_factor(b_noise: float, batch: float) -> float:
    """S / S_min at this global batch."""
    return 1 + b_noise / batch


def ratios(b_noise: float, base_batch: int, batch: int) -> tuple[float, float]:
    """(steps ratio, samples ratio) of global batch `batch` against `base_batch` at this B_noise."""
    if not math.isfinite(b_noise):  # an interval with no upper end: every sample counts, S falls as 1 / B
        return base_batch / batch, 1.0
    steps = (1 + b_noise / batch) / (1 + b_noise / base_batch)
    return steps, (batch + b_noise) / (base_batch + b_noise)


def compare(base: Config, other: Config, b_noise: float, low: float, high: float) -> LossTime:
    """`other` against `base`: the ratios at B_noise, and their range over B_noise's interval and both step times'
    spread (each ratio is monotone in B_noise, so the interval's ends bound it)."""
    steps, samples = ratios(b_noise, base.global_batch, other.global_batch)
    ends = [ratios(b, base.global_batch, other.global_batch) for b in (low, high)]
    slow, fast = other.step_high / base.step_low, other.step_low / base.step_high
    times = [s * t for s, _ in ends for t in (slow, fast)]
    return LossTime(
        gpus=other.gpus,
        per_device_batch=other.batch,
        global_batch=other.global_batch,
        predicted=other.predicted,
        steps_ratio=steps,
        time_ratio=steps * other.step_s / base.step_s,
        time_low=min(times),
        time_high=max(times),
        samples_ratio=samples,
        samples_low=min(e[1] for e in ends),
        samples_high=max(e[1] for e in ends),
    )


def table(configs: list[Config], b_noise: float, low: float | None, high: float | None) -> list[LossTime]:
    """Every configuration against the one at the fewest GPUs that reaches the loss soonest (None ends of the interval:
    B_noise bounded on that side by nothing but 0 and infinity)."""
    if not configs:
        return []
    fewest = min(c.gpus for c in configs)
    first = [c for c in configs if c.gpus == fewest and not c.predicted] or [c for c in configs if c.gpus == fewest]
    base = min(first, key=lambda c: steps_factor(b_noise, c.global_batch) * c.step_s)
    lo, hi = (low if low is not None and low > 0 else 0.0), (high if high is not None else math.inf)
    return [compare(base, c, b_noise, lo, hi) for c in configs]


def best_per_count(rows: list[LossTime]) -> dict[int, LossTime]:
    """Per GPU count the configuration that reaches the loss soonest (measured before predicted on a tie)."""
    best: dict[int, LossTime] = {}
    for row in sorted(rows, key=lambda r: (r.gpus, r.time_ratio, r.predicted)):
        best.setdefault(row.gpus, row)
    return best


def buys(row: LossTime) -> str:
    """What the configuration buys against the base at its median figures (wall clock, data efficiency, both,
    nothing): which advice follows it; whether it pays is the decision's (analysis/probe/decision.py)."""
    wall, data = row.time_ratio < WALL_CLOCK_BAR, row.samples_ratio <= DATA_BAR
    said = {(True, True): "both", (True, False): "wall clock", (False, True): "data efficiency"}.get((wall, data))
    return said or "nothing"


def sentence(rows: list[LossTime], b_noise_text: str, unit: str, job_steps: int | None, lr: str = "") -> str:
    """One sentence of evidence: the next GPU count's time and samples to the same loss, with their ranges, and what
    to do with the bigger batch (`lr`: the lr that advice assumes, in words). The decision says whether it pays."""
    best = best_per_count(rows)
    counts = list(best)
    if len(counts) < 2:
        return f"Time to the same loss ({b_noise_text}): only one {unit} count to compare."
    base, nxt = best[counts[0]], best[counts[1]]
    what = buys(nxt)
    plural = "" if nxt.gpus == 1 else ("es" if unit == "process" else "s")
    name = f"{nxt.gpus} {unit}{plural}" + (" (predicted)" if nxt.predicted else "")
    figures = (
        f"reach{'es' if nxt.gpus == 1 else ''} it in {nxt.time_ratio:.2f}x the time ({nxt.time_low:.2f}-"
        f"{nxt.time_high:.2f}) and {nxt.samples_ratio:.2f}x the samples ({nxt.samples_low:.2f}-"
        f"{nxt.samples_high:.2f}) of {base.gpus} at global batch {base.global_batch}, batch {nxt.per_device_batch} per "
        "device"
    )
    return f"Time to the same loss ({b_noise_text}): {name} {figures}{advice(what, nxt, job_steps, unit, lr)}."


def advice(what: str, row: LossTime, job_steps: int | None, unit: str, lr: str = "") -> str:
    """What to do with the bigger batch: fewer steps where it buys wall clock only, else runs of their own."""
    if what == "both":
        return ""
    if what == "wall clock":
        steps = (
            f"about {max(1, round(job_steps * row.steps_ratio)):,} steps instead of {job_steps:,}"
            if job_steps
            else f"{row.steps_ratio:.2f}x the steps"
        )
        return (
            f"; at the bigger batch, train {steps} (optim.steps){lr}, or keep the global batch with a smaller batch "
            "per device"
        )
    return (
        f"; rather than a bigger batch, give each {unit} a run of its own: several runs at once (seeds, learning "
        "rates) with `gpuwizard sweep`, or a smaller batch"
    )
