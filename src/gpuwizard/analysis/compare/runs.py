"""`gpuwizard compare RUN RUN...`: did the run on more GPUs pay? Throughput, scaling efficiency, loss per sample and
per hour, GPU-hours and cost, from the runs' own folders, and a verdict in plain words. Runs on the same count
measure no scaling: they are compared run to run, naming what differs."""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from gpuwizard.analysis.compare.settings import differences, run_settings
from gpuwizard.core.units import counted, device_unit
from gpuwizard.runs.records import Metric, RecordError
from gpuwizard.runs.rundir import RunDir, finite

if TYPE_CHECKING:
    from gpuwizard.model.preset import Preset

SMOOTHING = 0.3
"""Weight of each new loss in the exponential average the comparisons read (single losses are noisy)."""
SAME = 0.05
"""Ratios within this of 1 count as the same (time, GPU-hours, loss)."""
NAMED_DIFFERENCES = 8
"""The most differences a run-to-run paragraph names (--json lists them all)."""


@dataclass
class CurvePoint:
    samples: float
    wall_s: float
    loss: float


@dataclass
class RunFacts:
    run_id: str
    preset: str
    gpus: int
    device: str
    state: str
    duration_s: float
    samples_per_s: float | None
    samples_seen: float | None
    gpu_hours: float
    cost: float | None
    final_loss: float | None
    curve: list[CurvePoint] = field(default_factory=list)
    speedup: float | None = None
    efficiency: float | None = None
    loss_at_equal_samples: float | None = None
    loss_at_equal_time: float | None = None
    time_to_target_s: float | None = None
    gpu_hours_to_target: float | None = None
    same_count_as: str | None = None
    """The oldest run on the same count, which this one is compared with run to run (no speedup between them)."""
    differences: list[str] = field(default_factory=list)
    """What this run was started with that same_count_as was not: 'lr 0.001 against 0.002'."""
    per_device_batch: int | None = None
    held_out_curve: list[CurvePoint] = field(default_factory=list)
    """The loss on held-out episodes (dataset.eval_split), where the run logged one: compare judges on it when every
    run has it, since a training loss that keeps falling can be memorisation."""


