"""A sweep from the command line's side: its grid checked and planned run by run before anything starts, its folder
written, its scheduler detached; stopping it whole, resuming what did not finish, and its runs compared at the end."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwizard.core.errors import Problem, UserError, problem
from gpuwizard.core.kinds import SweepState
from gpuwizard.model import trust
from gpuwizard.model.sweep import Combination, expand
from gpuwizard.runner.host.procs import Pinned, wait_until
from gpuwizard.runner.sweep.arrays import cancel_arrays
from gpuwizard.runner.sweep.scheduler import adopt_unrecorded, refresh, scheduler_alive, spawn_scheduler
from gpuwizard.runner.sweep.view import run_label
from gpuwizard.runs.rundir import RunDir
from gpuwizard.runs.sweeps import Sweep, SweepRun, changing, new_sweep_id, read_sweep, sweeps_dir, write_sweep

if TYPE_CHECKING:
    from gpuwizard.analysis.compare.runs import Comparison, RunFacts
    from gpuwizard.model.preset import Preset

RUN_STOP_S = 60.0
"""How long one run's supervisor may take to end it before its processes are ended from here."""
SCHEDULER_STOP_S = 60.0
"""How long a stopped scheduler may take to finish the start under way (a trainer check, a supervisor) before
SIGKILL."""


def placement_problems(preset: Preset) -> list[Problem]:
    """What a sweep cannot place: a run over several machines without SLURM to find them."""
    if preset.hardware.nodes > 1 and preset.launch.scheduler != "slurm":
        return [
            problem(
                "hardware.nodes",
                "a sweep places each run on this machine's devices, and this run needs several machines",
                "sweep a one-node copy of the preset, or submit the runs to SLURM (launch.scheduler: slurm)",
                value=preset.hardware.nodes,
            )
        ]
    return []


def planned(combos: list[Combination]) -> list[tuple[Combination, str, int]]:
    """Each run planned here (device and processes); every plan error of every run refused in one go, each once."""
    from gpuwizard.gpus.inventory import read_inventory
    from gpuwizard.planning.machine import machine_problems
    from gpuwizard.planning.plan import plan_here

    inventory = read_inventory()
    out: list[tuple[Combination, str, int]] = []
    errors: dict[str, Problem] = {}
    for combo in combos:
        plan, _ = plan_here(combo.preset, inventory)
        for p in list(plan.errors) + machine_problems(combo.preset, plan, inventory):
            errors.setdefault(p.paragraph(), p)
        out.append((combo, plan.device, plan.world_size))
    if errors:
        raise UserError(list(errors.values()), combos[0].preset.name)
    return out


def create_sweep(
    base: Preset, source: str, grid: dict[str, list[Any]], seeds: int | None, metric: str, workdir: str
) -> Sweep:
    """Check, plan and record every run, then start the scheduler; UserError before anything starts."""
    from gpuwizard.model.preset import with_field
    from gpuwizard.planning.plan import fixed_output

    if found := placement_problems(base):
        raise UserError(found, base.name)
    combos = expand(base, grid, seeds)
    if fixed_output(base) and "output_dir" not in grid and len(combos) > 1:
        raise UserError(
            problem(
                "output_dir",
                "every run of the sweep would write its checkpoints to this one folder",
                "set output_dir: null in the preset (each run then writes a folder of its own)",
                value=base.output_dir,
            ),
            base.name,
        )
    if not trust.is_trusted(base):  # the callers ask first; a sweep never trusts anything the user did not
        raise UserError(trust.untrusted_problem(base, source, "sweep"), base.name)
    runs = planned(combos)
    trust.remember_launched(base)  # the scheduler, another process, reads each run back from the sweep folder; expand
    # refused any run whose code differs from this preset's, so this is the code the user trusted, and nothing more
    sweep_id = new_sweep_id(base.name)
    folder = sweeps_dir() / sweep_id
    folder.mkdir(parents=True)  # outside the try: a folder that already exists is never another's to remove
    try:
        (folder / "runs").mkdir()
        records = []
        for index, (combo, device, processes) in enumerate(runs):
            linked = with_field(
                combo.preset, "description", f"sweep {sweep_id} run {index + 1}/{len(runs)}: {combo.label()}"
            )
            name = f"runs/{index:03d}.yaml"
            (folder / name).write_text(linked.to_yaml())
            records.append(
                SweepRun(
                    index=index,
                    values=combo.values,
                    preset_file=name,
                    processes=processes,
                    device="cpu" if device == "cpu" else "cuda",
                )
            )
        sweep = Sweep(
            sweep_id=sweep_id,
            preset=base.name,
            source=source,
            created=time.time(),
            grid=grid,
            seeds=seeds,
            metric=metric,
            workdir=workdir,
            runs=records,
            slurm=base.launch.scheduler == "slurm",
        )
        write_sweep(folder, sweep)
    except OSError:  # a full disk: no half-made sweep folder for `sweep status` to list
        shutil.rmtree(folder, ignore_errors=True)
        raise
    spawn_scheduler(folder, workdir)
    return read_sweep(folder)


def stop_scheduler(folder: Path) -> None:
    """The sweep marked stopped and its scheduler ended (SIGTERM, then SIGKILL), so it starts nothing more."""
    with changing(folder) as sweep:
        sweep.stopped = True
        ref = sweep.scheduler
    pin = Pinned.open(ref.pid, ref.start_ticks) if ref is not None and ref.alive() else None
    if pin is None:
        return
    try:
        pin.signal(signal.SIGTERM)
        if not wait_until(lambda: not pin.alive(), SCHEDULER_STOP_S):
            pin.signal(signal.SIGKILL)
            wait_until(lambda: not pin.alive(), SCHEDULER_STOP_S)
    finally:
        pin.close()


