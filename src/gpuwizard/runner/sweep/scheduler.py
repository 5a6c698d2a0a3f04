"""The sweep's scheduler: a detached process that starts each run of a sweep on free devices (GPUs nobody holds, or
processes within the cores), queues the rest and starts them as devices free; on SLURM it hands the queued runs to the
cluster as job arrays (runner/sweep/arrays.py). Only it starts runs of its sweep; each run lives under its own
supervisor, so killing the scheduler leaves them going and `sweep resume` picks up the rest.

`python -m gpuwizard.runner.sweep.scheduler SWEEP_DIR`
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import FrameType

from gpuwizard.core.codes import RunState
from gpuwizard.core.errors import UserError, problem
from gpuwizard.core.kinds import SweepState
from gpuwizard.gpus.inventory import Inventory, read_inventory
from gpuwizard.runner.host.targets import SWEEP_SCHEDULER
from gpuwizard.runner.sweep.arrays import Staged, grouped, joining, own_job_reason, release_held, submit_array
from gpuwizard.runs.records import ProcessRef, RecordError, Status
from gpuwizard.runs.rundir import RunDir, supervisor_lost
from gpuwizard.runs.sweeps import ACTIVE, SlurmArray, Sweep, SweepRun, changing, read_sweep

POLL_S = 0.5
OTHERS_EVERY_S = 5.0
SLURM_IN_FLIGHT = 32
"""The most runs of one sweep submitted to SLURM at once (as arrays of at most this many tasks): each has a supervisor
on this machine following it."""
FINAL = {
    RunState.FINISHED: SweepState.FINISHED,
    RunState.FAILED: SweepState.FAILED,
    RunState.STOPPED: SweepState.STOPPED,
    RunState.HUNG: SweepState.HUNG,
}
"""A run's final state as the sweep records it."""


def free_gpus(inventory: Inventory, held: set[int]) -> list[int]:
    """The visible GPUs (CUDA indices) no run of the sweep holds and no process uses, in order."""
    return [
        g.cuda_index
        for g in inventory.visible()
        if g.cuda_index is not None and g.cuda_index not in held and not g.processes and g.error is None
    ]


def place(inventory: Inventory, wanted: int, held: set[int]) -> list[int] | None:
    """The GPUs a run that asks for `wanted` of them starts on now, or None: it waits for devices to free."""
    free = free_gpus(inventory, held)
    return free[:wanted] if len(free) >= wanted else None


def cpu_fits(processes: int, used: int, cores: int) -> bool:
    """A CPU run starts while its processes fit in the cores left (one alone always starts: the plan checked it)."""
    return used == 0 or used + processes <= cores


def held_by(sweep: Sweep) -> tuple[int, set[int]]:
    """CPU processes and GPUs the sweep's started runs hold."""
    active = [r for r in sweep.runs if r.state in ACTIVE]
    return sum(r.processes for r in active if r.device == "cpu"), {d for r in active for d in r.devices}


def cpu_processes_elsewhere(sweep: Sweep) -> int:
    """The processes of this machine's other active CPU runs (another sweep's, a run of the user's): the cores are
    shared with them."""
    from gpuwizard.runs.listing import listed_runs

    mine = {r.run_id for r in sweep.runs if r.run_id}
    return sum(
        e.status.world_size
        for e in listed_runs()
        if e.status is not None
        and e.run.run_id not in mine
        and e.status.device == "cpu"
        and e.status.slurm_job_id is None
        and not e.status.final
        and not supervisor_lost(e.status)
    )


def refresh(sweep: Sweep) -> dict[int, Status | RecordError]:
    """Each started run's state from its own folder; what it read of each (by index: its status, or why it cannot
    be read), so a view of the same look reads no run twice."""
    read: dict[int, Status | RecordError] = {}
    for run in sweep.runs:
        if run.state not in ACTIVE or run.run_path is None:
            continue
        try:
            status = RunDir(Path(run.run_path)).status()
        except RecordError as exc:
            read[run.index] = exc
            run.state, run.error = SweepState.FAILED, f"its run folder cannot be read: {exc}"
            continue
        read[run.index] = status
        if status.final:
            run.state = FINAL[status.state]
            run.error = status.error
        elif supervisor_lost(status):
            run.state, run.error = SweepState.FAILED, "its supervisor is gone"
        else:
            run.state = SweepState.RUNNING
    return read


def link_text(sweep_id: str, index: int, count: int) -> str:
    """The start of the description of a sweep's run preset: how its run folder names the sweep it belongs to."""
    return f"sweep {sweep_id} run {index + 1}/{count}:"


