"""`gpuwizard probe`: what one configuration of a preset measures, and the answer a probe gives.

Each configuration (GPU count x per-device batch) is a short real run of the preset's own command through the
supervisor (runner/launch/start.py); this module reads what such a run measured from its folder, judges the grid,
and keeps the result as probe.json in the probe's folder (probe_run.py runs the grid, probe_verdict.py says it).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypedDict

from pydantic import Field

from gpuwizard.analysis.probe.answer import Decision
from gpuwizard.analysis.probe.memory_model import MemoryFit
from gpuwizard.analysis.probe.noise_estimate import Disagreement, NoiseFigure, combine
from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE, gauge_figure
from gpuwizard.analysis.probe.readings import gpu_others, peak_memory, text_of
from gpuwizard.analysis.probe.throughput_model import ThroughputFit
from gpuwizard.analysis.probe.time_to_loss import LossTime
from gpuwizard.core import paths
from gpuwizard.core.codes import RunState
from gpuwizard.core.kinds import EventKind, ProbeState, Severity
from gpuwizard.runs.records import Metric, Record, RecordError
from gpuwizard.runs.rundir import RunDir

WARMUP_SHARE = 0.25
"""The first quarter of the steps logged (compile, communicator start-up, allocator growth) is not measured."""
ENOUGH_LINES = 8
ENOUGH_S = 8.0
"""A configuration has been measured once its window holds this many log lines over this many seconds: the probe
then stops it rather than run all its steps (a slow trainer ends first, a fast one is not measured for less)."""
INPUT_BOUND_SHARE = 0.5
"""Waiting on data for this share of each step means more GPUs will not help."""
GOOD_EFFICIENCY = 0.7
"""A GPU count is recommended only while it keeps this efficiency against the fewest (analysis/probe/decision.py)."""
OOM_KINDS = {EventKind.OUT_OF_MEMORY}
SUB_WINDOWS = 4
"""The steady window is cut into this many runs of consecutive log lines; the spread of their rates is the
measurement's own noise (one configuration read 592 and 198 samples/s three minutes apart on a loaded machine)."""


class ProbeRow(Record):
    """One configuration: what its short run measured, or why it has no figure."""

    gpus: int
    per_device_batch: int
    outcome: Literal["measured", "does not fit", "failed", "skipped", "stopped", "predicted"]
    """predicted: a configuration no run measured, its samples/s from the throughput model (ProbeResult.predicted
    only, never among the measured rows)."""
    run_id: str | None = None
    samples_per_s: float | None = None
    """The median of the sub-windows' rates (rate_low-rate_high is their spread)."""
    rate_low: float | None = None
    rate_high: float | None = None
    """The slowest and fastest sub-window of the steady window (None in a probe.json from before they were kept)."""
    sub_windows: int = 0
    """How many runs of consecutive log lines the spread comes from (1: no spread measured)."""
    window: str | None = None
    """Which steps the samples/s comes from."""
    memory_mb: float | None = None
    """Peak memory of the busiest device (NVML per process on GPUs, resident memory per rank on CPU runs)."""
    memory_source: str | None = None
    device_memory_mb: float | None = None
    data_share: float | None = None
    """Share of each step spent waiting for data, where the trainer logs it (LeRobot data_s / step_s)."""
    first_step_s: float | None = None
    seconds: float | None = None
    detail: str = ""
    speedup: float | None = None
    efficiency: float | None = None
    noise: NoiseFigure | None = None
    """B_noise measured by the gauge in this configuration's run."""
    noise_detail: str = ""
    """Why this configuration has no B_noise (empty where it has one)."""
    repeat: int = 0
    """0: the grid's run of this configuration; 1, 2, ...: its runs in the rounds that alternate the compared ones."""
    window_start: float | None = None
    window_end: float | None = None
    """When the measured window began and ended (epoch seconds): which windows of two configurations are adjacent."""
    background: float | None = None
    """Cores kept busy by processes outside the probe over the window (CPU time, /proc through psutil)."""
    background_shift: float | None = None
    """The window's second half minus its first in those cores: a background that moved while it was measured."""
    waiting: float | None = None
    """Threads outside the probe ready to run over the window (/proc/loadavg less the probe's own): the demand."""
    gpu_background: float | None = None
    """Utilization (%) of the run's GPUs by other processes over the window (NVML, the run's gpu.jsonl)."""

    @property
    def fits(self) -> bool | None:
        return {"measured": True, "does not fit": False}.get(self.outcome)


