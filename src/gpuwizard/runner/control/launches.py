"""What a launch leaves in the runs folder while it starts (its announcement, launcher.json, the staging folder) and
the tidying of what a launch killed half way left behind: `runs`, `stop` and the next launch call it. Imports no
planning, so `gpuwizard runs` stays quick."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import time
from pathlib import Path

from gpuwizard.core import paths
from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.core.yamlio import atomic_write
from gpuwizard.runner.host.procs import marked_pids, marker_value
from gpuwizard.runs.records import ProcessRef, Record, RecordError, read_record
from gpuwizard.runs.rundir import RunDir

LAUNCHER = "launcher.json"
STAGING_SUFFIX = ".staging"
LAUNCHING_PREFIX = ".launching-"


class Launcher(Record):
    """The process that writes a run folder and starts its supervisor. Until the supervisor has taken over, a launcher
    that is gone (kill -9 of the wizard or of `run`) means nobody will finish or undo that start."""

    host: str
    process: ProcessRef

    @classmethod
    def here(cls) -> Launcher | None:
        ref = ProcessRef.of(os.getpid())
        return None if ref is None else cls(host=socket.gethostname(), process=ref)

    def gone(self) -> bool:
        """Ended for sure: a process of this machine that is not running (another machine's is not ours to judge)."""
        return self.host == socket.gethostname() and not self.process.alive()


def announce_launch() -> Path:
    """Name this process in the runs folder as starting a run, before any folder of that run exists: a half-made
    folder that names no launcher yet is then never taken for an abandoned one while its launcher lives."""
    base = paths.runs_dir()
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = base / f"{LAUNCHING_PREFIX}{os.getpid()}-{os.urandom(4).hex()}.json"
    launcher = Launcher.here()
    atomic_write(path, launcher.to_json_text() if launcher else "{}", make_parents=False)
    return path


def withdraw_launch(announced: Path | None) -> None:
    if announced is not None:
        with contextlib.suppress(OSError):
            announced.unlink(missing_ok=True)


def write_launcher(stage: RunDir) -> None:
    """Name this process as the folder's launcher, first of all its files (it travels with the published folder)."""
    launcher = Launcher.here()
    if launcher is not None:
        stage.write(LAUNCHER, launcher)


def launcher_gone(path: Path) -> bool | None:
    """Whether the launcher a file names has ended; None where the file names none."""
    try:
        return read_record(path, Launcher).gone()
    except RecordError:
        return None


def launches_under_way(base: Path) -> bool:
    """Whether a launcher that may still be writing a folder lives; the announcements of dead ones are removed."""
    alive = False
    for path in base.glob(f"{LAUNCHING_PREFIX}*"):
        if launcher_gone(path) is False:
            alive = True
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return alive


def clear_interrupted_launches(ended: frozenset[str] = frozenset()) -> list[str]:
    """Tidy what launches killed half way left behind (nothing of them could undo it): a staging folder whose launcher
    is gone goes, with the empty name it reserved; a published run whose launcher died before its supervisor started
    is recorded as failed (its job never ran). A folder whose launcher may be alive, or whose marker a live process
    carries, is never touched; `ended` names runs a listing just read as ended, which need no look. Returns one line
    per run recorded."""
    base = paths.runs_dir()
    try:
        entries = [entry for entry in os.scandir(base) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    live = set(marked_pids().values())
    under_way = launches_under_way(base)
    names = {entry.name for entry in entries}
    resolved = Path(marker_value(base))  # once: resolving each of 5,000 folders cost `runs` 0.3-0.4 s
    told: list[str] = []
    for entry in entries:
        # resolved / name: what marker_value(folder) gives for a folder that is no link
        if entry.name in ended or str(resolved / entry.name) in live:
            continue
        try:
            told += clear_folder(base, entry.name, names, live, under_way)
        except OSError:
            continue  # a folder this user cannot read is listed as such by `runs`, not tidied
    return told


def clear_folder(base: Path, name: str, names: set[str], live: set[str], under_way: bool) -> list[str]:
    """clear_interrupted_launches for one entry of the runs folder."""
    folder = base / name
    if name.startswith(".") and name.endswith(STAGING_SUFFIX):
        gone = launcher_gone(folder / LAUNCHER)
        if gone or (gone is None and not under_way):
            shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                (base / name[1 : -len(STAGING_SUFFIX)]).rmdir()  # the name it reserved, while still empty
    elif not name.startswith(".") and f".{name}{STAGING_SUFFIX}" not in names:
        if empty(folder):
            if not under_way:  # a name reserved by a launcher killed before it made its staging folder
                with contextlib.suppress(OSError):
                    folder.rmdir()
        elif (line := fail_unstarted(RunDir(folder))) is not None:
            return [line]
    return []


def fail_unstarted(run: RunDir) -> str | None:
    """A published run still waiting for the supervisor its dead launcher never started: failed, not 'starting'."""
    if not (run.path / LAUNCHER).exists():
        return None
    try:
        status = run.status()
    except RecordError:
        return None
    if status.state != RunState.STARTING or status.supervisor is not None:
        launch_over(run)  # an older run's: the next listing need not read its status again
        return None
    if not launcher_gone(run.path / LAUNCHER):
        return None
    if status.slurm_job_id:
        from gpuwizard.runner.host.slurm import cancel

        cancel(status.slurm_job_id)  # submitted, and nobody would follow it
    why = "the process that launched it ended before the run's supervisor started; the job never ran"
    with contextlib.suppress(OSError, RecordError):
        run.update_status(state=RunState.FAILED, exit_code=int(ExitCode.NOT_STARTED), ended=time.time(), error=why)
        return f"run {run.run_id}: {why}; recorded as failed"
    return None


def launch_over(run: RunDir) -> None:
    """The supervisor has the run: its launcher's record goes, so the tidying of every later `runs` and launch passes
    the folder with one look (5,000 runs: 5,000 status reads fewer)."""
    with contextlib.suppress(OSError):
        (run.path / LAUNCHER).unlink(missing_ok=True)


def empty(folder: Path) -> bool:
    try:
        return not any(folder.iterdir())
    except OSError:
        return False
