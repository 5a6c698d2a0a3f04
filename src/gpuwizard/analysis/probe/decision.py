"""One rule decides a probe's answer (issue 35): each larger GPU count's efficiency against the fewest, in time to the
same loss where B_noise was measured (in samples/s otherwise, and said so), taken over adjacent pairs of windows of
the two configurations so that what the machine did meanwhile falls on both sides of each ratio. A count is
recommended while it keeps GOOD_EFFICIENCY; the answer is sure only where every kept pair's extremes, across
B_noise's interval, stay on one side of that bar and no figure breaks physics; pairs whose background differed are
left out, and a B_noise from the initial weights never makes it sure on its own."""

from __future__ import annotations

import math
import os
import statistics
from itertools import pairwise

from gpuwizard.analysis.probe.answer import Basis, Compared, Confidence, Decision
from gpuwizard.analysis.probe.results import GOOD_EFFICIENCY, ProbeResult, ProbeRow, grid_rows
from gpuwizard.core.units import counted, device_unit

BAR = GOOD_EFFICIENCY
DEMAND_GAP = 0.25
"""How far the threads outside the probe ready to run may differ between two windows, against all that want the
cores (theirs and a machine's worth of the probe's own): past it the probe's share of the CPU moved by a quarter."""
GPU_GAP = 20.0
"""Points of GPU utilization by other processes that two windows may differ by and still be compared."""
INITIAL_STAGE = "the initial weights"
"""How noise_stage begins for a B_noise measured over a probe's first steps from the job's starting weights."""
EARLY_NOISE = (
    "a B_noise from the initial weights is typically far smaller than later in training, and it decides this answer"
)


def checkpoint_stage(step: int, run_id: str) -> str:
    """noise_stage for a B_noise measured from a run's checkpoint (probe --from-run): where the decision is made."""
    return f"step {step:,} of run {run_id}, its newest checkpoint"


def machine_cores(result: ProbeResult) -> int:
    return result.cores or os.cpu_count() or 4


def windows(result: ProbeResult, gpus: int, batch: int) -> list[ProbeRow]:
    """Every measured window of one configuration: its grid run and its alternating rounds."""
    return [
        r
        for r in [*result.rows, *result.repeats]
        if r.gpus == gpus and r.per_device_batch == batch and r.fits and r.samples_per_s
    ]


def adjacent_pairs(base: list[ProbeRow], other: list[ProbeRow]) -> list[tuple[ProbeRow, ProbeRow]]:
    """(base, other) for each two neighbouring windows of different configurations, in the order they were taken."""
    ordered = sorted([(w, 0) for w in base] + [(w, 1) for w in other], key=lambda p: p[0].window_start or 0.0)
    return [(a, b) if ka == 0 else (b, a) for (a, ka), (b, kb) in pairwise(ordered) if ka != kb]


def moved(base: ProbeRow, other: ProbeRow, cores: int) -> str | None:
    """Why two windows were not taken under the same background (None: they were, or nothing was recorded): their
    CPU time outside the probe differs by more than a quarter of the machine's cores (at least 0.3), or the threads
    ready to run outside it by more than DEMAND_GAP."""
    limit = max(0.3, 0.25 * cores)
    if base.waiting is not None and other.waiting is not None:
        if abs(base.waiting - other.waiting) / ((base.waiting + other.waiting) / 2 + cores) > DEMAND_GAP:
            return f"{base.waiting:.1f} against {other.waiting:.1f} threads outside the probe ready to run"
    if base.background is not None and other.background is not None and abs(base.background - other.background) > limit:
        return f"{base.background:.1f} against {other.background:.1f} cores busy outside the probe"
    for w in (base, other):
        if w.background_shift is not None and abs(w.background_shift) > limit:
            return f"the background moved by {w.background_shift:+.1f} cores within one window"
    if base.gpu_background is not None and other.gpu_background is not None:
        if abs(base.gpu_background - other.gpu_background) > GPU_GAP:
            return f"other processes kept the GPUs {base.gpu_background:.0f}% against {other.gpu_background:.0f}% busy"
    return None