class ProbeResult(Record):
    """probe.json: the grid, the recommendation and the verdict, with the machine it was measured on."""

    probe_id: str
    preset: str
    trainer: str
    policy: str
    device: Literal["cpu", "cuda"]
    hardware: str
    created: float
    ended: float | None = None
    state: ProbeState = Field(ProbeState.RUNNING, strict=False)  # as read back from JSON, a plain string
    steps: int
    """The most optimizer steps one configuration runs (a steady rate ends it sooner)."""
    job_steps: int | None = None
    """The preset's own optimizer steps: a probe never runs more than the job would."""
    steps_asked: bool = False
    """--steps N was given: each configuration runs all its steps (a longer window, a tighter spread)."""
    headroom: float
    budget_s: float | None = None
    full_run_samples: int | None = None
    """Samples the preset's full run trains on at its own batch: what the verdict's hours are for."""
    rows: list[ProbeRow] = []
    batches: list[int] = []
    """The per-device batches of the grid (a batch search adds the batches it tried to `rows`)."""
    batch_limit: int | None = None
    """The largest per-device batch that fit, where the probe searched for it (--batch auto)."""
    limit_gpus: int | None = None
    skipped: list[str] = []
    recommended: ProbeRow | None = None
    verdict: list[str] = []
    error: str | None = None
    gpus: list[int] = []
    """The GPU counts asked for (some may have been left out as unstartable)."""
    grad_accum: int = 1
    """The preset's accumulation: a row's global batch is gpus x per_device_batch x grad_accum."""
    noise: NoiseFigure | None = None
    """The probe's B_noise: the configuration that measured it with the narrowest interval."""
    noise_detail: str = ""
    """Why no configuration measured B_noise (empty where one did)."""
    throughput: ThroughputFit | None = None
    """The step-time model fitted from the measured rows (analysis/probe/throughput_model.py)."""
    predicted: list[ProbeRow] = []
    """Configurations no run measured, predicted by `throughput`: kept apart from `rows`."""
    time_to_loss: list[LossTime] = []
    goodput: str = ""
    """The verdict in time to the same loss, one sentence (analysis/probe/time_to_loss.py)."""
    cores: int | None = None
    """This machine's cores, where the probe ran on the CPU: no process count past them is predicted (its ranks would
    share the cores, which the throughput model does not know)."""
    memory: MemoryFit | None = None
    """The memory model a batch search fitted (--batch auto), where two rows that fit gave it."""
    repeats: list[ProbeRow] = []
    """The compared configurations' further runs, alternating (A B B A ...) so each window has a neighbour of the
    other taken under the same background (`rows` keeps each configuration's grid run)."""
    rounds: int = 0
    """How many alternating rounds were asked for (--repeat)."""
    noise_stage: str = ""
    """Where in training B_noise was measured: the initial weights' first steps, or a checkpoint's step."""
    from_run: str | None = None
    start_step: int = 0
    """The run whose newest checkpoint, at this step, every configuration started from (probe --from-run)."""
    expected_s: float | None = None
    """The probe's expected duration as it said before it started (refined as configurations end)."""
    lr: float | None = None
    """The preset's lr, which every configuration ran at (scaling.rule none in each); from a run's checkpoint, that
    run's (its optimizer state holds it)."""
    scaled_lr: dict[str, float] = {}
    """The lr the preset's scaling rule gives each global batch of the grid (keys: the batch): what the step ratio's
    'each batch at its own best lr' stands for."""
    scaling_rule: str = ""
    decision: Decision | None = None
    """The one rule's answer: what is recommended, how sure, why (analysis/probe/decision.py)."""


def probes_dir() -> Path:
    return paths.data_dir() / "probes"


def steady_window(metrics: list[Metric], start: int = 0) -> list[Metric]:
    """The log lines after the warm-up: past the first quarter of the steps logged since `start` (the step a run
    resumed from), never the first line."""
    timed = [m for m in metrics if m.step is not None and m.samples_per_s is not None]
    if not timed:
        return []
    warm = max(timed[0].step or 0, start + math.ceil(((timed[-1].step or 0) - start) * WARMUP_SHARE))
    return [m for m in timed if (m.step or 0) > warm]


def measured_enough(run: RunDir, start: int = 0) -> bool:
    window = steady_window([m for m in run.metrics() if m.kind == "train"], start)
    return len(window) >= ENOUGH_LINES and window[-1].t - window[0].t >= ENOUGH_S


