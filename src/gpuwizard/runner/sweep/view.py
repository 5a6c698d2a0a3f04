"""A sweep as `sweep status` and the Sweep screen show it: one row per run (as its own folder says), the sweep's ETA,
the best run and how sure that is, each combination's label."""

from __future__ import annotations

import heapq
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict

from gpuwizard.core.kinds import SweepState
from gpuwizard.runner.control.follow import clock
from gpuwizard.runs.records import RecordError, Status
from gpuwizard.runs.rundir import RunDir
from gpuwizard.runs.sweeps import ACTIVE as ACTIVE

if TYPE_CHECKING:
    from gpuwizard.analysis.compare.runs import RunFacts
    from gpuwizard.runs.sweeps import Sweep, SweepRun

PENDING: Final = "pending"
"""A row's state where the run was submitted and SLURM has not started it (an array's task waiting for nodes): it
holds no slot, and the sweep's ETA counts it with the queue. A view's word only: sweep.json never holds it."""
RowState = SweepState | Literal["pending"]
METRIC_NAMES = {
    "final_loss": "final loss (smoothed)",
    "loss_at_equal_samples": "smoothed loss at equal samples",
    "duration_s": "time",
}
"""The sweep's metrics as the best run's line names them: both losses are of the smoothed curve (compare's), not the
last logged loss the table's loss column shows."""
SEED = "trainer_options.seed"
TRAINED = {"optim.lr": "lr", "optim.steps": "steps"}
"""Swept fields the plan may resolve to another value (the scaling rule's lr on more processes), by the plan.json key
that holds the value the run trained with."""


def values_label(values: dict[str, Any], trained: dict[str, Any] | None = None) -> str:
    """lr=0.0001, seed=1: each field by its last part; `trained`, the values a run trained with where they are not the
    preset's: lr=0.0002 (preset 0.0001)."""
    trained = trained or {}
    return ", ".join(
        f"{k.rsplit('.', 1)[-1]}={trained[k]:g} (preset {v})" if k in trained else f"{k.rsplit('.', 1)[-1]}={v}"
        for k, v in values.items()
    )


def trained_values(run_path: str | None, values: dict[str, Any]) -> dict[str, Any]:
    """The swept values the run trained with otherwise than its preset says (plan.json: the lr the scaling rule
    doubled on 2 processes), by field; none where its folder holds no plan."""
    wanted = [field for field in values if field in TRAINED and isinstance(values[field], int | float)]
    if run_path is None or not wanted:
        return {}
    try:
        plan = RunDir(Path(run_path)).plan()
    except (RecordError, OSError):
        return {}
    found = {field: getattr(plan, TRAINED[field]) for field in wanted}
    return {k: v for k, v in found.items() if v is not None and not math.isclose(v, values[k], rel_tol=1e-9)}


def run_label(run: SweepRun, seed: bool = True) -> str:
    """#3 lr=0.0002 (preset 0.0001), seed=1: a run by its number in the sweep and the values it trained with."""
    values = {k: v for k, v in run.values.items() if seed or k != SEED}
    return f"#{run.index + 1} {values_label(values, trained_values(run.run_path, values))}"


def marked_label(row: SweepRow) -> str:
    """lr=0.0002*, seed=1: a row's values as trained, a star on each the plan changed (trained_note says from what),
    for a table that has 80 columns."""
    return ", ".join(
        f"{k.rsplit('.', 1)[-1]}={row['trained'][k]:g}*" if k in row["trained"] else f"{k.rsplit('.', 1)[-1]}={v}"
        for k, v in row["values"].items()
    )


def trained_note(rows: list[SweepRow]) -> str:
    """Under a table of marked labels: the preset's values the plan changed (the scaling rule's lr), by run."""
    changed = [
        f"#{r['index'] + 1} " + ", ".join(f"{k.rsplit('.', 1)[-1]}={r['values'][k]}" for k in r["trained"])
        for r in rows
        if r["trained"]
    ]
    if not changed:
        return ""
    return "* as trained, where the plan changed the sweep's value (its scaling rule), which was: " + "; ".join(changed)


