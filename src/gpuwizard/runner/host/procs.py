"""The job's processes: which pid is which rank, how busy each is, and stopping every one of them.

Each process is signalled through a pidfd taken while it was known to be the job's, never by a bare pid or process
group that may have been reaped and reused. A process that left the tree is still found: by the job's cgroup where
there is one, and by the run's environment marker everywhere.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from gpuwizard.runner.host.cgroup import JobCgroup
from gpuwizard.runs.records import ProcessRef, RankState, start_ticks

MARKER = "GPUWIZARD_RUN"
"""Set on a run's supervisor and inherited by every process of its job: the run folder's resolved path."""


def marker_value(run_path: os.PathLike[str] | str) -> str:
    return str(Path(run_path).resolve())


def read_environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, _, value = item.partition(b"=")
        if key:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def read_marker(pid: int) -> str | None:
    """The run marker in a process's environment (as it was at exec), None without one or when unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = b"\0" + fh.read()
    except OSError:
        return None
    start = raw.find(b"\0" + MARKER.encode() + b"=")
    if start < 0:
        return None
    start += len(MARKER) + 2
    end = raw.find(b"\0", start)
    return raw[start : end if end >= 0 else len(raw)].decode(errors="replace")


class Pinned:
    """One process held by a pidfd: a signal through it can never reach another process that took its pid."""

    def __init__(self, pid: int, fd: int | None, ticks: int):
        self.pid, self.fd, self.ticks = pid, fd, ticks

    @classmethod
    def open(cls, pid: int, ticks: int | None = None) -> Pinned | None:
        """Pin `pid` if it runs (and, given its start ticks, only if it is still that very process)."""
        try:
            fd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        except OSError:
            fd = None  # no pidfd here (Linux < 5.3): the start time is checked before each signal instead
        now = start_ticks(pid)
        if now is None or (ticks is not None and now != ticks):
            if fd is not None:
                os.close(fd)
            return None
        return cls(pid, fd, now)

    def alive(self) -> bool:
        """Running (a zombie has exited)."""
        if self.fd is None:
            return start_ticks(self.pid) == self.ticks
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        return not poller.poll(0)

    def signal(self, sig: int) -> None:
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)
            elif start_ticks(self.pid) == self.ticks:
                os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def marked_pids() -> dict[int, str]:
    """Every readable process carrying a run marker, with its value (a scan of /proc; pids not pinned)."""
    found = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (value := read_marker(int(entry.name))) is not None:
            found[int(entry.name)] = value
    return found


def marked_processes(wanted: str, exclude: Iterable[int] = ()) -> list[Pinned]:
    """Every process whose environment carries the run marker `wanted`, pinned, this process and `exclude` aside."""
    skip = {os.getpid(), *exclude}
    found = []
    for pid, value in marked_pids().items():
        if value != wanted or pid in skip or (pin := Pinned.open(pid)) is None:
            continue
        if read_marker(pid) == wanted and pin.alive():  # read again once pinned: the pid may have been reused
            found.append(pin)
        else:
            pin.close()
    return found


RANK_LOOKS = 10
"""Refreshes (about a second apart) a new child gets to show a RANK before it counts as a helper process."""
SWEEP_EVERY_S = 1.0


