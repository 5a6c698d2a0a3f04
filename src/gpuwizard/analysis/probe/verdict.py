"""The answer of a probe in words: the table (80 columns), whether each larger GPU count pays for the full run
(compare's judgement, held to the recommendation's bar), and the recommended configuration."""

from __future__ import annotations

import re
import textwrap

from gpuwizard.analysis.compare.runs import judgement
from gpuwizard.analysis.probe.results import (
    ENOUGH_LINES,
    ENOUGH_S,
    GOOD_EFFICIENCY,
    INPUT_BOUND_SHARE,
    ProbeResult,
    ProbeRow,
    best_per_gpu_count,
    grid_rows,
    probe_noise,
    recommend,
)
from gpuwizard.analysis.probe.throughput_model import Point, fit, host_comm
from gpuwizard.analysis.probe.time_to_loss import Config, LossTime, sentence, table
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
    if result.goodput:
        lines.append(result.goodput)
    choice = recommend(grid_rows(result))
    if choice is not None:
        more = "GPUs" if device == "cuda" else "processes"
        sure = certainty(result)
        if sure.startswith(TOO_NOISY):  # the line above says so: no firm "do not pay" under it
            why = f"; whether more {more} pay is too noisy to tell here (above)" if len(best) > 1 else ""
        else:
            why = f": more {more} do not pay here" if choice.gpus == base.gpus and len(best) > 1 else ""
        if sure:
            lines.append(sure)
        lines.append(
            f"Recommended: {device_word(device, choice.gpus)} at batch {choice.per_device_batch} per device "
            f"({choice.samples_per_s:.1f} samples/s{spread_text(choice)}){why}."
        )
    return lines


def timed_rows(result: ProbeResult) -> list[ProbeRow]:
    """The rows a run measured a samples/s for (one over the headroom too: its rate is real)."""
    return [r for r in result.rows if r.samples_per_s and r.outcome in ("measured", "does not fit")]


def step_times(row: ProbeRow, grad_accum: int) -> tuple[float, float, float]:
    """(median, shortest, longest) seconds per optimizer step of a row, from its samples/s and their spread."""
    samples = row.gpus * row.per_device_batch * grad_accum
    rate = row.samples_per_s or 0.0
    fast, slow = row.rate_high or rate, row.rate_low or rate
    return samples / rate, samples / max(fast, rate), samples / min(slow, rate)


def fill_models(result: ProbeResult) -> None:
    """The probe's B_noise, the throughput model, its predicted rows and the verdict in time to the same loss, from
    the rows measured so far."""
    result.noise, result.noise_detail = probe_noise(result.rows, lambda n: device_word(result.device, n))
    measured = timed_rows(result)
    points = [Point(r.gpus, r.per_device_batch, *step_times(r, result.grad_accum)) for r in measured]
    result.throughput = fit(points, host_comm(result.device, result.hardware, result.policy))
    result.predicted = predictions(result, measured)
    result.time_to_loss, result.goodput = loss_verdict(result, measured)


def predictions(result: ProbeResult, measured: list[ProbeRow]) -> list[ProbeRow]:
    """The grid's configurations no run measured, twice the most GPUs measured (on the CPU, within its cores: ranks
    past them would share them) and twice the largest batch measured (where the memory line does not rule it out),
    from the throughput model, with the memory line's figure per device where there is one."""
    model = result.throughput
    if model is None or not measured:
        return []
    counts = sorted({*result.gpus, *(r.gpus for r in result.rows), 2 * max(r.gpus for r in measured)})
    if result.device == "cpu" and result.cores:
        counts = [n for n in counts if n <= result.cores]
    batches = result.batches or sorted({r.per_device_batch for r in measured})
    bigger = 2 * max(r.per_device_batch for r in measured)
    memory = result.memory
    if bigger not in batches and (memory is None or bigger <= memory.predicted_batch):
        batches = [*batches, bigger]
    ran = {(r.gpus, r.per_device_batch) for r in result.rows if r.outcome in ("measured", "does not fit")}
    out = []
    for gpus in counts:
        for batch in batches:
            if (gpus, batch) in ran or model.predicts(gpus, batch) is not None:
                continue
            step, shortest, longest = model.step_range(gpus, batch)
            if step <= 0 or longest <= 0:
                continue
            samples = gpus * batch * result.grad_accum
            out.append(
                ProbeRow(
                    gpus=gpus,
                    per_device_batch=batch,
                    outcome="predicted",
                    memory_mb=memory.fixed_mb + memory.per_sample_mb * batch if memory is not None else None,
                    samples_per_s=samples / step,
                    rate_low=samples / longest,
                    rate_high=samples / shortest if shortest > 0 else None,
                    detail="throughput model; "
                    + (
                        "fits by the memory line"
                        if memory is not None and batch <= memory.predicted_batch
                        else "whether it fits is not predicted"
                    ),
                )
            )
    return out


