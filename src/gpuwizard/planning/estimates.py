"""Time and cost per GPU count (the plan's `estimates`): from this preset's measured runs, else a published
single-GPU time in the catalog, scaled to other GPU counts with an assumed efficiency that says so."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuwizard.core.units import about, counted, device_unit
from gpuwizard.model.job import Basis, Estimate

if TYPE_CHECKING:
    from gpuwizard.analysis.probe.results import ProbeResult
    from gpuwizard.model.catalog import TrainingTime

ASSUMED_EFFICIENCY = 0.85
"""Data-parallel scaling efficiency assumed where no run measured it (1 GPU: 1.0)."""
SMALL_BATCH_FLOOR = 0.5
"""A step at a smaller batch than a published time's costs at least this share of one at that batch (assumed: a
GPU is not kept busy by a small batch)."""
NO_CPU_FIGURE = "no published CPU figure; probe it (gpuwizard probe) or run it"
"""A CPU row's source where this machine measured nothing: a GPU's published time says nothing of a CPU (ACT's A100
figure made "<1 min" of 30 steps that took 10 min on 2 CPU processes)."""


@dataclass
class Measured:
    """A throughput measured on this machine: a probe's configuration or a finished run of this preset."""

    run_id: str
    gpus: int
    samples_per_s: float
    source: str = ""
    """How the estimate names it (default: the run)."""
    basis: Basis = "measured"


@dataclass(frozen=True)
class PublishedTime:
    """A published time that names its steps and batch, so it scales to another run."""

    hours: float
    setting: str
    steps: int
    batch: int

    @classmethod
    def scalable(cls, published: TrainingTime | None) -> PublishedTime | None:
        """The catalog's time where it says its steps and batch (None: it cannot be scaled)."""
        if published is None or not published.steps or not published.batch:
            return None
        return cls(published.hours, published.setting, published.steps, published.batch)


def cpu_figure(published: TrainingTime | None) -> TrainingTime | None:
    """The catalog time where it was measured on a CPU (its setting says so), the only published basis for a CPU
    run."""
    return published if published is not None and "cpu" in published.setting.lower() else None


def startable_processes(device: str, scheduler: str = "local") -> int | None:
    """The most processes a CPU run starts on this machine (planning/machine.py refuses more than its cores);
    None where no limit applies here (GPUs: the plan's own check; SLURM: its nodes')."""
    if device != "cpu" or scheduler == "slurm":
        return None
    return os.cpu_count() or 1


def efficiency(gpus: int) -> float:
    return 1.0 if gpus == 1 else ASSUMED_EFFICIENCY


def step_cost(published: PublishedTime, per_device: int) -> float:
    """A step at this batch per GPU as a share of one at the published batch: proportional above it, never below
    SMALL_BATCH_FLOOR under it."""
    share = per_device / published.batch
    return share if share >= 1 else SMALL_BATCH_FLOOR + (1 - SMALL_BATCH_FLOOR) * share


def published_hours(published: PublishedTime, steps: int, per_device: int, gpus: int) -> float:
    """A published time scaled to this run: by its steps, and by its batch per GPU (step_cost), divided among the
    GPUs at the assumed efficiency."""
    return published.hours * steps / published.steps * step_cost(published, per_device) / efficiency(gpus)


def published_name(device: str) -> str:
    """A catalog time is for one GPU; a CPU preset's says in its setting what it was measured on."""
    return "published 1-GPU time" if device == "cuda" else "published time"


def published_note(published: PublishedTime, steps: int, per_device: int, device: str) -> str:
    """How the published time became this preset's one-device figure (why the two differ)."""
    unit = device_unit(device)
    cost = step_cost(published, per_device)
    batch = ""
    if per_device < published.batch:
        batch = (
            f": a step at batch {per_device} is taken as {cost:.2g}x one at batch {published.batch} (never under "
            f"{SMALL_BATCH_FLOOR:g}x: a small batch does not keep a {unit} busy)"
        )
    elif per_device > published.batch:
        batch = f": a step at batch {per_device} is taken as {cost:.2g}x one at batch {published.batch}"
    scaled = about(published_hours(published, steps, per_device, 1))
    return (
        f"The {published_name(device)}, {about(published.hours)} for {published.setting}, is scaled to this preset's "
        f"{steps} steps at {per_device} samples per {unit}{batch}, so {scaled} on {counted(1, device)}."
    )