class JobProcesses:
    """Tracks every process of the job, so none survives a stop: its tree, its cgroup and its marker.

    `launcher` is the job's Popen: its process group is signalled only while it is unreaped (a reaped pid, and the
    group id it named, may already belong to another process).
    """

    def __init__(
        self,
        root_pid: int | None,
        launcher: subprocess.Popen[bytes] | None = None,
        cgroup: JobCgroup | None = None,
        marker: str | None = None,
    ):
        self.root_pid, self.launcher, self.cgroup, self.marker = root_pid, launcher, cgroup, marker
        self.known: dict[int, psutil.Process] = {}
        self.pins: dict[int, Pinned] = {}
        self.ranks: dict[int, tuple[int, int]] = {}
        self._cpu_seen: dict[int, tuple[float, float]] = {}
        self.refs: dict[int, ProcessRef | None] = {}
        self.unclassified: dict[int, int] = {}
        self.exclude: set[int] = {os.getpid()}
        if root_pid is not None:
            self._add(root_pid)
            self.unclassified.pop(root_pid, None)

    def _add(self, pid: int, ticks: int | None = None) -> None:
        """Know `pid` from now on, pinned (only while it is the process seen: `ticks`, or psutil's identity)."""
        if pid in self.known or pid in self.exclude:
            return
        try:
            proc = psutil.Process(pid)
        except psutil.Error:
            return
        pin = Pinned.open(pid, ticks)
        if pin is None:
            return
        if not proc.is_running():  # reused between the two looks
            pin.close()
            return
        self.known[pid], self.pins[pid] = proc, pin
        self.unclassified[pid] = RANK_LOOKS

    def adopt(self, ref: ProcessRef) -> None:
        """Track a process recorded by identity (a run whose supervisor is gone)."""
        if ref.alive():
            self._add(ref.pid, ref.start_ticks)
            self.unclassified.pop(ref.pid, None)

    def refresh(self) -> None:
        """Add newly started descendants and cgroup members; learn each worker's RANK from its environment; forget
        helpers that exited (a week of DataLoader respawns keeps nothing).

        A child seen between fork and exec still has its parent's environment (no RANK yet), so a child that is not a
        rank is looked at again on the next few refreshes rather than written off at first sight.
        """
        for proc in list(self.known.values()):
            try:
                children = proc.children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                self._add(child.pid)
        if self.cgroup is not None:
            for pid in self.cgroup.pids() - self.known.keys():
                self._add(pid)
        for pid, looks_left in list(self.unclassified.items()):
            env = read_environ(pid)
            if "RANK" in env and "LOCAL_RANK" in env and _is_worker(self.known[pid], self.known):
                self.ranks[pid] = (int(env["RANK"]), int(env["LOCAL_RANK"]))
                self.refs[pid] = ProcessRef.of(pid)
                del self.unclassified[pid]
            elif looks_left <= 1 or not env:
                del self.unclassified[pid]
            else:
                self.unclassified[pid] = looks_left - 1
        for pid, pin in list(self.pins.items()):
            if pid not in self.ranks and pid != self.root_pid and not pin.alive():
                pin.close()
                del self.pins[pid], self.known[pid]
                self.unclassified.pop(pid, None)

    def sweep(self) -> None:
        """Add every process carrying the run's marker: those that left the tree (a double-forked daemon)."""
        if self.marker is None:
            return
        for pin in marked_processes(self.marker, self.exclude | self.known.keys()):
            pid = pin.pid
            pin.close()
            self._add(pid)

    def alive(self) -> list[psutil.Process]:
        return [self.known[pid] for pid, pin in self.pins.items() if pin.alive()]

    def pids(self) -> set[int]:
        return {p.pid for p in self.alive()}

    def remaining(self) -> set[int]:
        """Pids of the job still running, looked up afresh (tree, cgroup and marker): empty means nothing is left."""
        self.refresh()
        self.sweep()
        left = self.pids()
        if self.cgroup is not None:
            left |= self.cgroup.pids() - self.exclude
        return left

    def sample_ranks(self) -> list[RankState]:
        """CPU use of each rank since the previous sample (percent of one core), and its resident memory."""
        now = time.monotonic()
        samples = []
        for pid, (rank, local_rank) in sorted(self.ranks.items(), key=lambda kv: kv[1]):
            proc = self.known[pid]
            try:
                times = proc.cpu_times()
                used = times.user + times.system
                status = proc.status()
                rss_mb = round(proc.memory_info().rss / 2**20, 1)
            except psutil.Error:
                samples.append(
                    RankState(
                        rank=rank,
                        local_rank=local_rank,
                        pid=pid,
                        cpu=None,
                        status="exited",
                        alive=False,
                        ref=self.refs.get(pid),
                    )
                )
                continue
            previous = self._cpu_seen.get(pid)
            self._cpu_seen[pid] = (now, used)
            cpu = (
                None
                if previous is None or now <= previous[0]
                else round(100 * (used - previous[1]) / (now - previous[0]), 1)
            )
            samples.append(
                RankState(
                    rank=rank,
                    local_rank=local_rank,
                    pid=pid,
                    cpu=cpu,
                    rss_mb=rss_mb,
                    status=status,
                    alive=status != psutil.STATUS_ZOMBIE,
                    ref=self.refs.get(pid),
                )
            )
        return samples

    def stop(self, grace_s: float = 10.0) -> list[int]:
        """SIGTERM everything (torchrun forwards it to its ranks), SIGKILL what is left after the grace period, then
        check; returns the pids still running (empty: nothing of the job is left)."""
        signalled: set[int] = set()

        def terminate_new() -> None:
            self._signal_group(signal.SIGTERM)
            for pid, pin in list(self.pins.items()):
                if pid not in signalled:
                    signalled.add(pid)
                    pin.signal(signal.SIGTERM)
                    pin.signal(signal.SIGCONT)  # a stopped process (SIGSTOP, a debugger) gets to handle it too

        left = self.remaining()
        terminate_new()
        deadline, swept = time.monotonic() + grace_s, time.monotonic()
        while time.monotonic() < deadline and left:
            time.sleep(0.1)
            self.refresh()
            if time.monotonic() - swept >= SWEEP_EVERY_S:
                swept = time.monotonic()
                self.sweep()
            terminate_new()  # processes forked while the job was stopping
            left = self.pids() | (self.cgroup.pids() - self.exclude if self.cgroup is not None else set())
        deadline = time.monotonic() + 5
        while left and time.monotonic() < deadline:
            if self.cgroup is not None:
                self.cgroup.kill()
            self._signal_group(signal.SIGKILL)
            for pin in self.pins.values():
                pin.signal(signal.SIGKILL)
            time.sleep(0.05)
            left = self.remaining()
        if not left and self.cgroup is not None:
            wait_until(self.cgroup.remove, 2.0)
        return sorted(left)

    def _signal_group(self, sig: int) -> None:
        """The launcher's process group (it may hold children not seen yet), only while the launcher is unreaped:
        then its pid, and the group id it names, cannot have been reused."""
        if self.launcher is None or self.launcher.poll() is not None:
            return
        try:
            os.killpg(self.launcher.pid, sig)  # its own session: the group id is its pid
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        for pin in self.pins.values():
            pin.close()
        self.pins.clear()


def wait_until(done: Callable[[], bool], timeout_s: float) -> bool:
    """Call `done()` until it returns true or the time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        if done():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _is_worker(proc: psutil.Process, known: dict[int, psutil.Process]) -> bool:
    """A torchrun worker, not a DataLoader child that inherited RANK from it."""
    try:
        parent = proc.ppid()
    except psutil.Error:
        return False
    return parent not in known or "RANK" not in read_environ(parent)
