"""The answer of a probe in words: the table (80 columns), whether each larger GPU count pays for the full run
(compare's judgement, held to the recommendation's bar), and the recommended configuration."""

from __future__ import annotations

import textwrap

from gpuwizard.analysis.compare import judgement
from gpuwizard.analysis.probe_results import (
    ENOUGH_LINES,
    ENOUGH_S,
    GOOD_EFFICIENCY,
    INPUT_BOUND_SHARE,
    ProbeResult,
    best_per_gpu_count,
    grid_rows,
    recommend,
)
from gpuwizard.core.units import fmt_hours


def device_word(device: str, n: int) -> str:
    unit = "GPU" if device == "cuda" else "process"
    return f"{n} {unit}" + ("" if n == 1 else ("s" if device == "cuda" else "es"))


def span(hours: float) -> str:
    """A run's wall time: seconds below a minute (a probe's demo job takes seconds), else as the plan says it."""
    seconds = hours * 3600
    if seconds >= 59.5:
        return fmt_hours(hours)
    return f"{seconds:.1f} s" if seconds < 9.95 else f"{seconds:.0f} s"


TIME_SCALES = ((1.0, "hours", ".1f"), (1 / 60, "minutes", ".0f"), (0.0, "seconds", ".0f"))


def device_time(hours: float, instead: float, unit: str) -> str:
    """Device time against another, at the scale of the larger: "11.1 GPU-hours instead of 10.0"."""
    larger = max(hours, instead)
    size, name, spec = next(s for s in TIME_SCALES if larger >= s[0])
    if name == "seconds":
        size, spec = 1 / 3600, (".1f" if larger * 3600 < 9.95 else ".0f")
    return f"{hours / size:{spec}} {unit}-{name} instead of {instead / size:{spec}}"


def pays(speedup: float, gpus_ratio: float) -> str:
    """compare's judgement, held to the recommendation's bar: a count below GOOD_EFFICIENCY is never said to pay."""
    said = judgement(1 / speedup, gpus_ratio / speedup)
    efficiency = speedup / gpus_ratio
    if said.startswith("pays") and efficiency < GOOD_EFFICIENCY:
        return (
            f"does not pay here, {efficiency:.0%} efficiency is below the {GOOD_EFFICIENCY:.0%} a recommendation needs "
            f"({gpus_ratio / speedup - 1:.0%} more compute for {1 - 1 / speedup:.0%} less time)"
        )
    return said


def verdict(result: ProbeResult) -> list[str]:
    """Plain words: does each larger GPU count pay for the full run, is it input-bound, does anything fit?"""
    rows, device = result.rows, result.device
    best = best_per_gpu_count(grid_rows(result))
    lines = []
    if not best:
        if rows and all(r.outcome == "does not fit" for r in rows if r.outcome != "skipped"):
            smallest = min(r.per_device_batch for r in rows)
            lines.append(
                f"One device cannot hold {result.policy} at any batch tried (down to {smallest} per device): more "
                "GPUs with sharding (strategy: fsdp) is the reason to scale here."
            )
        else:
            lines.append("No configuration was measured, so there is nothing to recommend.")
        return lines
    base_rate, base = next(iter(best.values()))
    unit = "GPU" if device == "cuda" else "process"
    base_h = result.full_run_samples / base_rate / 3600 if result.full_run_samples else None
    for rate, row in list(best.values())[1:]:
        speedup = rate / base_rate
        gpus_ratio = row.gpus / base.gpus
        batches = (
            "on both"
            if row.per_device_batch == base.per_device_batch
            else f"against {base.per_device_batch} on {base.gpus}"
        )
        head = (
            f"{device_word(device, row.gpus)}: {speedup:.2f}x the samples/s of {base.gpus} ({speedup / gpus_ratio:.0%} "
            f"efficiency, batch {row.per_device_batch} per device {batches})"
        )
        if base_h is not None:
            hours = base_h / speedup
            head += (
                f"; the full run ({result.full_run_samples:,} samples) takes {span(base_h)} on "
                f"{device_word(device, base.gpus)} and {span(hours)} on {row.gpus}, for "
                f"{device_time(hours * row.gpus, base_h * base.gpus, unit)}"
            )
        lines.append(f"{head}: {pays(speedup, gpus_ratio)}.")
    if base.data_share is not None and base.data_share >= INPUT_BOUND_SHARE:
        lines.append(
            f"The job waits on data for {base.data_share:.0%} of each step: it is input-bound, so more GPUs will not "
            "help; raise the loader workers (trainer_options.num_workers) or move the dataset to a local disk."
        )
    if result.batch_limit is not None:
        over = min((r.per_device_batch for r in rows if r.outcome == "does not fit"), default=None)
        kept = f", {result.headroom:.0%} of device memory kept free" if device == "cuda" else ""
        lines.append(
            f"Batch search: {result.batch_limit} per device fits on {device_word(device, result.limit_gpus or 1)}"
            + (f", {over} does not" if over else ", the largest tried")
            + f"{kept}."
        )
    choice = recommend(grid_rows(result))
    if choice is not None:
        more = "GPUs" if device == "cuda" else "processes"
        why = f": more {more} do not pay here" if choice.gpus == base.gpus and len(best) > 1 else ""
        lines.append(
            f"Recommended: {device_word(device, choice.gpus)} at batch {choice.per_device_batch} per device "
            f"({choice.samples_per_s:.1f} samples/s){why}."
        )
    return lines


def result_text(result: ProbeResult) -> str:
    """The table (80 columns) and the verdict."""
    lines = [
        f"probe {result.probe_id}: {result.preset} on {result.hardware}",
        *textwrap.wrap(steps_text(result), 80),
        f"{'gpus':>4} {'batch':>5} {'smp/s':>8} {'speed':>6} {'eff':>4} {'mem/dev':>9} {'data':>5}  fits",
    ]
    for r in result.rows:
        memory = f"{r.memory_mb / 1024:.2f} GB" if r.memory_mb else "-"
        fits = {"measured": "yes", "does not fit": "no"}.get(r.outcome, r.outcome)
        lines.append(
            f"{r.gpus:>4} {r.per_device_batch:>5} {_f(r.samples_per_s, '.1f'):>8} {_f(r.speedup, '.2f', 'x'):>6} "
            f"{_f(r.efficiency and 100 * r.efficiency, '.0f', '%'):>4} {memory:>9} "
            f"{_f(r.data_share and 100 * r.data_share, '.0f', '%'):>5}  {fits}"
            + (f" ({r.detail})" if r.detail and r.outcome != "measured" else "")
        )
    measured = [r for r in result.rows if r.window]
    notes = (
        [f"samples/s: the trainer's own, {measured[0].window}; memory: {measured[0].memory_source}"] if measured else []
    )
    notes += [f"skipped: {s}" for s in result.skipped]
    lines += [part for note in notes for part in textwrap.wrap(note, 80, subsequent_indent="  ")]
    lines.append("")
    lines += [part for line in result.verdict for part in textwrap.wrap(line, 80)]
    return "\n".join(lines)


def steps_text(result: ProbeResult) -> str:
    """How long each configuration runs, as it is: a cap, and the steady rate that ends a run before it."""
    whole = " (all of the job's)" if result.job_steps is not None and result.steps >= result.job_steps else ""
    return (
        f"up to {result.steps} steps per configuration{whole}, each stopped once its rate is steady "
        f"({ENOUGH_LINES} log lines over {ENOUGH_S:.0f} s after the warm-up)"
    )


def _f(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"
