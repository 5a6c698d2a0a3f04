"""A SLURM sweep's runs as job arrays. The runs of one shape (the #SBATCH lines of their scripts but name and output,
and the secrets sbatch exports to them) go as one `sbatch --array=0-(N-1)`, submitted held; each run is then started
as any run is (its checks, run folder and supervisor), joining its task (ARRAY_TASK) instead of submitting, and the
array is released. `<sweep>/arrays/<array job id>/<task>` links each task to its run's folder: the array's script
runs that run's own batch script, and its output goes into that folder's log.txt."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuwizard.core.secrets import split_secrets
from gpuwizard.core.yamlio import atomic_write
from gpuwizard.runner.host import slurm
from gpuwizard.runs.records import RecordError
from gpuwizard.runs.rundir import RunDir
from gpuwizard.runs.sweeps import ENDED, SlurmArray, Sweep, SweepRun

if TYPE_CHECKING:  # planning and staging are imported where a run is started: `sweep status` needs neither
    from gpuwizard.model.preset import Preset
    from gpuwizard.runner.launch.prepare import PreparedRun

ARRAYS = "arrays"
ARRAY_SCRIPT = "array.sbatch"

Shape = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]


@dataclass
class Staged:
    """A queued run of the sweep, planned and checked (its trainer check included), before it reaches SLURM."""

    run: SweepRun
    prepared: PreparedRun
    note: str | None = None
    """What the start changed (a resumed run that left no checkpoint starts afresh)."""


def own_job_reason(preset: Preset) -> str | None:
    """Why a run cannot be a task of an array (it then goes as a job of its own), or None."""
    if any(arg == "--array" or arg.startswith("--array=") for arg in preset.slurm.sbatch_args):
        return "a SLURM job of its own: its preset's slurm.sbatch_args give --array, and an array task cannot be one"
    return None


def shape_of(prepared: PreparedRun) -> Shape:
    """What the tasks of one array share: their #SBATCH lines (name and output aside) and the secrets sbatch exports
    to every task (kept in memory only)."""
    from gpuwizard.planning.plan import build_command

    secret = split_secrets(build_command(prepared.ctx).env)[1]
    return slurm.shape(prepared.ctx), tuple(sorted(secret.items()))


def grouped(staged: list[Staged]) -> tuple[list[list[Staged]], list[Staged]]:
    """The arrays to submit (one per shape, runs in the sweep's order) and the runs that go as jobs of their own."""
    arrays: dict[Shape, list[Staged]] = {}
    alone = []
    for one in staged:
        if own_job_reason(one.prepared.preset):
            alone.append(one)
        else:
            arrays.setdefault(shape_of(one.prepared), []).append(one)
    return list(arrays.values()), alone


def submit_array(folder: Path, group: list[Staged]) -> str:
    """sbatch one held array for the group's runs (task T runs the T-th); returns its job id, or a UserError with
    sbatch's own message. Its folder (arrays/<job id>/) is made before anything can release it."""
    from gpuwizard.runner.launch.staging import SBATCH_SCRIPT

    first = group[0].prepared
    lines, secret = shape_of(first)
    arrays = folder / ARRAYS
    arrays.mkdir(exist_ok=True)
    script = arrays / f".submitting-{secrets.token_hex(4)}.sbatch"
    atomic_write(script, slurm.array_script(first.preset.name, lines, arrays.resolve(), SBATCH_SCRIPT))
    job_id, message = slurm.submit(str(script), dict(secret), ("--hold", f"--array=0-{len(group) - 1}"))
    if job_id is None:
        script.unlink(missing_ok=True)
        raise slurm.refused(message, "the sweep's job array", "`gpuwizard sweep resume`")
    (arrays / job_id).mkdir()
    os.replace(script, arrays / job_id / ARRAY_SCRIPT)
    return job_id


def joining(folder: Path, job_id: str, task: int) -> Callable[[RunDir, dict[str, str]], None]:
    """start_run's `submit` for a run that is task `task` of array `job_id`: its task is linked to its run folder and
    its status names the task (ARRAY_TASK), which its supervisor follows and `gpuwizard stop` cancels alone."""

    def join(run: RunDir, secret: dict[str, str]) -> None:
        (folder / ARRAYS / job_id / str(task)).symlink_to(run.path.resolve())
        run.update_status(slurm_job_id=f"{job_id}_{task}", slurm_state="PENDING")

    return join


def joined(run: SweepRun, task: str) -> bool:
    """The run's own folder says it follows this task (its start got that far)."""
    if run.run_path is None:
        return False
    try:
        return RunDir(Path(run.run_path)).status().slurm_job_id == task
    except (RecordError, OSError):
        return False


def adopt_unrecorded_arrays(folder: Path, sweep: Sweep) -> list[str]:
    """Arrays submitted for the sweep that its record never got (a scheduler killed right after sbatch answered): no
    run joined them, so they are recorded held, with no runs, for the caller to cancel. Returns their ids."""
    known = {a.job_id for a in sweep.arrays}
    try:
        found = sorted(p.name for p in (folder / ARRAYS).iterdir() if p.is_dir() and p.name not in known)
    except OSError:
        found = []
    sweep.arrays += [SlurmArray(job_id=job_id, runs=[]) for job_id in found]
    return found


def release_held(folder: Path, sweep: Sweep) -> None:
    """Arrays a killed scheduler left held: the tasks no run joined are cancelled (an array it never recorded whole),
    the rest may start."""
    lost = adopt_unrecorded_arrays(folder, sweep)
    held = [a for a in sweep.arrays if a.held and a.job_id not in lost]
    for array in held:
        tasks = [f"{array.job_id}_{t}" for t in range(len(array.runs))]
        lost += [task for task, index in zip(tasks, array.runs, strict=True) if not joined(sweep.runs[index], task)]
    if lost:
        slurm.cancel(*lost)
    for array in held:
        slurm.release(array.job_id)
    for array in sweep.arrays:
        array.held = False


def cancel_arrays(folder: Path, sweep: Sweep) -> None:
    """One scancel of every array of the sweep still held (or never recorded) or with a run in it not ended."""
    adopt_unrecorded_arrays(folder, sweep)
    live = [
        a.job_id
        for a in sweep.arrays
        if a.held or any(sweep.runs[i].array == a.job_id and sweep.runs[i].state not in ENDED for i in a.runs)
    ]
    if live:
        slurm.cancel(*live)
    for array in sweep.arrays:
        array.held = False