def stop_sweep(folder: Path) -> list[str]:
    """Stop the scheduler, then every run it started, with `gpuwizard stop`'s own machinery; the runs that never
    started end as stopped. Returns the ids of the runs to stop."""
    stop_scheduler(folder)
    with changing(folder) as sweep:
        adopt_unrecorded(sweep)
        for run in sweep.runs:
            if run.state in (SweepState.QUEUED, SweepState.STARTING) and run.run_id is None:
                run.state, run.error = SweepState.STOPPED, "the sweep was stopped before it started"
        started = [r.run_id for r in sweep.runs if r.run_id is not None]
    return started


def settle(folder: Path) -> None:
    """Record each run's state as its folder says it (after a stop, with no scheduler left to do it)."""
    with changing(folder) as sweep:
        refresh(sweep)


def resume_sweep(folder: Path) -> list[SweepRun]:
    """Re-queue what did not finish (a started run continues from its checkpoint; on SLURM in a new array) and start
    a scheduler again."""
    with changing(folder) as sweep:
        if scheduler_alive(sweep):
            raise UserError(
                problem(
                    "SWEEP_ID",
                    "its scheduler is still running",
                    f"follow it with `gpuwizard sweep status {sweep.sweep_id}`, or stop it first",
                    value=sweep.sweep_id,
                )
            )
        adopt_unrecorded(sweep)
        refresh(sweep)
        sweep.stopped = False
        again = []
        for run in sweep.runs:
            if run.state in (SweepState.FAILED, SweepState.STOPPED, SweepState.HUNG):
                if run.run_id is not None:
                    run.resume_from = run.run_id
                run.state, run.run_id, run.run_path, run.error, run.devices = SweepState.QUEUED, None, None, None, []
                run.array, run.task, run.own_job = None, None, None
                again.append(run.model_copy())
            elif run.state == SweepState.QUEUED:
                again.append(run.model_copy())
        workdir = sweep.workdir
    if again or not read_sweep(folder).ended:
        spawn_scheduler(folder, workdir)
    return again


def best_preset(folder: Path, name: str) -> Preset:
    """The preset of the sweep's best run under a name of the user's (its own output folder per run, the sweep's
    values in its description); one paragraph while there is no best yet."""
    from gpuwizard.model.preset import saved_as
    from gpuwizard.model.preset_files import load_preset_file

    sweep = read_sweep(folder)
    refresh(sweep)
    compared = sweep_comparison(sweep)
    if compared is None:
        finished = sum(1 for r in sweep.runs if r.state == SweepState.FINISHED)
        why = "it has not ended" if not sweep.ended else f"{finished} of its runs finished; a best needs two"
        raise UserError(
            problem(
                "--save-best",
                f"sweep {sweep.sweep_id} has no best run yet: {why}",
                f"wait for `gpuwizard sweep status {sweep.sweep_id}` to show its comparison"
                if not sweep.ended
                else f"resume it with `gpuwizard sweep resume {sweep.sweep_id}`",
                value=name,
            )
        )
    best = next(r for r in sweep.runs if r.run_id == compared[1].run_id)
    preset = load_preset_file(folder / best.preset_file)
    return saved_as(preset, name, f"best of sweep {sweep.sweep_id} by {sweep.metric}: {run_label(best)}")


def sweep_run_labels(folder: Path) -> dict[str, str]:
    """The runs a sweep started (the ones resumed too), each with its combination: "#3 lr=0.0001, seed=1"."""
    sweep = read_sweep(folder)
    adopt_unrecorded(sweep)
    return {run_id: run_label(r) for r in sweep.runs for run_id in (r.resume_from, r.run_id) if run_id is not None}


def stopped_run(run_id: str) -> list[int]:
    """One run of a stopped sweep ended as `gpuwizard stop` ends it (runner/stopping.stop_run, with the sweep's
    limit). Returns the pids still there."""
    from gpuwizard.runner.control.stopping import stop_run

    stopped = stop_run(run_id, RUN_STOP_S)
    return stopped.survivors if stopped is not None else []


def stop_whole(folder: Path) -> list[int]:
    """The scheduler first (nothing more starts), then on SLURM each array whole (one scancel), then every run it
    started; the sweep then records what its runs' folders say. Returns the pids still there."""
    started = stop_sweep(folder)
    with changing(folder) as sweep:
        cancel_arrays(folder, sweep)
    left = [pid for run_id in started for pid in stopped_run(run_id)]
    settle(folder)
    return left


def save_best(folder: Path, name: str) -> str:
    """The best run's preset saved as the user's (an existing preset of that name is never replaced: a UserError)."""
    from gpuwizard.model.preset_files import save_user_preset

    path = save_user_preset(best_preset(folder, name), overwrite=False)
    return f"saved the best run's preset as {name}: {path} (`gpuwizard run {name}` runs it)"


def sweep_comparison(sweep: Sweep) -> tuple[Comparison, RunFacts] | None:
    """The finished runs side by side (compare: loss at equal samples, final loss, time) and the best by the
    sweep's metric (lowest); None until every run has ended or with fewer than two to compare."""
    from gpuwizard.analysis.compare.runs import CompareError, compare

    if not sweep.ended:
        return None
    runs = [RunDir(Path(r.run_path)) for r in sweep.runs if r.state == SweepState.FINISHED and r.run_path]
    if len(runs) < 2:
        return None
    try:
        result = compare(runs)
    except CompareError:
        return None
    scored = [f for f in result.runs if getattr(f, sweep.metric) is not None]
    if not scored:
        return None
    return result, min(scored, key=lambda f: getattr(f, sweep.metric))