def window_rates(window: list[Metric], parts: int = SUB_WINDOWS) -> list[float]:
    """The mean samples/s of each of up to `parts` runs of consecutive log lines, in order (as equal as they cut)."""
    count = min(parts, len(window))
    bounds = [round(i * len(window) / count) for i in range(count + 1)] if count else []
    return [statistics.fmean(m.samples_per_s or 0.0 for m in window[a:b]) for a, b in zip(bounds, bounds[1:])]


def rate_spread(window: list[Metric]) -> tuple[float, float, float, int] | None:
    """(median, min, max, sub-windows) of the window's sub-window rates; None for an empty window."""
    rates = window_rates(window)
    if not rates:
        return None
    return statistics.median(rates), min(rates), max(rates), len(rates)


class _RunFields(TypedDict):
    """What every row measure() makes says of its run."""

    gpus: int
    per_device_batch: int
    run_id: str
    seconds: float


def measure(
    run: RunDir,
    gpus: int,
    batch: int,
    steps: int,
    device_memory_mb: float | None,
    stopped_measured: bool = False,
    start: int = 0,
) -> ProbeRow:
    """What one configuration run measured: the trainer's own samples/s after the warm-up steps since `start` (a run
    the probe stopped once it had measured enough counts as measured)."""
    from gpuwizard.trainers.registry import get_trainer

    status = run.status()
    base: _RunFields = {
        "gpus": gpus,
        "per_device_batch": batch,
        "run_id": run.run_id,
        "seconds": round(status.elapsed_s(), 1),
    }
    events, _ = run.events()
    oom = next((e for e in events if e.kind in OOM_KINDS), None)
    if oom is not None:
        return ProbeRow(outcome="does not fit", detail=oom.title, device_memory_mb=device_memory_mb, **base)
    if status.state == RunState.STOPPED and not stopped_measured:
        return ProbeRow(outcome="stopped", detail=status.stop_reason or "stopped", **base)
    if status.state not in (RunState.FINISHED, RunState.STOPPED):
        failure = next((e for e in reversed(events) if e.severity == Severity.ERROR), None)
        reason = failure.title if failure else status.error or f"ended {status.state}"
        return ProbeRow(outcome="failed", detail=reason, **base)
    metrics = [m for m in run.metrics() if m.step is not None and m.samples_per_s is not None]
    window = steady_window(metrics, start) or metrics[1:] or metrics
    spread = rate_spread(window)
    rate, low, high, parts = spread if spread else (None, None, None, 0)
    shown = (
        f"steps {window[0].step}-{window[-1].step} ({len(window)} log lines, {window[-1].t - window[0].t:.0f} s)"
        if window
        else None
    )
    memory, source = peak_memory(run, status.device)
    started = status.started or status.created
    first = (metrics[0].t - started) if metrics else None
    trainer = get_trainer(status.trainer)
    shares = []
    for line in text_of(run.log).splitlines():
        info = trainer.parse_line(line) if any(m in line for m in trainer.progress_markers) else None
        if info and info.data_s is not None and info.step_s:
            shares.append(info.data_s / info.step_s)
    return ProbeRow(
        outcome="measured" if rate else "failed",
        samples_per_s=rate,
        rate_low=low,
        rate_high=high,
        sub_windows=parts,
        window=shown,
        memory_mb=memory,
        memory_source=source,
        device_memory_mb=device_memory_mb,
        data_share=sum(shares) / len(shares) if shares else None,
        first_step_s=round(first, 1) if first is not None else None,
        detail="" if rate else "the log gave no samples/s",
        gpu_background=gpu_others(run, window[0].t, window[-1].t) if window and status.device == "cuda" else None,
        window_start=window[0].t if window else None,
        window_end=window[-1].t if window else None,
        **base,
    )


NO_SECOND_BATCH = (
    "one process without accumulation has one batch size, and the noise scale needs two (several processes, or "
    "batch.grad_accum of 2 or more)"
)


def gauged(gpus: int, grad_accum: int) -> bool:
    """Whether a configuration's run can measure B_noise: DDP of several ranks, or one process's micro-batches."""
    return gpus > 1 or grad_accum > 1


