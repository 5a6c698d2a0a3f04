"""Peak memory as a line in the per-device batch, mem(b) = fixed + per_sample * b, fitted from two or more rows of a
probe's batch search, so `--batch auto` runs the largest batch the line predicts within the device and confirms it
with its neighbour (the prediction fits and one more does not), instead of bisecting by out-of-memory failures.

The line is of the figure that limits the device: on a real GPU NVML's memory of the run's processes, held to
(1 - headroom) of the device; on a simulated one (the demo's device_memory_mb) the peak its gauge reads, which the
demo's allocator refuses past, held to the whole of it. A fit from rows whose memory does not grow (per_sample <= 0)
predicts nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpuwizard.analysis.probe.noise_scale import number
from gpuwizard.runs.records import Record

GAUGE_PEAK = {True: "max_reserved_mb", False: "max_rss_mb"}
"""The gauge's peak per step (gauge/gwgauge.py:memory): the caching allocator's reservation on CUDA, else resident."""


class MemoryFit(Record):
    """The fitted line, the limit it was held to, the batch it predicts and what the runs after the fit found."""

    fixed_mb: float
    per_sample_mb: float
    rows: int
    batches: list[int] = []
    """The batches of the rows it was fitted from."""
    max_residual_mb: float | None = None
    """The largest distance of a row from the line; None from two rows (an exact fit)."""
    limit_mb: float
    simulated: bool
    """The limit is a simulated device's whole memory (its allocator refuses only past it: no headroom kept)."""
    limit_source: str = ""
    """What the limit is, where it is not a device's (a CPU probe: the machine's memory shared by its processes)."""
    predicted_batch: int
    runs_after_fit: int = 0
    confirmed: str | None = None
    """What the runs after the fit found, in words; None while they run."""
    off: bool = False
    """They disagreed with the line, so the search went on by doubling and bisecting."""

    def equation(self) -> str:
        fit = f"{self.max_residual_mb:.1f} MB from it at most" if self.max_residual_mb is not None else "an exact fit"
        rows = ", ".join(map(str, self.batches)) if self.batches else f"{self.rows}"
        return f"mem(b) = {self.fixed_mb:.1f} + {self.per_sample_mb:.3f} x b MB from rows {rows} ({fit})"

    def line(self) -> str:
        held = self.limit_source or ("the simulated device" if self.simulated else "the device less its headroom")
        after = f"; {self.confirmed} ({self.runs_after_fit} runs after the fit)" if self.confirmed else ""
        return (
            f"memory model: {self.equation()}; within {self.limit_mb:.0f} MB ({held}) up to batch "
            f"{self.predicted_batch}{after}"
        )


def gauge_peak_mb(path: Path, cuda: bool) -> float | None:
    """The largest rank's peak over the steps its gauge wrote (None: no gauge file, or no step in it)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    peaks = []
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # a torn last line: the file is appended to while the job runs
        if isinstance(line, dict) and line.get("kind") == "step" and (peak := number(line, GAUGE_PEAK[cuda])):
            peaks.append(peak)
    return max(peaks, default=None)


def fit_memory(points: list[tuple[int, float]], limit_mb: float, simulated: bool) -> MemoryFit | None:
    """The least-squares line through (batch, peak MB) and the largest batch whose line stays within `limit_mb`;
    None from fewer than two batches, or where memory does not grow with the batch."""
    batches = {b for b, _ in points}
    if len(batches) < 2:
        return None
    n = len(points)
    mean_b = sum(b for b, _ in points) / n
    mean_m = sum(m for _, m in points) / n
    spread = sum((b - mean_b) ** 2 for b, _ in points)
    slope = sum((b - mean_b) * (m - mean_m) for b, m in points) / spread
    if slope <= 0:
        return None
    fixed = mean_m - slope * mean_b
    residual = max(abs(m - fixed - slope * b) for b, m in points)
    return MemoryFit(
        fixed_mb=fixed,
        per_sample_mb=slope,
        rows=n,
        batches=sorted(batches),
        max_residual_mb=residual if n > 2 else None,
        limit_mb=limit_mb,
        simulated=simulated,
        predicted_batch=max(1, int((limit_mb - fixed) // slope)),
    )


@dataclass(frozen=True)
class Confirmation:
    """The next batch to run after the fit, or (run None) what the runs found: `off` where they disagreed."""

    run: int | None
    said: str = ""
    off: bool = False


def known(batch: int, tried: dict[int, bool]) -> bool | None:
    """Whether `batch` fits as far as the runs so far tell (a smaller one failed, a larger one fitted)."""
    if any(ok and b >= batch for b, ok in tried.items()):
        return True
    if any(not ok and b <= batch for b, ok in tried.items()):
        return False
    return None


def confirm_next(predicted: int, tried: dict[int, bool], cap: int) -> Confirmation:
    """At most two runs: the prediction, then one more if it fits (which must not) or one fewer if it does not
    (which must); either way the two bound the largest batch exactly. Past them the line was off."""
    target = min(predicted, cap)
    fits = known(target, tried)
    if fits is None:
        return Confirmation(target)
    if fits and target >= cap:
        return Confirmation(None, f"confirming: {target} fits, the search's cap")
    if not fits and target <= 1:
        return Confirmation(None, "confirming: not even batch 1 fits")
    side = target + 1 if fits else target - 1
    side_fits = known(side, tried)
    if side_fits is None:
        return Confirmation(side)
    if fits and not side_fits:
        return Confirmation(None, f"confirming: {target} fits, {side} does not")
    if not fits and side_fits:
        return Confirmation(None, f"confirming: {target} does not fit, {side} does (the line was 1 over)")
    both = "fit" if fits else "do not fit"
    return Confirmation(
        None, f"the line was off: {min(target, side)} and {max(target, side)} both {both}; bisecting", off=True
    )