@dataclass
class Comparison:
    runs: list[RunFacts]
    base: str
    equal_samples: float | None
    equal_time_s: float | None
    target_loss: float | None
    verdicts: list[str]
    loss_kind: str = "training"
    """Which loss the equal-samples, equal-time and time-to-target figures use: 'held-out' where every run logged
    one, else 'training'."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for run in data["runs"]:
            for key in ("curve", "held_out_curve"):
                run[key] = [[p["samples"], p["wall_s"], p["loss"]] for p in run[key]]
        return data


class CompareError(Exception):
    """A run that cannot be compared, with the reason in one line."""


def smoothed(metrics: list[Metric]) -> list[tuple[Metric, float]]:
    out, average = [], None
    for m in metrics:
        if m.loss != m.loss or m.loss in (float("inf"), float("-inf")):
            continue
        average = m.loss if average is None else SMOOTHING * m.loss + (1 - SMOOTHING) * average
        out.append((m, average))
    return out


def run_facts(run: RunDir, gpu_hour: float | None) -> tuple[RunFacts, dict[str, dict[str, str]]]:
    """What the run did, and what it was started with (compare_settings)."""
    try:
        status, plan = run.status(), run.plan()
    except RecordError as exc:
        raise CompareError(f"run {run.run_id} cannot be read: {exc}") from None
    preset = run_preset(run)
    if gpu_hour is None and preset is not None:
        gpu_hour = preset.costs.gpu_hour
    progress = run.progress()
    started = status.started or status.created
    duration = status.elapsed_s()
    per_step = (plan.effective_batch or 0) / max(1, plan.trainer_steps_per_update)
    metrics = run.metrics()

    def curve_of(kind: str) -> list[CurvePoint]:
        return [
            CurvePoint(m.step * per_step, max(0.0, m.t - started), loss)
            for m, loss in smoothed([m for m in metrics if m.kind == kind])
            if m.step is not None and per_step
        ]

    curve = curve_of("train")
    samples_seen = progress.step * per_step if progress and progress.step is not None and per_step else None
    if progress and finite(progress.samples_per_s_mean):
        rate = progress.samples_per_s_mean
    else:
        rate = samples_seen / duration if samples_seen and duration else None
    gpu_hours = plan.world_size * duration / 3600
    facts = RunFacts(
        run_id=run.run_id,
        preset=status.preset,
        gpus=plan.world_size,
        device=status.device,
        state=str(status.state),
        duration_s=round(duration, 1),
        samples_per_s=rate,
        samples_seen=samples_seen,
        gpu_hours=gpu_hours,
        cost=gpu_hours * gpu_hour if gpu_hour else None,
        final_loss=curve[-1].loss if curve else None,
        curve=curve,
        per_device_batch=plan.per_device_batch,
        held_out_curve=curve_of("held_out"),
    )
    return facts, run_settings(run, plan, preset)


def at_samples(curve: list[CurvePoint], samples: float, by_time: bool = False) -> float | None:
    """The smoothed loss at a number of samples (or wall seconds), interpolated between logged points."""
    xs = [p.wall_s if by_time else p.samples for p in curve]
    i = bisect.bisect_left(xs, samples)
    if not curve or samples > xs[-1]:
        return None
    if i == 0:
        return curve[0].loss
    (xa, a), (xb, b) = (xs[i - 1], curve[i - 1]), (xs[i], curve[i])
    share = (samples - xa) / (xb - xa) if xb != xa else 1.0
    return a.loss + share * (b.loss - a.loss)


def time_to(curve: list[CurvePoint], loss: float) -> float | None:
    """Wall seconds until the smoothed loss first reached `loss`."""
    for prev, point in zip([None, *curve], curve, strict=False):
        if point.loss <= loss:
            if prev is None or prev.loss == point.loss:
                return point.wall_s
            share = (prev.loss - loss) / (prev.loss - point.loss)
            return prev.wall_s + share * (point.wall_s - prev.wall_s)
    return None


def compare(runs: list[RunDir], gpu_hour: float | None = None) -> Comparison:
    """Speedup and the scaling verdicts across GPU counts only, against the oldest run on the fewest; a run on a
    count an older run already has is compared with that one run to run."""
    read = [run_facts(run, gpu_hour) for run in runs]
    facts, settings = [f for f, _ in read], {f.run_id: s for f, s in read}
    base = min(facts, key=lambda f: (f.gpus, f.run_id))
    oldest: dict[int, RunFacts] = {}
    for f in sorted(facts, key=lambda f: f.run_id):
        oldest.setdefault(f.gpus, f)
    across = len(oldest) > 1
    for f in facts:
        if across and (f is base or f.gpus != base.gpus) and f.samples_per_s and base.samples_per_s:
            f.speedup = f.samples_per_s / base.samples_per_s
            f.efficiency = f.speedup / (f.gpus / base.gpus)
        if f is not oldest[f.gpus]:
            f.same_count_as = oldest[f.gpus].run_id
            f.differences = differences(settings[f.run_id], settings[f.same_count_as])
    held_out = all(f.held_out_curve for f in facts)
    if held_out:  # every run held episodes out: judge on them, not on a loss that memorising also lowers
        for f in facts:
            f.curve, f.final_loss = f.held_out_curve, f.held_out_curve[-1].loss
    with_curves = [f for f in facts if f.curve]
    complete = len(with_curves) == len(facts)
    equal = min(f.curve[-1].samples for f in with_curves) if complete else None
    equal_time = min(f.curve[-1].wall_s for f in with_curves) if complete else None
    target = max(f.curve[-1].loss for f in with_curves) if len(with_curves) == len(facts) else None
    for f in with_curves:
        if equal is not None:
            f.loss_at_equal_samples = at_samples(f.curve, equal)
        if equal_time is not None:
            f.loss_at_equal_time = at_samples(f.curve, equal_time, by_time=True)
        if target is not None:
            f.time_to_target_s = time_to(f.curve, target)
            if f.time_to_target_s is not None:
                f.gpu_hours_to_target = f.gpus * f.time_to_target_s / 3600
    verdicts = [verdict(base, f, target) for f in facts if f.gpus != base.gpus]
    verdicts += [run_to_run(oldest[f.gpus], f, target) for f in facts if f.same_count_as]
    return Comparison(facts, base.run_id, equal, equal_time, target, verdicts, "held-out" if held_out else "training")


def run_preset(run: RunDir) -> Preset | None:
    """The preset the run was started with (preset.yaml in its folder), or None where it cannot be read."""
    from gpuwizard.core.errors import UserError
    from gpuwizard.model.preset_files import load_preset_file

    try:
        return load_preset_file(run.path / "preset.yaml")
    except UserError:
        return None


OVER = 1 + SAME
"""An efficiency past this is above 100% by more than two runs' own noise: no added device gives it."""