def adopt_unrecorded(sweep: Sweep) -> None:
    """A run a killed scheduler was starting: its run folder if the start got that far (found by the link in its
    preset's description), else queued again."""
    from gpuwizard.analysis.compare.runs import run_preset
    from gpuwizard.runs.rundir import list_runs

    waiting = {r.index: r for r in sweep.runs if r.state == SweepState.STARTING and r.run_id is None}
    if not waiting:
        return
    for entry in list_runs(sweep.preset):
        preset = run_preset(entry.run)
        for index, run in list(waiting.items()):
            if preset is not None and preset.description.startswith(link_text(sweep.sweep_id, index, len(sweep.runs))):
                run.state, run.run_id, run.run_path = SweepState.RUNNING, entry.run.run_id, str(entry.run.path)
                del waiting[index]
    for run in waiting.values():
        run.state, run.devices, run.array, run.task = SweepState.QUEUED, [], None, None


def next_start(
    sweep: Sweep, inventory: Inventory | None, cores: int, elsewhere: int = 0
) -> tuple[SweepRun, list[int]] | None:
    """The first queued run that fits on this machine now, and its GPUs; `elsewhere`: CPU processes of other runs on
    this machine."""
    used, held = held_by(sweep)
    used += elsewhere
    for run in sweep.runs:
        if run.state != SweepState.QUEUED:
            continue
        if run.device == "cpu":
            return (run, []) if cpu_fits(run.processes, used, cores) else None
        devices = place(inventory, run.processes, held) if inventory is not None else None
        return (run, devices) if devices is not None else None
    return None


def slurm_batch(sweep: Sweep) -> list[SweepRun]:
    """The queued runs to hand to SLURM now: as many as keep at most SLURM_IN_FLIGHT submitted."""
    submitted = sum(r.state in ACTIVE for r in sweep.runs)
    return [r for r in sweep.runs if r.state == SweepState.QUEUED][: max(0, SLURM_IN_FLIGHT - submitted)]


def staged(folder: Path, run: SweepRun, devices: list[int], inventory: Inventory | None) -> Staged:
    """One run of the sweep planned and checked (its own prepare_run, its trainer check); UserError if refused."""
    from gpuwizard.model.preset import with_field
    from gpuwizard.model.preset_files import load_preset_file
    from gpuwizard.runner.launch.prepare import prepare_run

    preset = load_preset_file(folder / run.preset_file)
    if devices:
        preset = with_field(preset, "hardware.devices", devices)
    try:
        prepared = prepare_run(
            preset, inventory=inventory, resume=run.resume_from is not None, resume_run=run.resume_from
        )
    except UserError as exc:
        if run.resume_from is None or not all(
            p.field == "--resume" and "checkpoint" in p.message for p in exc.problems
        ):
            raise
        note = f"run {run.resume_from} left no checkpoint; started afresh"
        return Staged(run, prepare_run(preset, inventory=inventory), note)
    return Staged(run, prepared)


def why_not(exc: Exception) -> str:
    """A run's failure to start, as the sweep records it (the sweep goes on)."""
    return exc.paragraph() if isinstance(exc, UserError) else f"it could not be started: {type(exc).__name__}: {exc}"


def launched(
    folder: Path, one: Staged, submit: Callable[[RunDir, dict[str, str]], None] | None = None
) -> RunDir | None:
    """Start a staged run (its run folder and supervisor) and record it in the sweep; a failure is that run's."""
    from gpuwizard.runner.launch.start import start_run

    try:
        started = start_run(replace(one.prepared, sweep=folder.name), on_hang="stop", submit=submit)
    except Exception as exc:  # one run's failure to start is that run's, the sweep goes on
        failed(folder, one.run, why_not(exc))
        return None
    with changing(folder) as sweep:
        mine = sweep.runs[one.run.index]
        mine.state, mine.run_id, mine.run_path, mine.error = (
            SweepState.RUNNING,
            started.run_id,
            str(started.path),
            one.note,
        )
    return started


def failed(folder: Path, run: SweepRun, error: str) -> None:
    """The run ends in the sweep's record with why it could not start; the other runs go on."""
    with changing(folder) as sweep:
        sweep.runs[run.index].state, sweep.runs[run.index].error = SweepState.FAILED, error


def start_one(folder: Path, run: SweepRun, devices: list[int], inventory: Inventory | None) -> None:
    """Plan, check and start one run of the sweep on this machine; a refusal fails it alone."""
    try:
        one = staged(folder, run, devices, inventory)
    except Exception as exc:
        failed(folder, run, why_not(exc))
        return
    launched(folder, one)


