"""The job's process tree: which pid is which rank, how busy each is, and stopping all of it."""

from __future__ import annotations

import os
import signal
import time

import psutil

from gpuwizard.runner.records import ProcessRef, RankState


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


RANK_LOOKS = 10
"""Refreshes (about a second apart) a new child gets to show a RANK before it counts as a helper process."""


class JobProcesses:
    """Tracks every process the job ever started, so none survives a stop even after re-parenting."""

    def __init__(self, root_pid: int):
        self.root_pid = root_pid
        self.known: dict[int, psutil.Process] = {}
        self.ranks: dict[int, tuple[int, int]] = {}
        self._cpu_seen: dict[int, tuple[float, float]] = {}
        self.refs: dict[int, ProcessRef | None] = {}
        self.unclassified: dict[int, int] = {}
        try:
            self.known[root_pid] = psutil.Process(root_pid)
        except psutil.Error:
            pass

    def refresh(self) -> None:
        """Add newly started descendants; learn each worker's RANK from its environment.

        A child seen between fork and exec still has its parent's environment (no RANK yet), so a child that is not a
        rank is looked at again on the next few refreshes rather than written off at first sight.
        """
        for proc in list(self.known.values()):
            try:
                children = proc.children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                if child.pid not in self.known:
                    self.known[child.pid] = child
                    self.unclassified[child.pid] = RANK_LOOKS
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

    def alive(self) -> list[psutil.Process]:
        found = []
        for proc in self.known.values():
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def pids(self) -> set[int]:
        return {p.pid for p in self.alive()}

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
        """SIGTERM the launcher's group (torchrun forwards it), then SIGKILL whatever is left; returns survivors."""
        self.refresh()
        _signal_group(self.root_pid, signal.SIGTERM)
        for proc in self.alive():
            if proc.pid != self.root_pid:
                _signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.1)
            self.refresh()
        for proc in self.alive():
            _signal(proc, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.05)
        return sorted(p.pid for p in self.alive())


def _is_worker(proc: psutil.Process, known: dict[int, psutil.Process]) -> bool:
    """A torchrun worker, not a DataLoader child that inherited RANK from it."""
    try:
        parent = proc.ppid()
    except psutil.Error:
        return False
    return parent not in known or "RANK" not in read_environ(parent)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(os.getpgid(pid), sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except psutil.Error:
        pass
