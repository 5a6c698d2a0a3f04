"""What else the machine did while a probe's configuration ran: the CPU time of every process outside the probe, so
each measured window carries the background it was taken under (issue 35: four probes of one job minutes apart on a
loaded machine recommended three different answers)."""

from __future__ import annotations

import os
import time

import psutil

SAMPLE_EVERY_S = 0.5


def busy_cpu_s() -> float:
    """CPU seconds the whole machine spent busy since boot (idle and iowait left out; guest time is in user)."""
    cpu = psutil.cpu_times()
    return sum(getattr(cpu, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))


class BackgroundMeter:
    """Samples (time, machine busy CPU s, the probe's own CPU s) while one configuration runs: the probe itself, the
    run's supervisor and everything under it (torchrun, the ranks)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self.seen: dict[int, tuple[psutil.Process, float]] = {}
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
        current: dict[int, tuple[psutil.Process, float]] = {}
        for proc in procs:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            current[proc.pid] = (proc, times.user + times.system)
        self.gone_s += sum(cpu for pid, (_, cpu) in self.seen.items() if pid not in current)
        self.seen = current
        own = self.gone_s + sum(cpu for _, cpu in current.values())
        self.samples.append((now, busy_cpu_s(), own))

    def cores(self, start: float, end: float) -> float | None:
        """Cores kept busy outside the probe between two times (the samples nearest them); None: too few samples."""
        inside = [s for s in self.samples if start - SAMPLE_EVERY_S <= s[0] <= end + SAMPLE_EVERY_S]
        if len(inside) < 2 or inside[-1][0] - inside[0][0] <= 0:
            return None
        (t0, busy0, own0), (t1, busy1, own1) = inside[0], inside[-1]
        return max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)

    def window(self, start: float | None, end: float | None) -> tuple[float | None, float | None]:
        """(cores busy outside the probe over the window, second half minus first half): whether it held still."""
        if start is None or end is None or end <= start:
            return None, None
        middle = (start + end) / 2
        whole, first, second = self.cores(start, end), self.cores(start, middle), self.cores(middle, end)
        return whole, (second - first) if first is not None and second is not None else None
