"""One active run per output folder: the supervisor holds a lock on it for the job's lifetime, and no output folder
inside another active run's folders.

The lock file sits next to the output folder (`.<name>.gpuwizard-lock` in its parent), where every user and every
data folder (XDG_DATA_HOME, GPUWIZARD_DATA_DIR) finds the same one; not inside it, because LeRobot refuses to start
in an output folder that already exists. Where the parent cannot be written, an existing output folder holds it.
The kernel drops the lock when the supervisor dies, however it dies.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

from gpuwizard.core.errors import Problem, problem
from gpuwizard.runs.records import RecordError
from gpuwizard.runs.rundir import list_runs, status_active

PROBE_RETRIES = 10
LOCK_MODE = 0o644
"""Readable by everyone who may share the folder: they take the same lock and read who holds it (a run id)."""


def lock_files(output_dir: Path, node_rank: int = 0) -> list[Path]:
    """Where the lock of an output folder may be, in order: beside it, then inside it. One per node: the nodes of one
    multi-node job share the folder (on one machine too)."""
    out = Path(output_dir).resolve()  # one lock however the path is written
    suffix = f"-node{node_rank}" if node_rank else ""
    return [out.parent / f".{out.name}.gpuwizard-lock{suffix}", out / f".gpuwizard-lock{suffix}"]


class OutputLock:
    """An exclusive lock on one output folder, naming the run that holds it."""

    def __init__(self, output_dir: Path, node_rank: int = 0):
        self.candidates = lock_files(output_dir, node_rank)
        self.path = self.candidates[0]
        self.fd: int | None = None

    def _open(self) -> int:
        """The lock file, made where it can be (the parent folder is made as the trainer would make it)."""
        beside, inside = self.candidates
        try:
            beside.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(beside, os.O_RDWR | os.O_CREAT, LOCK_MODE)
        except PermissionError:
            if os.path.exists(beside):
                return os.open(beside, os.O_RDONLY)  # another user's lock file: flock works on a read-only one
            if not inside.parent.is_dir():
                raise
            self.path = inside
            try:
                return os.open(inside, os.O_RDWR | os.O_CREAT, LOCK_MODE)
            except PermissionError:
                return os.open(inside, os.O_RDONLY)
        try:
            os.fchmod(fd, LOCK_MODE)  # not cut by the supervisor's umask: the next user must open it too
        except PermissionError:
            pass
        return fd

    def acquire(self, run_id: str) -> str | None:
        """Take the lock for `run_id`; None on success, else the id of the run holding it."""
        fd = self._open()
        for attempt in range(PROBE_RETRIES + 1):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == PROBE_RETRIES:
                    holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "another run"
                    os.close(fd)
                    return holder
                time.sleep(0.02)  # a probe (output_holder) holds it for an instant
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, run_id.encode(), 0)
        except OSError as exc:
            if exc.errno not in (errno.EBADF, errno.EINVAL, errno.EACCES):
                os.close(fd)
                raise
        self.fd = fd
        return None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def output_holder(output_dir: Path, node_rank: int = 0) -> str | None:
    """The run that holds an output folder now, or None: a probe that makes nothing (no lock file, no folder)."""
    for path in lock_files(output_dir, node_rank):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 256, 0).decode(errors="replace").strip() or "another run"
        finally:
            os.close(fd)
    return None


def nesting_problems(output: Path, output_dir: str) -> list[Problem]:
    """An output folder inside an active run's run folder or output folder: the two runs' files would mix, and that
    run's trainer may clear, or resume from, what this one writes."""
    out = output.resolve()
    for entry in list_runs():
        status = entry.status
        if status is None or not status_active(status):
            continue
        folders = [("run folder", entry.run.path.resolve())]
        try:
            written = entry.run.job().output_dir
        except RecordError:
            written = None
        if written:
            folders.append(("output folder", Path(written)))
        for what, folder in folders:
            if out != folder and out.is_relative_to(folder):
                run_id = entry.run.run_id
                return [
                    problem(
                        "output_dir",
                        f"is inside the {what} of run {run_id} ({folder}), which is still {status.state}: the two "
                        "runs' files would mix, and its trainer may clear or resume from what this one writes",
                        f"choose an output_dir outside it, or wait for run {run_id} to end (`gpuwizard stop {run_id}` "
                        "stops it)",
                        value=output_dir,
                    )
                ]
    return []
