"""What else the machine did while a probe's configuration ran: the CPU time of every process outside the probe, and
the threads outside it ready to run, so each measured window carries the background it was taken under (issue 35:
four probes of one job minutes apart on a loaded machine recommended three different answers). The second counts
where the first cannot: on a machine already saturated the others' CPU time stays near the cores left over however
many more threads want them."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import psutil

SAMPLE_EVERY_S = 0.5


def busy_cpu_s() -> float:
    """CPU seconds the whole machine spent busy since boot (idle and iowait left out; guest time is in user)."""
    cpu = psutil.cpu_times()
    return sum(getattr(cpu, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))


def runnable_now() -> int | None:
    """Threads running or ready to run on the whole machine now (/proc/loadavg's fourth field), None off Linux."""
    try:
        return int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return None


def runnable_threads(pid: int) -> int:
    """Threads of one process in state R (/proc/PID/task/*/stat): what it adds to the machine's runnable count."""
    count = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        except OSError:
            continue
        count += stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] == "R"
    return count


class BackgroundMeter:
    """Samples (time, machine busy CPU s, the probe's own CPU s, threads ready to run outside the probe) while one
    configuration runs: own is the probe itself, the run's supervisor and everything under it (torchrun, ranks)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self.waiting: list[tuple[float, int]] = []
        self.seen: dict[int, float] = {}
        self.gone_s = 0.0
        """CPU seconds of own processes that have exited: the own total never falls when a rank ends."""

    def sample(self, supervisor_pid: int | None) -> None:
        now = time.time()
        if self.samples and now - self.samples[-1][0] < SAMPLE_EVERY_S:
            return
        procs = [psutil.Process(os.getpid())]
        if supervisor_pid is not None:
            try:
                root = psutil.Process(supervisor_pid)
                procs += [root, *root.children(recursive=True)]
            except psutil.Error:
                pass
        current: dict[int, float] = {}
        for proc in procs:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            current[proc.pid] = times.user + times.system
        self.gone_s += sum(cpu for pid, cpu in self.seen.items() if pid not in current)
        self.seen = current
        self.samples.append((now, busy_cpu_s(), self.gone_s + sum(current.values())))
        machine = runnable_now()
        if machine is not None:  # less the reading thread itself, which is running as it reads
            own = sum(runnable_threads(pid) for pid in current)
            self.waiting.append((now, max(0, machine - max(own, 1))))

    def cores(self, start: float, end: float) -> float | None:
        """Cores kept busy outside the probe between two times (the samples nearest them); None: too few samples."""
        inside = [s for s in self.samples if start - SAMPLE_EVERY_S <= s[0] <= end + SAMPLE_EVERY_S]
        if len(inside) < 2 or inside[-1][0] - inside[0][0] <= 0:
            return None
        (t0, busy0, own0), (t1, busy1, own1) = inside[0], inside[-1]
        return max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)

    def demand(self, start: float, end: float) -> float | None:
        """Threads ready to run outside the probe, the mean of the samples between two times."""
        inside = [n for t, n in self.waiting if start <= t <= end]
        return statistics.fmean(inside) if inside else None

    def window(self, start: float | None, end: float | None) -> tuple[float | None, float | None, float | None]:
        """(cores busy outside the probe over the window, second half minus first half, threads ready to run
        outside it)."""
        if start is None or end is None or end <= start:
            return None, None, None
        middle = (start + end) / 2
        whole, first, second = self.cores(start, end), self.cores(start, middle), self.cores(middle, end)
        shift = (second - first) if first is not None and second is not None else None
        return whole, shift, self.demand(start, end)
