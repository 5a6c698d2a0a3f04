"""Every stop from outside a run, in one place: `gpuwizard stop`, `sweep stop`, the Sweep screen, the monitor's
stop and an interrupted launch. The processes that carry a run's marker (and its cgroup) are the truth, not
status.json; its supervisor is asked first (SIGTERM, pinned to the very process recorded) and waited for on a fresh
look, and what it does not end in time is ended from here."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gpuwizard.core import paths
from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.core.kinds import EventKind, StopReason
from gpuwizard.runner.host.cgroup import JobCgroup
from gpuwizard.runner.host.procs import JobProcesses, Pinned, marked_pids, marker_value
from gpuwizard.runs.events import CheckpointWait
from gpuwizard.runs.records import ProcessRef, RecordError, Status
from gpuwizard.runs.rundir import RunDir, alive_processes, find_run, list_runs, run_processes

STOP_WAIT_S = 30.0
"""How long a run's supervisor may take to end it before every process of it is ended from here (a checkpoint being
written adds its own limit)."""
POLL_S = 0.2

Outcome = Literal["unreadable", "unrecorded", "already_ended", "stopped", "by_marker", "ended_here"]
"""unreadable: its status cannot be read and no process carries its marker
(nothing done). unrecorded: its folder could not record the stop. already_ended: ended with nothing left. stopped: its
supervisor ended it. by_marker: its folder could not speak for it, so every process carrying its marker was ended from
here. ended_here: its supervisor did not answer in time, so every process of it was ended from here."""


@dataclass(frozen=True)
class StopNote:
    """Said while a stop is under way, before it ends: it waits for a checkpoint write, or it ends by marker."""

    run_id: str
    checkpoint_s: float | None = None
    """The stop waits for the checkpoint being written, at most this many seconds more."""
    by_marker: str | None = None
    """Why the folder cannot speak for the run: every process carrying its marker is being ended from here."""


@dataclass(frozen=True)
class StopResult:
    """What a stop did; `survivors` are the pids still running after it (empty: nothing of the run is left)."""

    outcome: Outcome
    run_id: str
    path: Path
    survivors: list[int] = field(default_factory=list)
    why: str = ""
    """unreadable, unrecorded: the error; by_marker: why the folder could not speak for the run."""
    state: str = ""
    """already_ended: the state it ended in."""
    checkpoint_s: float | None = None
    """Set where the stop waited for a checkpoint being written: at most this many seconds, as said then."""


def stop_run(
    run_id: str | None, wait_s: float = STOP_WAIT_S, on_note: Callable[[StopNote], None] | None = None
) -> StopResult | None:
    """Stop the run with this id (or the newest stoppable one), with or without its supervisor, its status or its
    folder; a stop is done once a fresh look finds nothing of it left. None: no run by that id, or none active."""
    note = on_note or (lambda _: None)
    marked = marked_runs()
    path = newest_stoppable(marked) if run_id is None else named_run(run_id, marked)
    if path is None:
        return None
    if not path.exists():
        return by_marker(path, "its folder was deleted", note)
    run = RunDir(path)
    try:
        status = run.status()
    except RecordError as exc:
        if path in marked:
            return by_marker(path, f"its status cannot be read ({exc})", note)
        return StopResult("unreadable", run.run_id, path, why=str(exc))
    if status.final and not run_leftovers(run):
        return StopResult("already_ended", run.run_id, path, state=str(status.state))
    try:
        request_stop(run)
    except RecordError as exc:  # its status went unreadable since it was read
        return by_marker(path, f"its status can no longer be read ({exc})", note)
    except OSError as exc:
        return unrecorded(run, exc)
    deadline, checkpoint_s = time.monotonic() + wait_s, None
    while time.monotonic() < deadline:
        if not path.exists():
            return by_marker(path, "its folder was deleted", note, checkpoint_s)
        try:
            status = run.status()
        except RecordError as exc:
            return by_marker(path, f"its status can no longer be read ({exc})", note, checkpoint_s)
        if status.final and not run_leftovers(run):
            return StopResult("stopped", run.run_id, path, checkpoint_s=checkpoint_s)
        if checkpoint_s is None and (left := checkpoint_wait(run)) is not None:
            checkpoint_s = left  # the supervisor lets a checkpoint write finish first
            note(StopNote(run.run_id, checkpoint_s=left))
            deadline = max(deadline, time.monotonic() + left + wait_s)
        time.sleep(POLL_S)
    # the supervisor did not manage it (stuck, or stopped with SIGSTOP): end it all from here
    survivors = stop_all(path, run_processes(run, status))
    return StopResult("ended_here", run.run_id, path, survivors=survivors, checkpoint_s=checkpoint_s)


def checkpoint_wait(run: RunDir) -> float | None:
    """Seconds the supervisor still lets a checkpoint write take before it stops the job, where it said it waits."""
    event = next((e for e in run.events()[0] if e.kind == EventKind.STOP_WAITS_FOR_CHECKPOINT), None)
    wait = CheckpointWait.of(event) if event is not None else None
    return None if wait is None else max(wait.started_t + wait.limit_s - time.time(), 0.0)


def unrecorded(run: RunDir, exc: OSError) -> StopResult:
    """A stop its folder could not record (read-only, full, removed): what of the run still runs."""
    try:
        left = alive_processes(run, run.status())
    except RecordError as read:
        return StopResult("unreadable", run.run_id, run.path, why=str(read))
    return StopResult("unrecorded", run.run_id, run.path, survivors=left, why=str(exc.strerror or exc))


def by_marker(path: Path, why: str, note: Callable[[StopNote], None], checkpoint_s: float | None = None) -> StopResult:
    """A run its folder cannot speak for (deleted, or its status unreadable): every process that carries its marker,
    and its cgroup, ended from here."""
    note(StopNote(path.name, by_marker=why))
    return StopResult("by_marker", path.name, path, survivors=stop_all(path), why=why, checkpoint_s=checkpoint_s)


def newest_stoppable(marked: dict[Path, list[int]]) -> Path | None:
    """The newest run that says it is active or has a live process carrying its marker (folder ids start with the
    time they were made)."""
    active = {Path(marker_value(e.run.path)) for e in list_runs() if e.status is not None and e.status.claims_active}
    return max(active | marked.keys(), key=lambda path: path.name, default=None)


def named_run(run_id: str, marked: dict[Path, list[int]]) -> Path | None:
    """The run `stop RUN_ID` means: a folder, or one deleted whose processes still carry its marker."""
    found = find_run(run_id) if run_id.strip() else None
    if found is not None:
        return Path(marker_value(found.path))
    deleted = sorted(p for p in marked if not p.exists() and p.name.startswith(run_id.strip() or "\0"))
    return deleted[-1] if deleted else None


def request_stop(run: RunDir) -> None:
    """Ask the supervisor to stop the job (it stops every process of it); without one, stop them all here."""
    status = run.status()
    if signal_supervisor(status, signal.SIGTERM):
        return
    if status.slurm_job_id and not status.final:
        from gpuwizard.runner.host.slurm import cancel

        cancel(status.slurm_job_id)  # the job runs on the cluster: scancel it even without its supervisor
    procs = run_tracker(run.path, run_processes(run, status))
    try:
        procs.stop()
    finally:
        procs.close()
    with contextlib.suppress(OSError):
        run.space_reserve.unlink(missing_ok=True)  # the dead supervisor's
    if not status.final:  # the processes are stopped by now; a folder that cannot record it raises OSError
        with contextlib.suppress(RecordError):
            run.update_status(
                state=RunState.STOPPED,
                exit_code=int(ExitCode.STOPPED),
                ended=time.time(),
                stop_reason=StopReason.USER_SUPERVISOR_GONE,
            )


def run_tracker(run_path: Path, refs: Sequence[ProcessRef]) -> JobProcesses:
    """Every process of a run as found now, from outside its supervisor: the recorded ones by identity, any carrying
    its marker (daemons, a job whose folder is gone), and its cgroup."""
    procs = JobProcesses(None, marker=marker_value(run_path))
    for ref in refs:
        procs.adopt(ref)
    procs.sweep()
    found = procs.pids()
    # its cgroup, from any of them; by its name when none is found (they may all have shed the marker)
    procs.cgroup = (
        next(filter(None, map(JobCgroup.of_process, found)), None) if found else JobCgroup.of_run(run_path.name)
    )
    return procs


def leftovers(run_path: Path, refs: Sequence[ProcessRef]) -> list[int]:
    """Pids of a run still running, looked up afresh; empty means nothing of it is left."""
    procs = run_tracker(run_path, refs)
    try:
        return sorted(procs.remaining())
    finally:
        procs.close()


def run_leftovers(run: RunDir) -> list[int]:
    try:
        refs = run_processes(run, run.status())
    except RecordError:
        refs = []
    return leftovers(run.path, refs)


def marked_runs() -> dict[Path, list[int]]:
    """Runs of this data folder with a live process that carries their marker, whatever their folder still holds
    (status.json deleted, the whole folder deleted, a final status the processes outlived)."""
    base = Path(marker_value(paths.runs_dir()))
    found: dict[Path, list[int]] = {}
    for pid, value in marked_pids().items():
        path = Path(value)
        if path.parent == base and pid != os.getpid():
            found.setdefault(path, []).append(pid)
    return found


def orphaned_runs() -> dict[Path, list[int]]:
    """Runs of this data folder whose folder was deleted while processes of them run on, found by their marker."""
    return {path: pids for path, pids in marked_runs().items() if not path.exists()}


def stop_all(run_path: Path, refs: Sequence[ProcessRef] = ()) -> list[int]:
    """Stop every process of a run from here (its folder gone, or its supervisor not answering); returns those still
    running after it."""
    procs = run_tracker(run_path, refs)
    try:
        return procs.stop()
    finally:
        procs.close()


def request_stack_dump(run: RunDir) -> bool:
    return signal_supervisor(run.status(), signal.SIGUSR1)


def signal_supervisor(status: Status, sig: int) -> bool:
    """Signal the run's supervisor if it is the very process recorded (pinned first: a pid reused by another program
    in between is never signalled); False when it is gone."""
    ref = status.supervisor
    pin = Pinned.open(ref.pid, ref.start_ticks) if ref is not None and ref.alive() else None
    if pin is None:
        return False
    try:
        pin.signal(sig)
    finally:
        pin.close()
    return True
