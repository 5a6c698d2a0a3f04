"""A probe's step time as a model fitted from the configurations it ran, so the GPU counts and batches it did not run
are predicted from measurements, not assumed (AdaptDL's goodput.py splits a step the same way: compute that grows
with the batch, a fixed cost, and the gradient all-reduce).

    t(b, n) = fixed + per_sample * b + comm * 2 (n - 1) / n

b is one rank's samples per optimizer step, n the GPU (or process) count; 2 (n - 1) / n is the share of the gradient
each rank sends and receives in a ring all-reduce (NCCL-tests' bus-bandwidth convention), 0 on one GPU. Least
squares over the measured rows; a coefficient the rows cannot tell (one batch, one count) or that comes out negative
is left out, and the model then says what it cannot predict. Its spread: the relative residuals of the fit, and the
same fit through the fastest and slowest sub-windows of each row.

Where the rows cannot tell comm (one GPU count, or a negative fit) and `gpuwizard gpus --bandwidth` measured this
host, comm is measured instead: the gradient's bytes over the bus bandwidth (busbw = algbw x 2 (n - 1) / n, so the
all-reduce of S bytes on n ranks takes S / busbw x 2 (n - 1) / n) at the size DDP sends (a 25 MiB bucket, or the
whole gradient where it is smaller: a small gradient's all-reduce is bound by latency, not bandwidth), and the other
coefficients are fitted around it. Where the rows can tell it, the fitted comm is kept and the measured one shown
beside it: DDP overlaps the all-reduce with the backward pass, so the fitted term may well be the smaller."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gpuwizard.runs.records import Record

COLUMNS = ("fixed_s", "per_sample_s", "comm_s")
DDP_BUCKET_BYTES = 25 * 2**20
"""DDP all-reduces the gradient in buckets of bucket_cap_mb = 25 MiB (torch.nn.parallel.DistributedDataParallel's
default): the message whose busbw counts is the smaller of the gradient and a bucket."""
GRADIENT_BYTES_PER_PARAMETER = 4
"""DDP all-reduces gradients in the parameters' dtype: float32, bf16 and fp16 mixed precision included (autocast
keeps float32 weights)."""


def ring(gpus: int) -> float:
    """The share of the gradient each rank moves in a ring all-reduce (0 on one GPU: nothing to reduce)."""
    return 2 * (gpus - 1) / gpus


@dataclass(frozen=True)
class Point:
    """One measured configuration: seconds per optimizer step at its median rate, and at its fastest and slowest
    sub-window (the same where no spread was measured)."""

    gpus: int
    batch: int
    step_s: float
    fast_s: float
    slow_s: float


class MeasuredComm(Record):
    """One whole gradient's all-reduce from a bandwidth measurement of this host: bytes / busbw, and at the
    measurement's fastest and slowest iterations."""

    comm_s: float
    fast_s: float
    slow_s: float
    gradient_bytes: int
    busbw: float
    """bytes/s at the largest size measured."""
    source: str
    """The busbw used, what measured it where and when, as `gpus --bandwidth` says it."""

    def text(self) -> str:
        return f"{self.comm_s * 1000:.3g} ms = {self.gradient_bytes / 1e6:.3g} MB of float32 gradients / {self.source}"


def gradient_bytes(parameters: float) -> int:
    return round(parameters * GRADIENT_BYTES_PER_PARAMETER)


def ddp_message(parameters: float) -> int:
    """The size of one all-reduce DDP sends for this model: a bucket, or the whole gradient where it is smaller."""
    return max(4, min(gradient_bytes(parameters), DDP_BUCKET_BYTES))


def measured_comm(
    parameters: float, busbw: float, busbw_low: float, busbw_high: float, source: str
) -> MeasuredComm | None:
    """The comm coefficient of a model of `parameters` at the busbw measured for its DDP message (None without a
    usable figure)."""
    if parameters <= 0 or min(busbw, busbw_low, busbw_high) <= 0:
        return None
    size = gradient_bytes(parameters)
    return MeasuredComm(
        comm_s=size / busbw,
        fast_s=size / busbw_high,
        slow_s=size / busbw_low,
        gradient_bytes=size,
        busbw=busbw,
        source=source,
    )


