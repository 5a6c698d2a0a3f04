"""`probe --batch auto`: the largest per-device batch that fits. Double from the plan's batch until two rows give the
memory line (analysis/probe/memory_model.py), run the batch it predicts and its neighbour (at most two after a fit),
and only where they disagree with the line go on by doubling until a batch does not fit, then bisecting
(BatchSizeFinder's binsearch) to within 1/SEARCH_PRECISION."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

from gpuwizard.analysis.probe.memory_model import MemoryFit, confirm_next, fit_memory

if TYPE_CHECKING:
    from gpuwizard.analysis.probe.results import ProbeResult, ProbeRow

MAX_AUTO_BATCH = 4096
SEARCH_PRECISION = 8
"""Bisection stops once the largest batch that fits is known to within 1/8 (one step more would cost a run for less
than that); the line's confirmation knows it exactly."""


class ProbeRuns(Protocol):
    """What the search needs of a probe (runner/probe/grid.py:Probe): its runs, its record and its say."""

    cancelled: threading.Event
    result: ProbeResult
    device_memory_mb: float | None
    simulated: bool
    headroom: float

    def run_config(self, gpus: int, batch: int) -> ProbeRow: ...

    def record(self, row: ProbeRow) -> None: ...

    def out_of_budget(self, what: str) -> bool: ...

    def save(self) -> None: ...

    def say(self, text: str) -> None: ...


def search_batch(probe: ProbeRuns, gpus: int, start: int) -> int | None:
    """The largest batch that fits on `gpus`, from `start` (None: not even batch 1, or nothing ran)."""
    tried: dict[int, bool] = {}
    batch, fit, settled = max(1, start), None, False
    while not probe.cancelled.is_set() and not probe.out_of_budget(f"{gpus} x batch {batch}"):
        row = probe.run_config(gpus, batch)
        if fit is not None and not settled:
            fit = fit.model_copy(update={"runs_after_fit": fit.runs_after_fit + 1})
            probe.result.memory = fit
        probe.record(row)
        if row.outcome not in ("measured", "does not fit"):
            break
        tried[batch] = row.outcome == "measured"
        if fit is None:
            fit = memory_line(probe, gpus)
            if fit is not None:
                probe.result.memory = fit
                probe.say(f"fitted {fit.equation()}: predicted {fit.predicted_batch} within {fit.limit_mb:.0f} MB")
        if fit is not None and not settled:
            step = confirm_next(fit.predicted_batch, tried, MAX_AUTO_BATCH)
            if step.run is not None:
                batch = step.run
                continue
            settled = True
            fit = fit.model_copy(update={"confirmed": step.said, "off": step.off})
            probe.result.memory = fit
            probe.save()
            probe.say(step.said)
            if not step.off:
                break
        following = bisect_next(tried)
        if following is None:
            break
        batch = following
    return max((b for b, ok in tried.items() if ok), default=None)


def bisect_next(tried: dict[int, bool]) -> int | None:
    """Double until a batch does not fit, then halve the gap; None once the largest that fits is bounded to 1/8."""
    fits = max((b for b, ok in tried.items() if ok), default=None)
    fails = min((b for b, ok in tried.items() if not ok), default=None)
    if fails is None:
        return None if (fits or 0) >= MAX_AUTO_BATCH else min(MAX_AUTO_BATCH, 2 * (fits or 1))
    if fits is None:
        return None if fails == 1 else max(1, fails // 2)
    if fails - fits <= max(1, fits // SEARCH_PRECISION):
        return None
    return (fits + fails) // 2


def memory_line(probe: ProbeRuns, gpus: int, machine_mb: float | None = None) -> MemoryFit | None:
    """The line through this count's rows that have a memory figure, held to what limits the device (where the
    device's memory is unknown, as on the CPU, `machine_mb` shared by the count's processes, if given); None where
    there is no limit or the rows do not give a slope yet."""
    rows = [
        r
        for r in probe.result.rows
        if r.gpus == gpus and r.outcome in ("measured", "does not fit") and r.memory_mb is not None
    ]
    points = [(r.per_device_batch, r.memory_mb or 0.0) for r in rows]
    if probe.device_memory_mb is not None:
        limit = probe.device_memory_mb * (1 if probe.simulated else 1 - probe.headroom)
        return fit_memory(points, limit, probe.simulated)
    if machine_mb is None:
        return None
    fit = fit_memory(points, machine_mb * (1 - probe.headroom) / gpus, simulated=False)
    held = (
        f"this machine's {machine_mb / 1024:.1f} GB shared by {gpus} process{'es' if gpus > 1 else ''}, "
        f"{probe.headroom:.0%} kept free"
    )
    return fit.model_copy(update={"limit_source": held}) if fit is not None else None


def grid_memory_line(probe: ProbeRuns, machine_mb: float | None) -> MemoryFit | None:
    """A grid's memory line, where no batch search fitted one: from the most processes (or GPUs) that measured two
    batches or more, so the report says how far the batch could grow (the batch search confirms it by running)."""
    counts = sorted({r.gpus for r in probe.result.rows if r.outcome == "measured" and r.memory_mb}, reverse=True)
    return next((fit for gpus in counts if (fit := memory_line(probe, gpus, machine_mb)) is not None), None)