def over_caveat(base: RunFacts, other: RunFacts) -> str:
    """The caveat an efficiency above 100% takes (empty below): at the same batch per device no added process gives
    it, so the machine's load changed between the runs; at a larger one, that batch explains some of it."""
    if other.efficiency is None or other.efficiency <= OVER:
        return ""
    if other.per_device_batch and base.per_device_batch and other.per_device_batch > base.per_device_batch:
        return (
            f", above 100%: part is its batch of {other.per_device_batch} per device against {base.per_device_batch}, "
            "the rest the machine's load, which differed between the runs"
        )
    unit = device_unit(other.device, 2)
    return (
        f", above 100%, which more {unit} at the same work each cannot give: the machine's load differed between the "
        "runs, so this is not the scaling"
    )


def scaling_line(preset_name: str) -> str | None:
    """The closing line's scaling of a preset's finished full runs, each count against one process, an efficiency
    above 100% with its caveat (it can only be a difference in the runs' conditions)."""
    from gpuwizard.runs.rundir import scaling_report

    rows = [r for r in scaling_report(preset_name) if r["efficiency"] is not None and r["world_size"] > 1]
    if not rows:
        return None
    said = [
        f"{r['world_size']} processes: {r['speedup']:.2f}x the 1-process samples/s (efficiency {r['efficiency']:.0%}"
        f"{over_note(r['efficiency'])})"
        for r in rows
    ]
    return f"scaling of {preset_name}: " + "; ".join(said)


def over_note(efficiency: float) -> str:
    """The caveat a history's efficiency above 100% takes (empty below): the runs' conditions differed, not scaling."""
    return (
        ", above 100%: the runs' load or batch per process differed, so it is no scaling" if efficiency > OVER else ""
    )


def judgement(time_ratio: float, hours_ratio: float) -> str:
    """Whether more GPUs pay, from the wall time and the GPU-hours they take against fewer (1.0: the same)."""
    if time_ratio < 1 - SAME and hours_ratio > 1 + SAME:
        return f"pays for wall-clock, costs {hours_ratio - 1:.0%} more compute"
    if time_ratio < 1 - SAME:
        return "pays: sooner, for about the same compute or less"
    if time_ratio <= 1 + SAME:
        return "does not pay: no sooner" + (", and costs more compute" if hours_ratio > 1 + SAME else "")
    return "does not pay: slower"


def verdict(base: RunFacts, other: RunFacts, target: float | None) -> str:
    """One paragraph: did `other` (more GPUs) pay against `base`, in wall-clock and in compute?"""
    who = f"{counted(other.gpus, other.device)} ({other.run_id})"
    than = f"{base.gpus} ({base.run_id})"
    hours = "GPU-hours" if other.device == "cuda" else "process-hours"
    if other.time_to_target_s is None or base.time_to_target_s is None or target is None:
        if other.speedup is None:
            return f"{who}: no losses or throughput logged to compare with {than}."
        return (
            f"{who} processed samples {other.speedup:.2f}x as fast as {than} (scaling efficiency "
            f"{other.efficiency:.0%}{over_caveat(base, other)}); no loss curve to say whether it learned as much."
        )
    time_ratio = other.time_to_target_s / base.time_to_target_s if base.time_to_target_s else None
    hours_ratio = (
        other.gpu_hours_to_target / base.gpu_hours_to_target
        if other.gpu_hours_to_target and base.gpu_hours_to_target
        else None
    )
    if time_ratio is None or hours_ratio is None:
        return f"{who} and {than} both start at the target loss {target:.4g}; nothing to compare."
    head = f"{who} reached loss {target:.4g} in {time_ratio:.2f}x the time of {than} for {hours_ratio:.2f}x the {hours}"
    per_sample = ""
    if other.loss_at_equal_samples is not None and base.loss_at_equal_samples:
        ratio = other.loss_at_equal_samples / base.loss_at_equal_samples
        if ratio > 1 + SAME:
            per_sample = (
                f" Per sample it learned less (loss {ratio:.2f}x at equal samples): the larger batch needs more "
                "samples, so rescale lr or steps."
            )
        elif ratio < 1 - SAME:
            per_sample = f" Per sample it learned more (loss {ratio:.2f}x at equal samples)."
    caveat = over_caveat(base, other)
    said = f"{head}: {judgement(time_ratio, hours_ratio)}.{per_sample}"
    return f"{said} Its scaling efficiency reads {other.efficiency:.0%}{caveat}." if caveat else said


