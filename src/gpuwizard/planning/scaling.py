"""What the GPU count changes: the batch on each count, the scaled lr and steps, the fit, strategy, time and advice."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpuwizard.core.errors import Problem, note, problem, warning
from gpuwizard.core.units import about
from gpuwizard.model.catalog import PolicyEntry
from gpuwizard.model.job import BatchRow, DetectedDevices, Estimate, Fit
from gpuwizard.model.preset import Preset
from gpuwizard.trainers.base import Trainer

if TYPE_CHECKING:
    from gpuwizard.analysis.probe.noise_estimate import NoiseFigure
    from gpuwizard.analysis.probe.results import ProbeResult

TABLE_COUNTS = (1, 2, 4, 8)
ADDED_WARMUP_RATIO = 0.05


def scale(
    rule: str,
    k: float,
    lr: float,
    steps: int,
    trainer_warmup: Callable[[int], int | None],
    warmup_ratio: float | None,
) -> tuple[float, int, int | None, str, list[Problem]]:
    """Apply the scaling rule; returns lr, steps, warmup steps, where the warmup comes from, and findings.

    `trainer_warmup(steps)` is the warmup the trainer applies on its own for the steps it is given (some scale it)."""
    found: list[Problem] = []
    new_lr, new_steps = lr, steps
    if rule == "linear_lr":
        new_lr = lr * k
    elif rule == "sqrt_lr":
        new_lr = lr * math.sqrt(k)
    elif rule == "divide_steps":
        new_steps = max(1, math.ceil(steps / k))
    if rule == "none" and k != 1:
        found.append(
            warning(
                "scaling.rule",
                f"the effective batch changes by {k:g}x against the reference run but lr and steps stay as tuned",
                "choose linear_lr (lr x k with a warmup) or divide_steps (steps / k)",
                value="none",
            )
        )
    default_warmup = trainer_warmup(new_steps)
    if warmup_ratio is not None:
        return new_lr, new_steps, math.ceil(warmup_ratio * new_steps), "optim.warmup_ratio", found
    if rule == "linear_lr" and k > 1 and not default_warmup:
        warmup = math.ceil(ADDED_WARMUP_RATIO * new_steps)
        found.append(
            note(
                f"linear_lr raises the lr {k:g}x and this trainer has no warmup by default: added {warmup} warmup "
                f"steps ({ADDED_WARMUP_RATIO:.0%} of steps)"
            )
        )
        return new_lr, new_steps, warmup, "added for linear_lr", found
    return new_lr, new_steps, default_warmup, "trainer default" if default_warmup else "none", found


def choose_strategy(
    preset: Preset, trainer: Trainer, policy: PolicyEntry, world: int, fit: Fit
) -> tuple[str, list[Problem]]:
    if preset.strategy == "single" and world > 1:
        return "single", [
            problem(
                "strategy",
                f"single means one process, but the preset runs {world}",
                "set hardware.gpus: 1, or strategy: ddp",
                value="single",
            )
        ]
    if preset.strategy != "auto":
        if preset.strategy == "fsdp" and not trainer.supports_fsdp:
            return "fsdp", [
                problem(
                    "strategy",
                    f"the {trainer.name} trainer has no FSDP path in gpuwizard",
                    "use strategy: ddp (or auto)",
                    value="fsdp",
                )
            ]
        if preset.strategy == "ddp" and world == 1:
            return "single", [note("strategy ddp on one GPU runs as a single process")]
        return preset.strategy, []
    if world == 1:
        return "single", []
    if fit.fits is False and trainer.supports_fsdp and policy.fsdp_supported:
        return "fsdp", [
            note(
                f"strategy auto chose fsdp: {policy.key} needs ~{fit.estimate_gb} GB per device unsharded, more than "
                f"the {fit.device_gb} GB available"
            )
        ]
    return "ddp", []


def estimate_fit(policy: PolicyEntry, preset: Preset, per_device: int | None, world: int, hw: DetectedDevices) -> Fit:
    batch = per_device or preset.batch.size
    estimate = policy.estimate_gb(batch, preset.mixed_precision)
    sharded = policy.estimate_gb(batch, preset.mixed_precision, shard_over=world) if world > 1 else None
    if preset.hardware.gpu_memory_gb:
        device_gb, source = preset.hardware.gpu_memory_gb, "hardware.gpu_memory_gb"
    elif hw.memory_gb:
        device_gb, source = hw.memory_gb, f"detected {hw.name}" if hw.name else "detected"
    else:
        return Fit(None, estimate, None, "unknown", sharded)
    return Fit(estimate <= device_gb * 0.92, estimate, device_gb, source, sharded)


def sweep_hint(preset: Preset, world: int) -> str:
    """The command that runs `world` one-GPU variants of this preset at once: seeds where the trainer takes one."""
    from gpuwizard.model.trainer_options import OPTIONS

    if "seed" in OPTIONS[preset.trainer].model_fields:
        varied = f"--seeds {world}"
    else:
        lr = preset.optim.lr
        varied = "--set optim.lr=" + (",".join(f"{lr * 2**i:g}" for i in range(world)) if lr else "V1,V2")
    return f"`gpuwizard sweep {preset.name} --set hardware.gpus=1 {varied}`"


def run_noise(preset_name: str) -> tuple[NoiseFigure, str] | None:
    """B_noise of the newest gauged full run of the preset over the second half of its gauged steps, and where in
    training that is: the figure grows as the loss falls, so a run's own later figure beats a probe's first steps."""
    from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE, estimate, read_gauge
    from gpuwizard.runs.rundir import list_runs

    for entry in list_runs(preset_name):
        status = entry.status
        path = entry.run.path / GAUGE_FILE
        if status is None or status.probe or status.smoke or not status.final or not path.is_file():
            continue
        steps = sorted(read_gauge(path).steps, key=lambda s: s.step)
        late = steps[len(steps) // 2 :]
        found = estimate(late, warmup=0) if len(late) > 1 else None
        figure = found.figure(late[0].b_small, late[0].b_big) if found is not None else None
        if figure is None:
            continue
        return (
            figure,
            f"steps {late[0].step}-{late[-1].step} of run {entry.run.run_id}, the second half of its gauged steps",
        )
    return None


def job_noise(preset_name: str, probe: ProbeResult | None) -> tuple[NoiseFigure, str] | None:
    """The job's B_noise where it was measured, with its stage: a gauged full run's later steps first, else the
    newest probe's (from its checkpoint, or labelled as the initial weights' first steps)."""
    found = run_noise(preset_name)
    if found is not None:
        return found
    if probe is None or probe.noise is None:
        return None
    stage = probe.noise_stage or "the initial weights, the probe's first steps"
    return probe.noise, f"probe {probe.probe_id}, {stage}"


def critical_batch_note(preset_name: str, effective: int | None, probe: ProbeResult | None) -> str:
    """Where a larger batch stops buying fewer steps: this job's B_noise where a run or probe measured it, with the
    stage of training it comes from and what doubling the plan's batch would buy (S = S_min (1 + B_noise / B)),
    else that nobody knows it."""
    found = job_noise(preset_name, probe)
    if found is None:
        return (
            "the critical batch size for robot imitation learning is unmeasured in the literature: scaling rules are "
            f"heuristics, so compare against the single-GPU baseline (`gpuwizard probe {preset_name}` measures this "
            "job's gradient noise scale, B_noise, and says whether a larger batch still buys fewer steps)"
        )
    noise, stage = found
    early = "" if "initial weights" not in stage else ", where it is typically far smaller than later in training"
    said = f"this job's gradient noise scale, measured over {stage}{early}: {noise.text()}, in samples"
    if not effective:
        return said

    def doubled(b_noise: float) -> float:
        """Steps at twice the batch against steps at it."""
        return (1 + b_noise / (2 * effective)) / (1 + b_noise / effective)

    ends = sorted(doubled(v) for v in (noise.low, noise.high) if v is not None)
    spread = f" ({ends[0]:.2f}-{ends[1]:.2f} across the interval)" if len(ends) == 2 else ""
    return (
        f"{said}; at this plan's effective batch of {effective}, twice the batch would need "
        f"{doubled(noise.b_simple):.2f}x the steps{spread}, each batch at its own best lr (0.50x: half the steps, as "
        "many samples; 1.00x: no fewer steps, twice the samples): a guide, not a law (it grows as the loss falls)"
    )


def more_gpus_pay(preset: Preset, world: int) -> str:
    return (
        "More GPUs pay when (1) the model does not fit one device, (2) the same fine-tune runs many times (sweeps "
        f"and seeds side by side, one per GPU: {sweep_hint(preset, world)}), or (3) you pretrain on a large dataset."
    )


def advice_lines(
    preset: Preset,
    policy: PolicyEntry,
    world: int,
    strategy: str,
    fit: Fit,
    k: float | None,
    probe: ProbeResult | None = None,
) -> list[str]:
    """Honest words on whether more GPUs pay for this job."""
    lines = []
    cpu = preset.hardware.device == "cpu"
    size = f"~{fit.estimate_gb} GB per {'process' if cpu else 'device'} at this batch" + (
        "; CPU processes share the machine's memory"
        if cpu
        else f"; {fit.device_gb:g} GB per device, {fit.device_source}"
        if fit.device_gb
        else "; device memory unknown: set hardware.gpu_memory_gb"
    )
    if fit.fits is False:
        if strategy == "fsdp" and fit.sharded_estimate_gb is not None:
            lines.append(
                f"{policy.title} does not fit one device ({size}). FSDP over {world} devices brings it to "
                f"~{fit.sharded_estimate_gb} GB each, so the extra GPUs pay."
            )
        else:
            lines.append(
                f"{policy.title} does not fit one device ({size}). Lower batch.size with grad_accum, use LoRA, or "
                "shard the model; more GPUs with plain DDP do not lower per-device memory."
            )
    elif world > 1 and probe is not None and probe.decision is not None:  # measured here: no generic claim
        lines.append(f"{policy.title} ({size}). Probe {probe.probe_id} on this machine: {probe.decision.paragraph}")
        lines.append(more_gpus_pay(preset, world))
    elif world > 1:
        lead = (
            f"{policy.title} fits one device ({size}). A"
            if fit.fits
            else f"{policy.title} needs {size}. If one device holds that, a"
        )
        lines.append(
            f"{lead} second GPU will not pay for a typical small fine-tune: the speedup is below {world}x, the lr and "
            "steps must be rescaled, and distributed runs add failure modes."
        )
        lines.append(more_gpus_pay(preset, world))
    else:
        lines.append(
            f"{policy.title} on one device ({size}). One GPU is the right baseline; get it green before scaling out."
        )
    if policy.single_gpu_hours:
        name = "Published time" if preset.hardware.device == "cpu" else "Published single-GPU time"
        lines.append(
            f"{name}: {about(policy.single_gpu_hours.hours)} ({policy.single_gpu_hours.setting}), for those steps and "
            "that batch; the estimates scale it to this preset's steps and batch."
        )
    noise = job_noise(preset.name, probe) if k and k != 1 else None
    if noise is not None:
        lines.append(
            f"The effective batch is {k:g}x the reference run's; B_noise ~ {noise[0].b_simple:.3g} over {noise[1]}, "
            "and the notes say what a larger batch buys in steps."
        )
    elif k and k != 1:
        lines.append(
            f"The effective batch is {k:g}x the reference run's; the critical batch size for robot imitation learning "
            "is unmeasured in the literature, so a larger batch may not train faster per sample (`gpuwizard probe` "
            "measures this job's)."
        )
    return lines


def plan_estimates(
    preset: Preset,
    policy: PolicyEntry,
    table: list[BatchRow],
    reference_effective: int | None,
    base_lr: float,
    probe: ProbeResult | None,
) -> list[Estimate]:
    """Time and cost for each GPU count of the batch table, on the steps the scaling rule gives that count."""
    from gpuwizard.planning.estimates import estimate_rows, measured_runs

    rows: list[tuple[int, int | None, int | None]] = []
    for row in table:
        effective = row.effective
        if not effective or row.error:
            rows.append((row.gpus, None, None))
            continue
        k = effective / reference_effective if reference_effective else 1.0
        _, steps, _, _, _ = scale(preset.scaling.rule, k, base_lr, preset.optim.steps, lambda _: None, None)
        rows.append((row.gpus, steps, effective // row.gpus))  # samples per GPU per update
    per_update = next((r[2] for r in rows if r[0] == preset.world_size and r[2]), None)
    per_device = per_update // preset.batch.grad_accum if per_update else None
    device = "cpu" if preset.hardware.device == "cpu" else "cuda"  # as resolve_device: only a cpu preset runs there
    return estimate_rows(
        rows, measured_runs(preset.name, per_device, probe), policy.single_gpu_hours, preset.costs.gpu_hour, device
    )


def batch_table(trainer: Trainer, preset: Preset) -> list[BatchRow]:
    counts = sorted(set(TABLE_COUNTS) | {preset.world_size})
    rows = []
    for gpus in counts:
        layout = trainer.batch_layout(preset.batch.size, preset.batch.grad_accum, gpus)
        rows.append(BatchRow(gpus, layout.per_device, layout.effective, layout.error, gpus == preset.world_size))
    return rows
