"""A cgroup v2 sub-tree for one job, where the machine lets the supervisor make one: no process can leave it.

A double-forked daemon with its own session escapes the process tree and the process group, never its cgroup
(only a privileged process can move itself out). The sub-tree is made under the supervisor's own cgroup; where that
is not writable (an unprivileged user outside a delegated systemd unit, cgroup v1 only) there is none, and the job is
tracked by its environment marker instead (procs.marked_processes).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

PREFIX = "gpuwizard-job-"


def job_name(run_id: str) -> str:
    """The part of a job cgroup's name that names its run (then `-<supervisor pid>`): the rule localjob.start_job
    names the cgroup it creates by."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)[:80]


def v2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid machine)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                if "-" in fields and fields[fields.index("-") + 1] == "cgroup2":
                    return Path(fields[4])
    except OSError:
        pass
    return None


def v2_path(pid: int | str = "self") -> str | None:
    """A process's cgroup v2 path (the `0::` line of /proc/PID/cgroup), None when it has none or is gone."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def prune_abandoned(parent: Path) -> None:
    """Remove the empty job cgroups of supervisors that died without removing theirs (kill -9): each name ends with
    its supervisor's pid, and a live supervisor's cgroup is never touched."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        owner = entry.name.rpartition("-")[2]
        if entry.name.startswith(PREFIX) and owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            JobCgroup(Path(entry.path)).remove()  # refused while anything is still in it


class JobCgroup:
    """One job's cgroup: its members at any moment, SIGKILL to all of them at once, removed once empty."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, name: str) -> JobCgroup | None:
        """A fresh sub-tree under this process's own cgroup (named after `name` and this pid), or None where it
        cannot be made or joined."""
        mount, own = v2_mount(), v2_path()
        if mount is None or own is None or own.endswith(" (deleted)"):
            return None
        path = mount / own.lstrip("/") / f"{PREFIX}{name}-{os.getpid()}"
        prune_abandoned(path.parent)
        try:
            path.mkdir()
        except OSError:
            return None
        group = cls(path)
        if not os.access(path / "cgroup.procs", os.W_OK):
            group.remove()
            return None
        return group

    @classmethod
    def of_process(cls, pid: int) -> JobCgroup | None:
        """The job cgroup a process is in (found from any of its processes, when the run folder is gone)."""
        own, mount = v2_path(pid), v2_mount()
        if own is None or mount is None:
            return None
        for folder in (Path(own), *Path(own).parents):  # the job may have made cgroups of its own inside
            if folder.name.startswith(PREFIX):
                path = mount / str(folder).lstrip("/")
                return cls(path) if path.is_dir() else None
        return None

    @classmethod
    def of_run(cls, run_id: str) -> JobCgroup | None:
        """A run's job cgroup found by its name, anywhere in the hierarchy (its processes may all have shed the run
        marker; none of them can leave the cgroup)."""
        mount = v2_mount()
        if mount is None:
            return None
        wanted = re.compile(re.escape(PREFIX + job_name(run_id)) + r"-\d+")
        for folder, subfolders, _ in os.walk(mount):
            for name in list(subfolders):
                if name.startswith(PREFIX):
                    subfolders.remove(name)  # a job's own sub-tree holds no other job
                    if wanted.fullmatch(name):
                        return cls(Path(folder) / name)
        return None

    def join(self) -> None:
        """Move the calling process in (run in the job's child between fork and exec, so nothing forks before)."""
        with open(self.path / "cgroup.procs", "w") as fh:
            fh.write("0")

    def contains(self, pid: int) -> bool:
        found = v2_path(pid)
        return found is not None and (found + "/").startswith(self.relative + "/")

    @property
    def relative(self) -> str:
        mount = v2_mount()
        return "/" + str(self.path.relative_to(mount)) if mount is not None else str(self.path)

    def pids(self) -> set[int]:
        """Every process in the sub-tree now (a job that makes cgroups of its own included)."""
        found: set[int] = set()
        for folder, _, _ in os.walk(self.path):
            try:
                with open(os.path.join(folder, "cgroup.procs"), encoding="ascii") as fh:
                    found.update(int(line) for line in fh if line.strip())
            except (OSError, ValueError):
                continue
        return found

    def kill(self) -> bool:
        """SIGKILL every member at once (cgroup.kill, Linux 5.14+); False where the kernel has no cgroup.kill."""
        try:
            with open(self.path / "cgroup.kill", "w") as fh:
                fh.write("1")
        except OSError:
            return False
        return True

    def remove(self) -> bool:
        """Remove the emptied sub-tree, deepest first; False while a member (or a zombie being reaped) is left."""
        for folder, _, _ in sorted(os.walk(self.path), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                continue
            except OSError:
                return False
        return True