def rate_ratio(base: ProbeRow, other: ProbeRow) -> tuple[float, float, float]:
    """Samples/s of `other` over `base`: the medians, and their slowest-fastest sub-windows against each other."""
    b, o = base.samples_per_s or 1.0, other.samples_per_s or 0.0
    median = o / b
    low = (other.rate_low or o) / (base.rate_high or b)
    high = (other.rate_high or o) / (base.rate_low or b)
    return median, min(low, median), max(high, median)


def global_batch(row: ProbeRow, grad_accum: int) -> int:
    return row.gpus * row.per_device_batch * grad_accum


def loss_factor(b_noise: float, base_global: int, other_global: int) -> float:
    """What turns a samples/s ratio into a time-to-the-same-loss one: (B0 / B) / (S / S0), with S = S_min (1 + N / B)
    (1 at an infinite B_noise, where every sample counts; B0 / B at none, where every batch takes as many steps)."""
    if not math.isfinite(b_noise):
        return 1.0
    steps = (1 + b_noise / other_global) / (1 + b_noise / base_global)
    return base_global / other_global / steps


def best_per_count(result: ProbeResult, b_noise: float) -> dict[int, ProbeRow]:
    """Per GPU count the grid's configuration that reaches the loss soonest (samples/s / (B + B_noise)), or the fastest
    in samples/s where B_noise is infinite (not measured); the preset's own batch (the grid's first) wherever its
    fastest window reaches the best one's slowest or the two were taken under different backgrounds, so a tie within
    the spread or the load's swing never flips the answer; fewest first."""

    def score(row: ProbeRow, rate: float | None) -> float:
        rate = rate or row.samples_per_s or 0.0
        return rate if not math.isfinite(b_noise) else rate / (global_batch(row, result.grad_accum) + b_noise)

    own = result.batches[0] if result.batches else None
    best: dict[int, ProbeRow] = {}
    for gpus in sorted({r.gpus for r in grid_rows(result)}):
        rows = [r for r in grid_rows(result) if r.gpus == gpus and r.fits and r.samples_per_s]
        if not rows:
            continue
        top = max(rows, key=lambda r: score(r, r.samples_per_s))
        mine = next((r for r in rows if r.per_device_batch == own), None)
        tied = mine is not None and (
            score(mine, mine.rate_high) >= score(top, top.rate_low)
            or moved(mine, top, machine_cores(result)) is not None
        )
        best[gpus] = mine if tied and mine is not None else top
    return best


def compare(result: ProbeResult, base: ProbeRow, other: ProbeRow) -> Compared | None:
    """`other` against `base` over their adjacent windows, on the decision's basis."""
    pairs = adjacent_pairs(
        windows(result, base.gpus, base.per_device_batch), windows(result, other.gpus, other.per_device_batch)
    )
    if not pairs:
        return None
    why = [moved(a, b, machine_cores(result)) for a, b in pairs]
    kept = [p for p, w in zip(pairs, why, strict=True) if w is None]
    ratios = [rate_ratio(a, b) for a, b in (kept or pairs)]
    noise = result.noise
    point = noise.b_simple if noise is not None else math.inf
    ends = [noise.low or 0.0, noise.high if noise.high is not None else math.inf] if noise is not None else [math.inf]
    g0, g1 = global_batch(base, result.grad_accum), global_batch(other, result.grad_accum)
    scale = other.gpus / base.gpus
    at_ends = [loss_factor(n, g0, g1) for n in ends]
    anywhere = [loss_factor(n, g0, g1) for n in (0.0, math.inf)]
    median = statistics.median(r[0] for r in ratios)
    low, high = min(r[1] for r in ratios), max(r[2] for r in ratios)
    return Compared(
        gpus=other.gpus,
        batch=other.per_device_batch,
        base_gpus=base.gpus,
        base_batch=base.per_device_batch,
        efficiency=median * loss_factor(point, g0, g1) / scale,
        low=low * min(at_ends) / scale,
        high=high * max(at_ends) / scale,
        any_low=low * min(anywhere) / scale,
        any_high=high * max(anywhere) / scale,
        samples_efficiency=median / scale,
        samples_low=low / scale,
        pairs=len(kept),
        dropped=[w for w in why if w is not None],
        ratios=[round(r[0], 4) for r in ratios] if kept else [],
    )