def run_to_run(reference: RunFacts, other: RunFacts, target: float | None) -> str:
    """One paragraph on two runs on the same count: no speedup, but what differs and by how much."""
    head = (
        f"{other.run_id} and {reference.run_id} both ran on {counted(other.gpus, other.device)}, so they say nothing "
        "about scaling"
    )
    untrained = [r.run_id for r in (other, reference) if not r.curve and not r.samples_seen and r.final_loss is None]
    if untrained:  # a run stopped or failed before its first step: its time is start-up, not training
        return f"{head}; {join_and(untrained)} trained no step, so there is nothing to compare."
    named = other.differences[:NAMED_DIFFERENCES]
    if named:
        more = len(other.differences) - len(named)
        head += f": they differ in {', '.join(named)}" + (f" and {more} more (--json lists them)" if more else "")
    else:
        head += ": they differ in nothing gpuwizard records (settings, trainer, machine), so the gap is noise"
    gaps = []
    if other.samples_per_s and reference.samples_per_s:
        gaps.append(
            f"processed {other.samples_per_s:.0f} samples/s against {reference.samples_per_s:.0f} "
            f"({change(other.samples_per_s, reference.samples_per_s)})"
        )
    if other.duration_s and reference.duration_s:
        gaps.append(
            f"took {other.duration_s:.0f} s against {reference.duration_s:.0f} s "
            f"({change(other.duration_s, reference.duration_s)})"
        )
    if target is not None and other.time_to_target_s and reference.time_to_target_s:
        gaps.append(
            f"reached loss {target:.4g} in {other.time_to_target_s:.0f} s against {reference.time_to_target_s:.0f} s "
            f"({change(other.time_to_target_s, reference.time_to_target_s)})"
        )
    if other.loss_at_equal_samples and reference.loss_at_equal_samples:
        gaps.append(
            f"had {other.loss_at_equal_samples / reference.loss_at_equal_samples:.2f}x the loss at equal samples"
        )
    said = f" Run to run, {other.run_id} {join_and(gaps)}." if gaps else ""
    return f"{head}.{said}"


def change(value: float, reference: float) -> str:
    return f"{value / reference - 1:+.0%}"


def join_and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def curve_label(run: RunFacts, letter: str) -> str:
    """The legend of a run's loss curve: its letter and what it ran on (the text above names each letter whole)."""
    return f"{letter}: {counted(run.gpus, run.device)}"


def run_labels(c: Comparison) -> dict[str, str]:
    """A letter per run for the table, so it fits 80 columns while each run id is printed whole (and copyable)."""
    return {f.run_id: chr(ord("A") + i) if i < 26 else str(i + 1) for i, f in enumerate(c.runs)}


def compare_text(c: Comparison) -> str:
    labels = run_labels(c)
    count, hours = ("proc", "proc-h") if {f.device for f in c.runs} == {"cpu"} else ("gpus", "GPU-h")
    lines = [f"{labels[f.run_id]:>3}  {f.run_id}" for f in c.runs]
    lines += [
        "",
        f"{'run':>3} {count:>4} {'smp/s':>7} {'speed':>6} {'eff':>4} {'loss@eq':>8} {'t->tgt':>7} {hours:>6} "
        f"{'cost':>6}",
    ]
    for f in c.runs:
        lines.append(
            f"{labels[f.run_id]:>3} {f.gpus:>4} {fmt(f.samples_per_s, '.1f'):>7} {fmt(f.speedup, '.2f', 'x'):>6} "
            f"{fmt(f.efficiency and 100 * f.efficiency, '.0f', '%'):>4} {fmt(f.loss_at_equal_samples, '.4g'):>8} "
            f"{fmt(f.time_to_target_s, '.0f', ' s'):>7} {f.gpu_hours:>6.3f} {fmt(f.cost, '.2f'):>6}"
        )
    lines.append("")
    if c.loss_kind == "held-out":
        lines.append("loss: the held-out loss (episodes no run trained on), which every run logged")
    elif any(f.held_out_curve for f in c.runs):
        lines.append("loss: the training loss (not every run logged a held-out loss)")
    if c.equal_samples is not None:
        lines.append(f"loss@eq: smoothed loss at {c.equal_samples:.0f} samples, the most every run saw")
    if c.equal_time_s is not None:
        at_time = ", ".join(f"{labels[f.run_id]} {fmt(f.loss_at_equal_time, '.4g')}" for f in c.runs)
        lines.append(f"loss at {c.equal_time_s:.0f} s of wall time, the shortest run's length: {at_time}")
    if c.target_loss is not None:
        lines.append(f"t->target: wall time to the worse run's final loss, {c.target_loss:.4g}")
    base = next(f for f in c.runs if f.run_id == c.base)
    if any(f.gpus != base.gpus for f in c.runs):
        lines.append(f"speed and eff: against {c.base}, the fewest {device_unit(base.device, 2)}")
        if any(over_caveat(base, f) for f in c.runs):
            lines.append("eff above 100% is no scaling: the runs' conditions differed (their paragraphs say how)")
    else:
        lines.append(f"all runs on {counted(base.gpus, base.device)}: no speedup to measure; below, how they differ")
    lines.append("")
    lines += c.verdicts
    return "\n".join(lines)


def fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"