class SweepRow(TypedDict):
    """One run of a sweep as shown (and as `sweep status --json` prints it)."""

    index: int
    values: dict[str, Any]
    """As the sweep set them in its preset."""
    trained: dict[str, Any]
    """Those the run trained with otherwise (trained_values)."""
    device: str
    state: RowState
    run_id: str | None
    step: int | None
    total: int | None
    loss: float | None
    elapsed_s: float | None
    eta_s: float | None
    resumed_from: str | None
    error: str | None
    unreadable: str | None
    """Why its run folder cannot be read."""


def looked(sweep: Sweep) -> list[SweepRow]:
    """One look at a sweep: each started run's state as its folder says now (set on `sweep`, which is not written)
    and one row per run, each run's status.json read once."""
    from gpuwizard.runner.sweep.scheduler import refresh

    return run_rows(sweep, refresh(sweep))


def run_rows(sweep: Sweep, read: dict[int, Status | RecordError]) -> list[SweepRow]:
    """One row per run: its values, device, state, step of its total, loss, elapsed time and ETA (or why its run
    folder cannot be read); `read`: the statuses this look read already, by run index."""
    rows = []
    for run in sweep.runs:
        where = "cpu" if run.device == "cpu" else ("GPU " + ",".join(map(str, run.devices)) if run.devices else "-")
        row: SweepRow = {
            "index": run.index,
            "values": run.values,
            "trained": {},
            "device": "slurm" if sweep.slurm else where,
            "state": run.state,
            "run_id": run.run_id,
            "step": None,
            "total": None,
            "loss": None,
            "elapsed_s": None,
            "eta_s": None,
            "resumed_from": run.resume_from,
            "error": run.error,
            "unreadable": None,
        }
        rows.append(row)
        if run.run_path is None:
            continue
        folder = RunDir(Path(run.run_path))
        status = read.get(run.index)
        if status is None:
            try:
                status = folder.status()
            except RecordError as exc:
                status = exc
        if isinstance(status, RecordError):
            row["unreadable"] = f"its run folder {run.run_path} cannot be read: {status}"
            continue
        row["trained"] = trained_values(run.run_path, run.values)
        progress = folder.progress()
        if run.state in ACTIVE and status.waiting_at_slurm and (progress is None or progress.step is None):
            row["state"] = PENDING
        row["total"] = (progress.total if progress else None) or status.steps
        row["elapsed_s"] = status.elapsed_s()
        if progress is not None:
            row["step"], row["loss"] = progress.step, progress.loss
            row["eta_s"] = None if status.final else progress.eta_s
    return rows


def sweep_eta(rows: list[SweepRow], slots: int) -> tuple[float, float, int] | None:
    """Seconds until every run has ended, (soonest, latest, runs it is judged from): the queued runs (and those SLURM
    holds pending) take the slots as the running ones free them, each as long as the shortest and as the longest run
    seen so far (finished ones, and running ones by their own ETA). None where nothing has run far enough to say."""
    active = [r for r in rows if r["state"] in ACTIVE]
    queued = sum(r["state"] in (SweepState.QUEUED, PENDING) for r in rows)
    if not active and not queued:
        return 0.0, 0.0, 0
    lengths = [r["elapsed_s"] for r in rows if r["state"] == SweepState.FINISHED and r["elapsed_s"]]
    lengths += [r["elapsed_s"] + r["eta_s"] for r in active if r["eta_s"] is not None and r["elapsed_s"] is not None]
    if not lengths or max(slots, len(active)) == 0:
        return None
    ends = []
    for length in (min(lengths), max(lengths)):
        free = [r["eta_s"] if r["eta_s"] is not None else max(0.0, length - (r["elapsed_s"] or 0.0)) for r in active]
        free += [0.0] * max(0, slots - len(free))  # a slot a run ended in, which the scheduler is filling
        heapq.heapify(free)
        for _ in range(queued):
            heapq.heappush(free, heapq.heappop(free) + length)
        ends.append(max(free))
    return ends[0], ends[1], len(lengths)