def broken(c: Compared) -> bool:
    """A speedup above the count's ratio at the same batch per device, beyond the pairs' spread: impossible."""
    return c.batch == c.base_batch and c.samples_low > 1


def broken_text(c: Compared, device: str) -> str:
    scale = c.gpus / c.base_gpus
    return (
        f"{counted(c.gpus, device)} measured {c.samples_efficiency:.0%} efficiency against {c.base_gpus} at batch "
        f"{c.batch} per device (at least {c.samples_low * scale:.2f}x the samples/s from {scale:g}x the "
        f"{device_plural(device)}), which no added {device_unit(device)} can give"
    )


def impossible(result: ProbeResult, compared: list[Compared]) -> list[str]:
    """Efficiencies above 100% at the same batch per device, beyond their spread, among the grid's rows that the
    answer does not compare: they keep it from sure."""
    device = result.device
    rows = grid_rows(result)
    other = []
    for row in rows:
        peers = [r for r in rows if r.per_device_batch == row.per_device_batch and r.fits and r.samples_per_s]
        base = min(peers, key=lambda r: r.gpus) if peers else None
        if base is None or base.gpus == row.gpus or not row.fits or not row.samples_per_s:
            continue
        low = rate_ratio(base, row)[1] / (row.gpus / base.gpus)
        if low > 1 and not any(c.gpus == row.gpus and c.batch == row.per_device_batch for c in compared):
            other.append(
                f"{counted(row.gpus, device)} at batch {row.per_device_batch} measured at least {low:.0%} efficiency "
                f"against {base.gpus}, above 100%"
            )
    return other


def device_plural(device: str) -> str:
    return "GPUs" if device == "cuda" else "processes"


def model_misses(result: ProbeResult) -> str | None:
    """The step-time model missing its own rows by more than their spread: the load moved between them."""
    fit = result.throughput
    rows = [r for r in result.rows if r.fits and r.samples_per_s and r.rate_low and r.rate_high]
    if fit is None or fit.max_residual is None or not rows:
        return None
    spread = max((r.rate_high or 0) / (r.rate_low or 1) - 1 for r in rows) / 2
    if fit.max_residual <= spread:
        return None
    return (
        f"the step-time model misses its own rows by up to {fit.max_residual:.0%}, more than their spread "
        f"({spread:.0%})"
    )


def decide(result: ProbeResult) -> Decision | None:
    """The recommendation, how sure, and the paragraph that says both (None: nothing fits)."""
    noise = result.noise
    basis: Basis = "time to the same loss" if noise is not None else "samples/s"
    best = best_per_count(result, noise.b_simple if noise is not None else math.inf)
    if not best:
        return None
    base = next(iter(best.values()))
    compared = [c for row in list(best.values())[1:] if (c := compare(result, base, row)) is not None]
    elsewhere = impossible(result, compared)
    untold = [c for c in compared if not c.pairs or c.low < BAR <= c.high or broken(c)]
    paying = [c for c in compared if c.pairs and c.efficiency >= BAR and c not in untold]
    choice = max(paying, key=lambda c: c.gpus) if paying else None
    row = best[choice.gpus] if choice else base
    caps = [*elsewhere, *filter(None, [model_misses(result)])]
    caps += [f"no spread was measured for {counted(c.gpus, result.device)}" for c in compared if c.low == c.high]
    initial = noise is not None and (not result.noise_stage or result.noise_stage.startswith(INITIAL_STAGE))
    leaning = [c for c in compared if c not in untold and (c.any_low < BAR <= c.any_high)]
    if initial and leaning:
        caps.append(EARLY_NOISE)
    confidence: Confidence = (
        "nothing compared" if not compared else "cannot tell" if untold else "likely" if caps else "sure"
    )
    decision = Decision(
        basis=basis,
        gpus=row.gpus,
        batch=row.per_device_batch,
        samples_per_s=row.samples_per_s or 0.0,
        confidence=confidence,
        paragraph="",
        compared=compared,
        checks=[*(broken_text(c, result.device) for c in compared if broken(c)), *caps],
    )
    return decision.model_copy(update={"paragraph": paragraph(result, decision, untold)})