def estimate_rows(
    rows: list[tuple[int, int | None, int | None]],
    measured: list[Measured],
    published: TrainingTime | None,
    gpu_hour: float | None,
    device: str = "cuda",
    scheduler: str = "local",
) -> list[Estimate]:
    """One estimate per (GPU count, steps, batch per GPU) row; samples are steps x batch per GPU x GPUs. The first
    figure per GPU count in `measured` wins (probes come before finished runs). `device` names the counts in the
    sources: GPUs, or a CPU run's processes; a CPU plan has no row for a count this machine refuses to start and no
    published basis but a CPU one."""
    limit = startable_processes(device, scheduler)
    rows = [row for row in rows if limit is None or row[0] <= limit]
    if device == "cpu":
        published = cpu_figure(published)
    nothing = (
        NO_CPU_FIGURE
        if device == "cpu"
        else "unknown: no finished run of this preset and no published time (a --smoke run measures)"
    )
    by_gpus: dict[int, Measured] = {}
    for m in measured:
        by_gpus.setdefault(m.gpus, m)
    anchor = min(measured, key=lambda m: (m.gpus, m.run_id)) if measured else None
    scalable = PublishedTime.scalable(published)
    out = []
    for gpus, steps, per_device in rows:
        samples = steps * per_device * gpus if steps and per_device else None
        rate, source = None, nothing
        basis: Basis = "unknown"
        wall_h, note = None, None
        if gpus in by_gpus:
            m = by_gpus[gpus]
            rate, source, basis = m.samples_per_s, m.source or f"measured: run {m.run_id}", m.basis
        elif anchor is not None:
            basis = "assumed"
            per_gpu = anchor.samples_per_s / (anchor.gpus * efficiency(anchor.gpus))
            rate = per_gpu * gpus * efficiency(gpus)
            named = f"probe {anchor.run_id}" if anchor.basis == "probed" else f"run {anchor.run_id}"
            source = f"{named} on {counted(anchor.gpus, device)}, {ASSUMED_EFFICIENCY:.0%} scaling efficiency assumed"
        elif scalable is not None and steps and per_device:
            basis = "published" if gpus == 1 else "assumed"
            wall_h = published_hours(scalable, steps, per_device, gpus)
            source = f"{published_name(device)} ({scalable.setting})" + (
                f", {efficiency(gpus):.0%} scaling efficiency assumed" if gpus > 1 else ""
            )
            note = published_note(scalable, steps, per_device, device) if gpus == 1 else None
        if rate and samples:
            wall_h = samples / rate / 3600
        gpu_hours = wall_h * gpus if wall_h is not None else None
        cost = gpu_hours * gpu_hour if gpu_hours is not None and gpu_hour else None
        basis = basis if wall_h is not None else "unknown"
        out.append(Estimate(gpus, samples, wall_h, gpu_hours, cost, source, basis, steps, per_device, note))
    return out


def measured_runs(preset_name: str, per_device_batch: int | None, probe: ProbeResult | None) -> list[Measured]:
    """What this machine measured for the preset, best first: its newest probe (`newest_probe`, at the batch nearest
    the plan's), then the newest finished, full (not smoke) run per world size."""
    from gpuwizard.analysis.probe.results import probed_rates
    from gpuwizard.runs.rundir import scaling_report

    noise = f"; probed: B_noise ≈ {probe.noise.plus_minus()}" if probe and probe.noise else ""
    probed = (
        [
            Measured(probe.probe_id, gpus, rate, source + noise, "probed")
            for gpus, rate, source in probed_rates(probe, per_device_batch)
        ]
        if probe
        else []
    )
    return probed + [Measured(r["run_id"], r["world_size"], r["samples_per_s"]) for r in scaling_report(preset_name)]