def host_comm(device: str, hardware: str, policy: str) -> MeasuredComm | None:
    """The all-reduce of the policy's gradient at the bus bandwidth `gpuwizard gpus --bandwidth` measured on this
    host for this kind of device (one on the probe's `hardware` first), at the size DDP sends; None where it was not
    measured or the catalog has no parameter count."""
    from gpuwizard.gpus.bandwidth import find, gbps, size_text
    from gpuwizard.model.catalog import load_catalog

    entry = load_catalog().get(policy)
    record = find(device, hardware=hardware)
    if entry is None or entry.params_m is None or record is None:
        return None
    message = ddp_message(entry.params_m * 1e6)
    busbw, low, high = record.busbw_at(message)
    low_size, high_size = (size_text(f(s.size_bytes for s in record.sizes)) for f in (min, max))
    swept = f"the {low_size}-{high_size} sweep" if len(record.sizes) > 1 else f"the {low_size} measurement"
    source = (
        f"busbw {gbps(busbw)} GB/s ({gbps(low)}-{gbps(high)}) for a {size_text(message)} all-reduce, from {swept} "
        f"of {record.source_text()}, `gpuwizard gpus --bandwidth`"
    )
    return measured_comm(entry.params_m * 1e6, busbw, low, high, source)


class Coefficients(Record):
    fixed_s: float
    per_sample_s: float | None = None
    """None: every row had one batch, so the model cannot tell a sample's cost from the fixed one."""
    comm_s: float | None = None
    """A whole gradient's all-reduce at 2 (n - 1) / n = 1; None: no row had more than one GPU."""

    def step_s(self, gpus: int, batch: int) -> float:
        return self.fixed_s + (self.per_sample_s or 0.0) * batch + (self.comm_s or 0.0) * ring(gpus)


class ThroughputFit(Record):
    """The fitted step-time model, with how well it fits and what it can predict."""

    median: Coefficients
    fast: Coefficients
    slow: Coefficients
    rows: int
    parameters: int
    rms_residual: float | None = None
    """Root mean square of the relative residuals of the median fit; None: as many rows as parameters (exact)."""
    max_residual: float | None = None
    batches: list[int] = []
    gpus: list[int] = []
    """The per-device batches and GPU counts the rows measured."""
    comm_source: Literal["fitted", "measured"] | None = None
    """Where comm_s comes from: the rows' fit, or this host's bandwidth measurement (None: neither has it)."""
    measured_comm: MeasuredComm | None = None
    """The bandwidth measurement's comm, used or only shown beside the fitted one."""

    def predicts(self, gpus: int, batch: int) -> str | None:
        """Why this configuration cannot be predicted, or None where it can."""
        if batch not in self.batches and self.median.per_sample_s is None:
            return "one batch measured: a sample's cost is not known"
        if gpus not in self.gpus and self.median.comm_s is None:
            return "one GPU count measured: the all-reduce's cost is not known"
        return None

    def step_range(self, gpus: int, batch: int) -> tuple[float, float, float]:
        """(median, shortest, longest) seconds per step: the three fits, widened by the largest relative residual."""
        values = [c.step_s(gpus, batch) for c in (self.median, self.fast, self.slow)]
        wide = self.max_residual or 0.0
        return values[0], min(values) * (1 - wide), max(values) * (1 + wide)

    def line(self) -> str:
        """The model in one line, as the probe prints it."""
        terms = [f"{self.median.fixed_s * 1000:.3g} ms"]
        if self.median.per_sample_s is not None:
            terms.append(f"{self.median.per_sample_s * 1000:.3g} ms x batch")
        if self.median.comm_s is not None:
            terms.append(f"{self.median.comm_s * 1000:.3g} ms x 2(n-1)/n ({self.comm_source})")
        fit = (
            f"residuals {self.rms_residual:.1%} rms, {self.max_residual:.1%} at most"
            if self.rms_residual is not None and self.max_residual is not None
            else "no residual: as many rows as parameters, an exact fit"
        )
        head = f"step time = {' + '.join(terms)} (least squares over {self.rows} measured rows; {fit})"
        return head + self.comm_text()

    def comm_text(self) -> str:
        """Where the all-reduce term comes from, measured against fitted where both are known."""
        measured = self.measured_comm
        if measured is None:
            return ""
        if self.comm_source == "measured":
            return f"; all-reduce measured, not fitted: {measured.text()}"
        return (
            f"; all-reduce fitted from the rows; measured {measured.text()}: DDP overlaps it with the backward pass, "
            "so the fitted term may be the smaller"
        )


