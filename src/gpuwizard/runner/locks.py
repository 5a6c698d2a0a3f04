"""One active run per output folder: the supervisor holds a lock on it for the job's lifetime.

The lock file lives in gpuwizard's data folder, not in the output folder (LeRobot refuses to start in an output
folder that already exists). The kernel drops the lock when the supervisor dies, however it dies.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

from gpuwizard import paths


def lock_file(output_dir: Path, node_rank: int = 0) -> Path:
    """One lock per output folder and node: the nodes of one multi-node job share the folder (on one machine too)."""
    key = str(output_dir.resolve()) + (f"#node{node_rank}" if node_rank else "")
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]  # one lock however the path is written
    return paths.data_dir() / "locks" / f"output-{digest}.lock"


class OutputLock:
    """An exclusive lock on one output folder, naming the run that holds it."""

    def __init__(self, output_dir: Path, node_rank: int = 0):
        self.path = lock_file(output_dir, node_rank)
        self.fd: int | None = None

    def acquire(self, run_id: str) -> str | None:
        """Take the lock for `run_id`; None on success, else the id of the run holding it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 256).decode(errors="replace").strip() or "another run"
            os.close(fd)
            return holder
        os.ftruncate(fd, 0)
        os.write(fd, run_id.encode())
        self.fd = fd
        return None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def output_holder(output_dir: Path, node_rank: int = 0) -> str | None:
    """The run that holds an output folder now, or None (a probe: the lock is released at once). A data folder that
    cannot be written is not this check's to report: creating the run folder says so in its own words."""
    lock = OutputLock(output_dir, node_rank)
    try:
        holder = lock.acquire("probe")
    except OSError:
        return None
    lock.release()
    return holder