def loss_verdict(result: ProbeResult, measured: list[ProbeRow]) -> tuple[list[LossTime], str]:
    """Each configuration's time and samples to the same loss, and the sentence; where B_noise was not measured,
    why not."""
    noise = result.noise
    if noise is None:
        if not result.noise_detail or not measured:
            return [], ""
        return [], f"Time to the same loss: not known, B_noise was not measured ({result.noise_detail})."
    configs = []
    for row in [*(r for r in measured if r.fits), *result.predicted]:
        step, shortest, longest = step_times(row, result.grad_accum)
        samples = row.gpus * row.per_device_batch * result.grad_accum
        configs.append(
            Config(row.gpus, row.per_device_batch, samples, step, shortest, longest, row.outcome == "predicted")
        )
    rows = table(configs, noise.b_simple, noise.low, noise.high)
    unit = "GPU" if result.device == "cuda" else "process"
    return rows, sentence(rows, f"{noise.text()}, {noise.source}", unit, result.job_steps)


def interval(row: ProbeRow) -> tuple[float, float] | None:
    """The slowest and fastest sub-window of a row, where more than one was measured."""
    if row.rate_low is None or row.rate_high is None or row.sub_windows < 2:
        return None
    return row.rate_low, row.rate_high


def rate_range(row: ProbeRow) -> str:
    """ "540-610": a row's sub-window spread in samples/s ("-" where none was measured)."""
    found = interval(row)
    if found is None:
        return "-"
    spec = ".1f" if found[1] < 100 else ".0f"
    return f"{found[0]:{spec}}-{found[1]:{spec}}"


def spread_text(row: ProbeRow) -> str:
    return f", {rate_range(row)} over {row.sub_windows} windows" if interval(row) else ""


TOO_NOISY = "Too noisy to decide"


def certainty(result: ProbeResult) -> str:
    """How sure the recommendation is: whether each larger count's efficiency against the fewest, taken at the
    slowest and fastest sub-windows of both, stays on one side of the bar a recommendation needs."""
    best = list(best_per_gpu_count(grid_rows(result)).values())
    if len(best) < 2:
        return ""
    device, base = result.device, best[0][1]
    rows = [row for _, row in best]
    if any(interval(row) is None for row in rows):
        few = ", ".join(device_word(device, row.gpus) for row in rows if interval(row) is None)
        return (
            f"How sure: not known; {few} gave no spread (a probe.json from before the spread was kept, or too few "
            "log lines in the steady window): probe again to measure it."
        )
    rates = ", ".join(f"{device_word(device, row.gpus)} {rate_range(row)}" for row in rows) + " samples/s"
    undecided: list[str] = []
    decided: list[str] = []
    for row in rows[1:]:
        (low, high), (base_low, base_high) = interval(row) or (0.0, 0.0), interval(base) or (1.0, 1.0)
        ratio = row.gpus / base.gpus
        worst, best_eff = low / base_high / ratio, high / base_low / ratio
        said = f"{device_word(device, row.gpus)} {worst:.0%}-{best_eff:.0%} efficiency"
        if worst < GOOD_EFFICIENCY <= best_eff:
            undecided.append(said)
        else:
            side = "above" if worst >= GOOD_EFFICIENCY else "below"
            decided.append(f"{said}, {side} the {GOOD_EFFICIENCY:.0%} a recommendation needs")
    windows = min(row.sub_windows for row in rows)
    if undecided:
        return (
            f"{TOO_NOISY}: {rates} ({', '.join(undecided)}, either side of the {GOOD_EFFICIENCY:.0%} a "
            "recommendation needs); rerun on a quieter "
            f"machine{rerun_steps(result)}."
        )
    return f"Sure: {rates} (slowest-fastest of {windows} windows each); even at the extremes, {'; '.join(decided)}."


STEPS_SHOWN = re.compile(r"steps (\d+)-(\d+)")


def rerun_steps(result: ProbeResult) -> str:
    """ " or with --steps N": N runs each configuration past where its steady rate stopped it (never past the job's
    steps; nothing where the runs already reached them)."""
    ends = [int(m.group(2)) for r in result.rows if r.window and (m := STEPS_SHOWN.match(r.window))]
    reached = max(ends, default=result.steps)
    steps = min(result.job_steps or 4 * reached, 4 * reached)
    return f" or with --steps {steps} (each configuration then runs all its steps)" if steps > reached else ""


def recommendation_line(result: ProbeResult) -> str:
    """One line for the wizard's Scaling step: the recommended configuration and how sure it is, in words."""
    choice = recommend(grid_rows(result))
    if choice is None:
        return "probe: " + (result.verdict[0] if result.verdict else "nothing measured")
    sure = certainty(result)
    said = sure.split(":", 1)[0].lower() if sure else "one count measured, nothing compared"
    return (
        f"probe recommends {device_word(result.device, choice.gpus)} at batch {choice.per_device_batch} "
        f"({choice.samples_per_s:.0f} samples/s{spread_text(choice)}); {said}"
    )


