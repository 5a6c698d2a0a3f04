"""Peak memory as a line in the per-device batch, mem(b) = fixed + per_sample * b, fitted from two or more rows of a
probe's batch search, so `--batch auto` runs the largest batch the line predicts within the headroom and confirms it
with one run on the other side, instead of bisecting by out-of-memory failures.

On a real device the line is held to (1 - headroom) of its memory. A simulated device (the demo's
device_memory_mb) holds only what grows with the batch, as the demo's allocator refuses it, so there the batch part
alone is held to it. A fit from rows whose memory does not grow (per_sample <= 0) predicts nothing."""

from __future__ import annotations

from gpuwizard.runs.records import Record


class MemoryFit(Record):
    """The fitted line, the limit it was held to and the batch it predicts."""

    fixed_mb: float
    per_sample_mb: float
    rows: int
    max_residual_mb: float | None = None
    """The largest distance of a row from the line; None from two rows (an exact fit)."""
    limit_mb: float
    simulated: bool
    """The limit is a simulated device's (only the batch part counts)."""
    predicted_batch: int

    def line(self) -> str:
        held = "per_sample x batch" if self.simulated else "the line"
        fit = f"{self.max_residual_mb:.1f} MB from it at most" if self.max_residual_mb is not None else "an exact fit"
        return (
            f"memory model: {self.fixed_mb:.0f} MB + {self.per_sample_mb:.3g} MB x batch (from {self.rows} rows, "
            f"{fit}); {held} within {self.limit_mb:.0f} MB up to batch {self.predicted_batch}"
        )


def fit_memory(points: list[tuple[int, float]], limit_mb: float, simulated: bool) -> MemoryFit | None:
    """The least-squares line through (batch, peak MB) and the largest batch within `limit_mb`; None from fewer than
    two batches, or where memory does not grow with the batch."""
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
    room = limit_mb if simulated else limit_mb - fixed
    residual = max(abs(m - fixed - slope * b) for b, m in points)
    return MemoryFit(
        fixed_mb=fixed,
        per_sample_mb=slope,
        rows=n,
        max_residual_mb=residual if n > 2 else None,
        limit_mb=limit_mb,
        simulated=simulated,
        predicted_batch=max(1, int(room // slope)),
    )


def step_up(batch: int) -> int:
    """The batch just past a prediction that fits: within the search's precision (1/8) of it."""
    return batch + max(1, batch // 8)


def step_down(batch: int) -> int:
    """The batch just under a prediction that does not fit, close enough that the two bound the largest to 1/8."""
    return batch - max(1, batch // 9)


def confirm_next(predicted: int, tried: dict[int, bool]) -> int | None:
    """The next batch to run after the fit (at most two: the prediction, then the other side of it); None once they
    bound the largest batch that fits, or once they disagree with the model (the search then bisects)."""
    if predicted not in tried:
        return predicted
    side = step_up(predicted) if tried[predicted] else step_down(predicted)
    if side not in tried and side >= 1:
        return side
    return None