def solve(rows: list[list[float]], targets: list[float]) -> list[float] | None:
    """Least squares by the normal equations (at most three columns); None where they are singular."""
    size = len(rows[0])
    matrix = [[sum(r[i] * r[j] for r in rows) for j in range(size)] for i in range(size)]
    vector = [sum(r[i] * t for r, t in zip(rows, targets)) for i in range(size)]
    for col in range(size):
        pivot = max(range(col, size), key=lambda k: abs(matrix[k][col]))
        if abs(matrix[pivot][col]) < 1e-12 * max(1.0, max(abs(v) for row in matrix for v in row)):
            return None
        matrix[col], matrix[pivot] = matrix[pivot], matrix[col]
        vector[col], vector[pivot] = vector[pivot], vector[col]
        for k in range(size):
            if k != col:
                factor = matrix[k][col] / matrix[col][col]
                matrix[k] = [a - factor * b for a, b in zip(matrix[k], matrix[col])]
                vector[k] -= factor * vector[col]
    return [vector[i] / matrix[i][i] for i in range(size)]


def fit_columns(
    points: list[Point], columns: list[str], times: list[float], comm_s: float | None = None
) -> Coefficients | None:
    """One least-squares fit on these columns (around a known comm_s, not among them); a negative coefficient is
    dropped and the rest refitted."""
    if comm_s is not None:
        times = [t - comm_s * ring(p.gpus) for p, t in zip(points, times)]
    while columns:
        design = [
            [{"fixed_s": 1.0, "per_sample_s": float(p.batch), "comm_s": ring(p.gpus)}[c] for c in columns]
            for p in points
        ]
        found = solve(design, times)
        if found is None:
            return None
        negative = [c for c, v in zip(columns, found) if v < 0 and c != "fixed_s"]
        if not negative:
            values = dict(zip(columns, found))
            return Coefficients(
                fixed_s=max(0.0, values.get("fixed_s", 0.0)),
                per_sample_s=values.get("per_sample_s"),
                comm_s=values.get("comm_s", comm_s),
            )
        columns = [c for c in columns if c != negative[0]]
    return None


def fit(points: list[Point], measured: MeasuredComm | None = None) -> ThroughputFit | None:
    """The model from the measured configurations (None without one); the columns the rows can tell apart, and the
    measured comm where they cannot tell it."""
    if not points:
        return None
    columns = ["fixed_s"]
    if len({p.batch for p in points}) > 1:
        columns.append("per_sample_s")
    if len({ring(p.gpus) for p in points}) > 1:
        columns.append("comm_s")
    steps = [p.step_s for p in points]
    median = fit_columns(points, list(columns), steps)
    if median is None:
        return None
    prior = measured if median.comm_s is None else None
    if prior is not None:
        median = fit_columns(points, [c for c in columns if c != "comm_s"], steps, prior.comm_s) or median
    fitted = [c for c in COLUMNS if c == "fixed_s" or (getattr(median, c) is not None and (c != "comm_s" or not prior))]
    fast = fit_columns(points, fitted, [p.fast_s for p in points], prior.fast_s if prior else None) or median
    slow = fit_columns(points, fitted, [p.slow_s for p in points], prior.slow_s if prior else None) or median
    residuals = [median.step_s(p.gpus, p.batch) / p.step_s - 1 for p in points]
    exact = len(points) <= len(fitted)
    return ThroughputFit(
        median=median,
        fast=fast,
        slow=slow,
        rows=len(points),
        parameters=len(fitted),
        rms_residual=None if exact else math.sqrt(sum(r * r for r in residuals) / len(residuals)),
        max_residual=None if exact else max(abs(r) for r in residuals),
        batches=sorted({p.batch for p in points}),
        gpus=sorted({p.gpus for p in points}),
        comm_source=None if median.comm_s is None else ("measured" if prior else "fitted"),
        measured_comm=measured,
    )
