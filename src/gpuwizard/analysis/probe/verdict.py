"""A probe in words: the table (80 columns), the models under it, and the verdict: the decision's one paragraph
(analysis/probe/decision.py) first, then the evidence it rests on, in figures."""

from __future__ import annotations

import textwrap

from gpuwizard.analysis.probe.answer import Compared
from gpuwizard.analysis.probe.decision import INITIAL_STAGE, decide, windows
from gpuwizard.analysis.probe.results import (
    ENOUGH_LINES,
    ENOUGH_S,
    INPUT_BOUND_SHARE,
    ProbeResult,
    ProbeRow,
    probe_noise,
)
from gpuwizard.analysis.probe.throughput_model import Point, fit, host_comm
from gpuwizard.analysis.probe.time_to_loss import Config, LossTime, best_per_count, sentence, table
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


def verdict(result: ProbeResult) -> list[str]:
    """The decision's paragraph first (what to use, how sure, why), then the evidence, which states figures and no
    judgement of its own: the paired throughput of each compared count, what was left out, input and memory."""
    rows, device = result.rows, result.device
    decision = result.decision
    if decision is None:
        if rows and all(r.outcome == "does not fit" for r in rows if r.outcome != "skipped"):
            smallest = min(r.per_device_batch for r in rows)
            return [
                f"One device cannot hold {result.policy} at any batch tried (down to {smallest} per device): more "
                "GPUs with sharding (strategy: fsdp) is the reason to scale here."
            ]
        return ["No configuration was measured, so there is nothing to recommend."]
    lines = [decision.paragraph]
    unit = "GPU" if device == "cuda" else "process"
    base_rate = (
        next(
            (
                r.samples_per_s
                for r in rows
                if r.gpus == decision.compared[0].base_gpus and r.per_device_batch == decision.compared[0].base_batch
            ),
            None,
        )
        if decision.compared
        else None
    )
    base_h = result.full_run_samples / base_rate / 3600 if result.full_run_samples and base_rate else None
    for c in decision.compared:
        speedup = c.samples_efficiency * c.gpus / c.base_gpus
        batches = "on both" if c.batch == c.base_batch else f"against {c.base_batch} on {c.base_gpus}"
        ratios = ", ".join(f"{r:.2f}x" for r in c.ratios)
        head = (
            f"{device_word(device, c.gpus)}: {speedup:.2f}x the samples/s of {c.base_gpus} ({c.samples_efficiency:.0%} "
            f"per {unit}{over_100(c, unit)}, batch {c.batch} per device {batches})"
            + (f", the median of {c.pairs} adjacent pairs ({ratios})" if c.pairs > 1 else "")
        )
        if base_h is not None and speedup > 0:
            hours = base_h / speedup
            head += (
                f"; at that rate the full run ({result.full_run_samples:,} samples) takes {span(base_h)} on "
                f"{device_word(device, c.base_gpus)} and {span(hours)} on {c.gpus}, "
                f"{device_time(hours * c.gpus, base_h * c.base_gpus, unit)}"
            )
        head += background_text(result, c)
        lines.append(head + ".")
    base = next((r for r in rows if r.fits), None)
    if base is not None and base.data_share is not None and base.data_share >= INPUT_BOUND_SHARE:
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
    return lines


def over_100(c: Compared, unit: str) -> str:
    """The caveat a per-process rate above 100% takes: at the same batch per device no added process gives it (the
    load changed); at a larger batch per device, that batch is part of it."""
    if c.samples_efficiency <= 1:
        return ""
    if c.batch > c.base_batch:
        return f", above 100%: part of it is the larger batch per device, not the added {unit}"
    return f", above 100%, which no added {unit} gives: the load changed between the windows"