def with_noise(row: ProbeRow, run: RunDir, grad_accum: int) -> ProbeRow:
    """The row with the B_noise its gauged run measured, or what was not measured and why."""
    if row.outcome != "measured":
        return row
    if not gauged(row.gpus, grad_accum):
        return row.model_copy(update={"noise_detail": NO_SECOND_BATCH})
    figure, why = gauge_figure(run.path / GAUGE_FILE)
    return row.model_copy(update={"noise": figure, "noise_detail": why})


def probe_noise(rows: list[ProbeRow], named: Callable[[int], str]) -> tuple[NoiseFigure | None, str]:
    """The probe's B_noise: every measured run's figure pooled (noise_estimate.combine), or why there is none: none was
    measured, or their intervals share no value (then no one of them is picked)."""
    measured = [r for r in rows if r.noise is not None]
    if not measured:
        why = list(dict.fromkeys(r.noise_detail for r in rows if r.noise_detail))
        return None, "; ".join(why) or "no configuration was measured"
    figures = [
        r.noise.model_copy(update={"source": f"{named(r.gpus)} at batch {r.per_device_batch}, {r.noise.steps} steps"})
        for r in measured
        if r.noise is not None
    ]
    found = combine(figures)
    if isinstance(found, Disagreement):
        return None, found.text()
    if found is None or len(figures) == 1:
        return figures[0], ""
    return found.figure.model_copy(update={"source": f"{len(figures)} runs pooled ({found.figure.source})"}), ""


def with_headroom(row: ProbeRow, headroom: float) -> ProbeRow:
    """A run that used more than (1 - headroom) of its device's memory does not fit with the stated headroom."""
    if row.outcome == "measured" and row.memory_mb and row.device_memory_mb:
        if row.memory_mb > (1 - headroom) * row.device_memory_mb:
            used = row.memory_mb / row.device_memory_mb
            return row.model_copy(
                update={"outcome": "does not fit", "detail": f"used {used:.0%} of the device, over the headroom"}
            )
    return row


def add_scaling(rows: list[ProbeRow]) -> list[ProbeRow]:
    """Speedup and efficiency of each measured row against the fewest GPUs at the same per-device batch."""
    out = []
    for row in rows:
        peers = [r for r in rows if r.per_device_batch == row.per_device_batch and r.samples_per_s]
        base = min(peers, key=lambda r: r.gpus) if peers else None
        if row.samples_per_s and base is not None and base.samples_per_s:
            speedup = row.samples_per_s / base.samples_per_s
            row = row.model_copy(update={"speedup": speedup, "efficiency": speedup / (row.gpus / base.gpus)})
        out.append(row)
    return out


def grid_rows(result: ProbeResult) -> list[ProbeRow]:
    """The rows of the grid the user asked for (a batch search also tried batches outside it)."""
    return [r for r in result.rows if not result.batches or r.per_device_batch in result.batches]


def newest_probe(preset_name: str) -> ProbeResult | None:
    """The newest finished probe of a preset on this machine that measured something (what `plan`'s estimates
    use)."""
    from gpuwizard.runs.records import read_record

    base = probes_dir()
    if not base.is_dir():
        return None
    found = []
    for path in base.glob(f"*-{preset_name}"):
        try:
            result = read_record(path / "probe.json", ProbeResult)
        except RecordError:
            continue
        if result.preset == preset_name and result.state == ProbeState.FINISHED and any(r.fits for r in result.rows):
            found.append(result)
    return max(found, key=lambda r: r.created) if found else None


def age_text(seconds: float) -> str:
    if seconds < 3600:
        return f"{max(1, round(seconds / 60))} min ago"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} days ago"


def probed_rates(result: ProbeResult, per_device_batch: int | None) -> list[tuple[int, float, str]]:
    """(GPU count, samples/s, source) of a probe, at the batch nearest the plan's per-device batch."""
    out = []
    for gpus in sorted({r.gpus for r in result.rows}):
        rows = [r for r in result.rows if r.gpus == gpus and r.fits and r.samples_per_s]
        if not rows:
            continue
        row = min(rows, key=lambda r: (abs(r.per_device_batch - (per_device_batch or r.per_device_batch)), -r.gpus))
        when = age_text(time.time() - (result.ended or result.created))
        out.append(
            (
                gpus,
                row.samples_per_s or 0.0,
                f"probed on this machine {when} ({result.hardware}, batch {row.per_device_batch})",
            )
        )
    return out


PROBE_RECORD = "probe.json"
SCRATCH = "scratch"