def start_on_slurm(folder: Path, runs: list[SweepRun], inventory: Inventory | None, stop: Callable[[], bool]) -> None:
    """Check every run of the batch first (each its own trainer check), then submit one held array per shape, start
    each run as its task and release the array; a run an array cannot express goes as a job of its own. A stop
    asked meanwhile submits nothing: the batch goes back to the queue (which `sweep stop` then ends)."""
    ready: list[Staged] = []
    for run in runs:
        if stop():
            break
        try:
            ready.append(staged(folder, run, [], inventory))
        except Exception as exc:
            failed(folder, run, why_not(exc))
    if stop():
        with changing(folder) as sweep:
            for run in runs:
                if sweep.runs[run.index].state == SweepState.STARTING:
                    sweep.runs[run.index].state = SweepState.QUEUED
        return
    arrays, alone = grouped(ready)
    for one in alone:
        with changing(folder) as sweep:
            sweep.runs[one.run.index].own_job = own_job_reason(one.prepared.preset)
        launched(folder, one)
    for group in arrays:
        start_array(folder, group)


def start_array(folder: Path, group: list[Staged]) -> None:
    """One held array for the group, each run started as its task (a task whose run cannot start is cancelled),
    then released."""
    from gpuwizard.runner.host.slurm import cancel, release

    try:
        job_id = submit_array(folder, group)
    except Exception as exc:
        for one in group:
            failed(folder, one.run, why_not(exc))
        return
    with changing(folder) as sweep:
        sweep.arrays.append(SlurmArray(job_id=job_id, runs=[one.run.index for one in group]))
        for task, one in enumerate(group):
            sweep.runs[one.run.index].array, sweep.runs[one.run.index].task = job_id, task
    for task, one in enumerate(group):
        if launched(folder, one, joining(folder, job_id, task)) is None:
            cancel(f"{job_id}_{task}")  # held: it never runs
    release(job_id)
    with changing(folder) as sweep:
        next(a for a in sweep.arrays if a.job_id == job_id).held = False


class Scheduler:
    """The loop: look at the runs, start what fits, until every run has ended or the sweep is stopped."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.stopping = False
        self.others: tuple[float, int] = (0.0, 0)
        """When the other runs' CPU processes were last counted, and how many."""

    def elsewhere(self, sweep: Sweep) -> int:
        """cpu_processes_elsewhere, counted at most every OTHERS_EVERY_S (it lists the run folders)."""
        now = time.monotonic()
        if now - self.others[0] >= OTHERS_EVERY_S:
            self.others = (now, cpu_processes_elsewhere(sweep))
        return self.others[1]

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True  # a start under way completes and is recorded; nothing more starts

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        cores = len(os.sched_getaffinity(0))  # the cores it (and the runs it starts) may use
        with changing(self.folder) as sweep:
            sweep.scheduler = ProcessRef.of(os.getpid())
            adopt_unrecorded(sweep)  # a scheduler before it was killed while starting one
            release_held(self.folder, sweep)  # ... or while staging an array's runs
        while not self.stopping:
            devices: list[int] = []
            with changing(self.folder) as sweep:
                refresh(sweep)
                if sweep.stopped or sweep.ended:
                    break
                gpus_wanted = any(r.state == SweepState.QUEUED and r.device == "cuda" for r in sweep.runs)
                inventory = read_inventory() if gpus_wanted else None
                if sweep.slurm:
                    batch = slurm_batch(sweep)
                else:
                    cpu_wanted = any(r.state == SweepState.QUEUED and r.device == "cpu" for r in sweep.runs)
                    chosen = next_start(sweep, inventory, cores, self.elsewhere(sweep) if cpu_wanted else 0)
                    batch, devices = ([chosen[0]], chosen[1]) if chosen is not None else ([], [])
                for run in batch:
                    run.state, run.devices = SweepState.STARTING, devices
            if not batch:
                time.sleep(POLL_S)
            elif sweep.slurm:
                start_on_slurm(self.folder, batch, inventory, lambda: self.stopping)
            else:
                start_one(self.folder, batch[0], devices, inventory)
        return 0


def spawn_scheduler(folder: Path, workdir: str) -> None:
    """The scheduler in its own session (it survives the command, the terminal and an SSH drop), logging to
    scheduler.log; one that cannot start is one paragraph."""
    from gpuwizard.runner.host.procs import MARKER

    env = {k: v for k, v in os.environ.items() if k != MARKER}  # each run gets its own marker from its supervisor
    log_fd = os.open(folder / "scheduler.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", SWEEP_SCHEDULER, str(folder)],
            env=env,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        raise UserError(
            problem(
                None,
                f"the sweep's scheduler could not be started ({sys.executable}: {exc})",
                "check the interpreter, then `gpuwizard sweep resume`",
            )
        ) from None
    finally:
        os.close(log_fd)
    with changing(folder) as sweep:  # known before it runs, so a `sweep stop` at once finds it
        sweep.scheduler = ProcessRef.of(child.pid)


def scheduler_alive(sweep: Sweep) -> bool:
    return sweep.scheduler is not None and sweep.scheduler.alive()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0])
    read_sweep(folder)  # a folder that is no sweep ends it here, in its log
    return Scheduler(folder).run()


if __name__ == "__main__":
    sys.exit(main())