def background_text(result: ProbeResult, c: Compared) -> str:
    """The background the compared windows were taken under, and the pairs left out because it moved."""
    keys = ((c.base_gpus, c.base_batch), (c.gpus, c.batch))
    seen = [w.background for key in keys for w in windows(result, *key) if w.background is not None]
    waiting = [w.waiting for key in keys for w in windows(result, *key) if w.waiting is not None]
    said = f"; {min(seen):.1f}-{max(seen):.1f} cores busy outside the probe over these windows" if seen else ""
    said += f", {min(waiting):.1f}-{max(waiting):.1f} threads outside it ready to run" if waiting else ""
    if c.dropped:
        said += f"; left out: {len(c.dropped)} pair(s) whose background differed ({'; '.join(c.dropped)})"
    return said


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
    runs = [*result.rows, *result.repeats]
    result.noise, result.noise_detail = probe_noise(runs, lambda n: device_word(result.device, n))
    measured = timed_rows(result)
    points = [Point(r.gpus, r.per_device_batch, *step_times(r, result.grad_accum)) for r in measured]
    result.throughput = fit(points, host_comm(result.device, result.hardware, result.policy))
    result.predicted = predictions(result, measured)
    result.time_to_loss, result.goodput = loss_verdict(result, measured)
    if result.noise is not None and result.from_run is None:
        result.noise_stage = f"{INITIAL_STAGE}, the first steps of the probe's runs, {result.noise.steps} in all"
    result.decision = decide(result)


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
        return [], f"Time to the same loss: not known: {disagree_or_unmeasured(result)}."
    configs = []
    for row in [*(r for r in measured if r.fits), *result.predicted]:
        step, shortest, longest = step_times(row, result.grad_accum)
        samples = row.gpus * row.per_device_batch * result.grad_accum
        configs.append(
            Config(row.gpus, row.per_device_batch, samples, step, shortest, longest, row.outcome == "predicted")
        )
    rows = table(configs, noise.b_simple, noise.low, noise.high)
    unit = "GPU" if result.device == "cuda" else "process"
    best = list(best_per_count(rows).values())
    lr = lr_assumed(result, best[0].global_batch, best[1].global_batch) if len(best) > 1 else ("", "")
    said = sentence(rows, f"{noise.text()}, {noise.source}", unit, result.job_steps, lr[0])
    return rows, f"{said} {lr[1]}".strip()


def disagree_or_unmeasured(result: ProbeResult) -> str:
    """Why the probe has no B_noise: its runs' figures disagree (said whole), or none measured one (and why not)."""
    if any(r.noise is not None for r in [*result.rows, *result.repeats]):
        return result.noise_detail
    return f"B_noise was not measured ({result.noise_detail})"


def lr_assumed(result: ProbeResult, base_batch: int, batch: int) -> tuple[str, str]:
    """(the lr the step ratio assumes at the bigger global batch, for the advice; the sentence that says it and what
    the probe ran at instead): S = S_min (1 + B_noise / B) holds for each batch at its own best lr."""
    lr, scaled = result.lr, result.scaled_lr.get(str(batch))
    if lr is None:
        return "", ""
    if scaled is None or result.scaling_rule == "none":
        return "", (
            f"The step ratio assumes each batch at its own best lr; the scaling rule is {result.scaling_rule or 'none'}"
            ", "
            f"so a run at global batch {batch} keeps lr {lr:.3g}, where it may buy fewer steps than predicted."
        )
    return f" at lr {scaled:.3g}", (
        f"The step ratio assumes each batch at its own best lr, here the scaling rule's ({result.scaling_rule}): "
        f"{scaled:.3g} at global batch {batch}, {result.scaled_lr.get(str(base_batch), lr):.3g} at {base_batch}; "
        f"the probe ran every configuration at {'the checkpoint' if result.from_run else 'the preset'}'s lr "
        f"{lr:.3g}, so it measured samples/s and B_noise there and did not measure the steps at {scaled:.3g}."
    )


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


def recommendation_line(result: ProbeResult) -> str:
    """One line for the wizard's Scaling step: the decision's configuration and how sure it is, in its words."""
    decision = result.decision
    if decision is None:
        return "probe: " + (result.verdict[0] if result.verdict else "nothing measured")
    return (
        f"probe recommends {device_word(result.device, decision.gpus)} at batch {decision.batch} "
        f"({decision.samples_per_s:.0f} samples/s, judged in {decision.basis}); {decision.confidence}"
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
    """The notes under the table: an efficiency above 100%, B_noise per configuration and the probe's, the
    throughput model, t-loss."""
    over = [f"{r.gpus}x{r.per_device_batch}" for r in result.rows if r.efficiency and r.efficiency > 1]
    unit = "GPU" if result.device == "cuda" else "process"
    notes = []
    if over:
        notes.append(
            f"eff above 100% ({', '.join(over)}): no added {unit} gives that at the same batch per device, so the "
            "machine's load changed between those runs; the answer above rests on adjacent windows, not this column"
        )
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
            f"{result.noise.text()} from {result.noise.source}: measured over "
            + (f"the steps after {result.noise_stage}" if result.from_run else "the probe's first steps")
            + ", it grows as the loss falls; the theory is for plain SGD, and batches drawn from the same episodes are "
            "not independent, so it is a guide to where a bigger batch stops paying, not a law"
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
    if result.from_run:
        whole = f" from step {result.start_step:,} of run {result.from_run}"
    if result.steps_asked:
        return f"{result.steps} steps per configuration{whole}, each run to its end (--steps)"
    return (
        f"up to {result.steps} steps per configuration{whole}, each stopped once its rate is steady "
        f"({ENOUGH_LINES} log lines over {ENOUGH_S:.0f} s after the warm-up)"
    )


def _f(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"