def result_text(result: ProbeResult) -> str:
    """The table (80 columns), the models and the verdict."""
    lines = [
        f"probe {result.probe_id}: {result.preset} on {result.hardware}",
        *textwrap.wrap(steps_text(result), 80),
        f"{'gpus':>4} {'batch':>5} {'smp/s':>7} {'spread':>11} {'speed':>6} {'eff':>4} {'mem/dev':>9} "
        f"{'data':>5} {'t-loss':>6}  fits",
    ]
    to_loss = {(t.gpus, t.per_device_batch, t.predicted): t for t in result.time_to_loss}
    for r in [*result.rows, *result.predicted]:
        memory = f"{r.memory_mb / 1024:.2f} GB" if r.memory_mb else "-"
        fits = {"measured": "yes", "does not fit": "no"}.get(r.outcome, r.outcome)
        spread = rate_range(r) if r.outcome != "predicted" else predicted_range(r)
        found = to_loss.get((r.gpus, r.per_device_batch, r.outcome == "predicted"))
        loss = found.time_ratio if found else None
        lines.append(
            f"{r.gpus:>4} {r.per_device_batch:>5} {_f(r.samples_per_s, '.1f'):>7} {spread:>11} "
            f"{_f(r.speedup, '.2f', 'x'):>6} "
            f"{_f(r.efficiency and 100 * r.efficiency, '.0f', '%'):>4} {memory:>9} "
            f"{_f(r.data_share and 100 * r.data_share, '.0f', '%'):>5} {_f(loss, '.2f', 'x'):>6}  "
            f"{fits}" + (f" ({r.detail})" if r.detail and r.outcome not in ("measured", "predicted") else "")
        )
    measured = [r for r in result.rows if r.window]
    notes = []
    if measured:
        first = measured[0]
        median = (
            f", the median of {first.sub_windows} windows of consecutive log lines (spread: the slowest-fastest)"
            if first.sub_windows > 1
            else ""
        )
        notes.append(f"samples/s: the trainer's own, {first.window}{median}; memory: {first.memory_source}")
    notes += models_text(result)
    notes += [f"skipped: {s}" for s in result.skipped]
    lines += [part for note in notes for part in textwrap.wrap(note, 80, subsequent_indent="  ")]
    lines.append("")
    lines += [part for line in result.verdict for part in textwrap.wrap(line, 80)]
    return "\n".join(lines)


def predicted_range(row: ProbeRow) -> str:
    """A predicted row's range: the model's fits through the slowest and fastest windows, widened by its residual (a
    residual of 100% or more leaves it no upper end: "≥ low")."""
    if row.rate_low is None:
        return "-"
    if row.rate_high is None:
        return f"≥{row.rate_low:{'.1f' if row.rate_low < 100 else '.0f'}}"
    spec = ".1f" if row.rate_high < 100 else ".0f"
    return f"{row.rate_low:{spec}}-{row.rate_high:{spec}}"


def models_text(result: ProbeResult) -> list[str]:
    """The notes under the table: B_noise per configuration and the probe's, the throughput model, t-loss."""
    notes = []
    said = [
        f"{r.gpus}x{r.per_device_batch} {r.noise.text().removeprefix('B_noise ~ ')}"
        for r in result.rows
        if r.noise is not None
    ]
    unmeasured = list(dict.fromkeys(r.noise_detail for r in result.rows if r.noise is None and r.noise_detail))
    if said or unmeasured:
        notes.append(
            "B_noise (gradient noise scale, McCandlish's B_simple, in samples) per configuration: "
            + "; ".join(said or ["none measured"])
            + "".join(f"; not measured where {why}" for why in unmeasured)
        )
    if result.noise is not None:
        notes.append(
            f"{result.noise.text()} from {result.noise.source}: measured over the probe's first steps, it grows as "
            "the loss falls; the theory is for plain SGD, and batches drawn from the same episodes are not "
            "independent, so it is a guide to where a bigger batch stops paying, not a law"
        )
    if result.memory is not None:
        notes.append(result.memory.line())
    if result.throughput is not None:
        notes.append(
            f"throughput model: {result.throughput.line()}; predicted rows are the model's, their spread its fits "
            "through the slowest and fastest windows"
        )
    if result.time_to_loss:
        notes.append(
            "t-loss: time to the same loss against the fastest one-"
            + ("GPU" if result.device == "cuda" else "process")
            + " configuration, steps from S = S_min (1 + B_noise / B) at global batch B, times the step time"
        )
    return notes


def steps_text(result: ProbeResult) -> str:
    """How long each configuration runs, as it is: a cap, and the steady rate that ends a run before it."""
    whole = " (all of the job's)" if result.job_steps is not None and result.steps >= result.job_steps else ""
    if result.steps_asked:
        return f"{result.steps} steps per configuration{whole}, each run to its end (--steps)"
    return (
        f"up to {result.steps} steps per configuration{whole}, each stopped once its rate is steady "
        f"({ENOUGH_LINES} log lines over {ENOUGH_S:.0f} s after the warm-up)"
    )


def _f(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"