def eta_text(eta: tuple[float, float, int] | None, slots: int) -> str:
    if eta is None:
        return "sweep ETA unknown (no run has gone far enough to judge)"
    soon, late, judged = eta
    if late == 0:
        return ""
    span = clock(soon) if late - soon < max(5.0, 0.05 * late) else f"{clock(soon)}-{clock(late)}"
    pace = f"{judged} runs' pace" if judged > 1 else "1 run's pace, so rough"
    return f"sweep ETA {span} ({pace}, {slots} at a time)"


def best_text(sweep: Sweep, best: RunFacts, facts: list[RunFacts]) -> str:
    """The best run by the sweep's metric, and how sure that is: its gap to the best run of another setting against
    the seed-to-seed spread of each (one seed each: the spread is not measured). Each setting is named by the values
    it trained with."""
    metric = sweep.metric
    by_id = {r.run_id: r for r in sweep.runs if r.run_id}
    groups: dict[str, list[float]] = {}
    names: dict[str, str] = {}
    for f in facts:
        value, run = getattr(f, metric), by_id.get(f.run_id)
        if value is not None and run is not None:
            setting = values_label({k: v for k, v in run.values.items() if k != SEED})
            groups.setdefault(setting, []).append(value)
            names.setdefault(setting, run_label(run, seed=False).split(" ", 1)[-1])
    run, value = by_id.get(best.run_id), getattr(best, metric)
    if run is None:  # sweep.json names its runs otherwise than their folders do: it was changed by hand
        name = METRIC_NAMES.get(metric, metric)
        return f"best by {name}: run {best.run_id}: {value:.4g} (sweep.json does not list it)"
    head = f"best by {METRIC_NAMES.get(metric, metric)}: {run_label(run)}: {value:.4g}"
    mine = values_label({k: v for k, v in run.values.items() if k != SEED})
    others = {k: v for k, v in groups.items() if k != mine}
    seeds = groups.get(mine, [value])
    if not others:
        return f"{head} · the runs differ only in their seed ({min(seeds):.4g}-{max(seeds):.4g}): that is noise"
    setting, values = min(others.items(), key=lambda item: min(item[1]))
    gap = (min(values) - value) / abs(value) if value else 0.0
    against = f"{head} · next setting {names[setting]}: {min(values):.4g} ({gap:+.0%})"
    if len(seeds) < 2 and len(values) < 2:
        return (
            f"{against} · how sure is unknown: one seed each, so run-to-run noise is unmeasured "
            "(`--seeds 2` measures it)"
        )
    mine_span, next_span = f"{min(seeds):.4g}-{max(seeds):.4g}", f"{min(values):.4g}-{max(values):.4g}"
    if max(seeds) < min(values):
        return f"{against} · sure: each of its seeds ({mine_span}) beats each of that one's ({next_span})"
    return f"{against} · not sure: the seeds of the two overlap ({mine_span} against {next_span})"


def resume_text(sweep_id: str, again: list[SweepRun]) -> str:
    """What `sweep resume` did, in one sentence."""
    if not again:
        return f"sweep {sweep_id}: every run has finished; nothing to resume"
    continued = sum(1 for r in again if r.resume_from)
    return f"sweep {sweep_id}: {len(again)} runs queued again ({continued} continue from their checkpoints)"


def stop_text(sweep_id: str, left: list[int]) -> str:
    """What `sweep stop` did, in one sentence."""
    if left:
        return f"sweep {sweep_id} stopped, but processes {left} are still there"
    return f"sweep {sweep_id} stopped; nothing of it is left"