def paragraph(result: ProbeResult, d: Decision, untold: list[Compared]) -> str:
    """The recommendation, how sure and why, in one paragraph."""
    device = result.device
    rec = f"{counted(d.gpus, device)} at batch {d.batch} per device ({d.samples_per_s:.1f} samples/s)"
    if d.confidence == "nothing compared":
        return f"Recommended: {rec}; one {device_unit(device)} count was measured, so nothing was compared."
    rerun = f"rerun on a quieter machine or with --repeat {result.rounds + 2} (more alternating rounds)"
    if d.confidence == "cannot tell":
        c = untold[0]
        if broken(c):
            why = f"{broken_text(c, device)}, so the machine's load changed between them"
        elif not c.pairs:
            why = f"every pair of adjacent windows was taken under a different background ({c.dropped[0]})"
        else:
            why = (
                f"it keeps {c.efficiency:.0%} efficiency {basis_text(result, d)}, but {c.low:.0%}-{c.high:.0%} over "
                f"{pairs_text(c)}, either side of the {BAR:.0%} a larger count must keep"
            )
        return (
            f"Cannot tell here whether {counted(c.gpus, device)} pay against {c.base_gpus}: {why}; {rerun}. Until "
            f"then: {rec}."
        )
    figures = "; ".join(
        f"{counted(c.gpus, device)} keep {c.efficiency:.0%} efficiency against {c.base_gpus} ({c.low:.0%}-"
        f"{c.high:.0%} over {pairs_text(c)}), {'above' if c.low >= BAR else 'below'} the {BAR:.0%} a larger count "
        "must keep"
        for c in d.compared
    )
    settled = all(c.any_low >= BAR or c.any_high < BAR for c in d.compared)
    whatever = ", whatever B_noise is" if d.basis == "time to the same loss" and settled else ""
    said = "sure" if d.confidence == "sure" else "likely, not sure"
    head = f"Recommended: {rec}; {said}: {figures}, {basis_text(result, d)}{whatever}"
    if d.confidence == "likely":
        load = [c for c in d.checks if c != EARLY_NOISE]
        then = rerun if load else "a gauged full run (monitor.gauge: true) measures it later, and plan then uses it"
        return f"{head}; but {'; '.join(d.checks)}: {then}."
    return f"{head}."


def pairs_text(c: Compared) -> str:
    dropped = f", {len(c.dropped)} dropped for a changed background" if c.dropped and c.pairs else ""
    return f"{c.pairs} pair{'s' if c.pairs != 1 else ''} of adjacent windows{dropped}"


def basis_text(result: ProbeResult, d: Decision) -> str:
    """What the efficiency is of: time to the same loss at the probe's B_noise, or samples/s where it has none."""
    noise = result.noise
    if d.basis == "time to the same loss" and noise is not None:
        return f"in time to the same loss (B_noise {noise.b_simple:.3g}, from {result.noise_stage or INITIAL_STAGE})"
    if any(r.noise is not None for r in [*result.rows, *result.repeats]):
        return "in samples/s (the runs' B_noise disagree, so what a bigger global batch costs in steps is not counted)"
    return "in samples/s (B_noise was not measured, so what a bigger global batch costs in steps is not counted)"
