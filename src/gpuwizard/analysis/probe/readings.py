"""What a probe's run folder says beside its log: the busiest device's peak memory (NVML on GPUs, the ranks' resident
memory on CPU runs) and the other processes' use of its GPUs over a window."""

from __future__ import annotations

import statistics
from pathlib import Path

from gpuwizard.runs.records import GpuSample, RanksSample, RecordError, parse_lines, read_small_file
from gpuwizard.runs.rundir import RunDir


def gpu_others(run: RunDir, start: float | None, end: float | None) -> float | None:
    """Mean utilization (%) of the run's GPUs by other processes over a window, from NVML's samples (gpu.jsonl)."""
    samples, _ = parse_lines(text_of(run.gpu_file), GpuSample)
    busy = [
        max(0.0, s.utilization - s.run_utilization)
        for s in samples
        if start is not None and end is not None and start <= s.t <= end
        if s.utilization is not None and s.run_utilization is not None
    ]
    return statistics.fmean(busy) if busy else None


def peak_memory(run: RunDir, device: str) -> tuple[float | None, str]:
    """The busiest device's peak: NVML per-process memory on GPUs, a rank's resident memory on CPU runs."""
    if device == "cuda":
        samples, _ = parse_lines(text_of(run.gpu_file), GpuSample)
        used = [s.run_memory_mb for s in samples if s.run_memory_mb is not None]
        return (max(used) if used else None), "NVML, this run's processes per device"
    samples_r, _ = parse_lines(text_of(run.ranks_file), RanksSample)
    rss = [r.rss_mb for s in samples_r for r in s.ranks if r.rss_mb is not None]
    return (max(rss) if rss else None), "resident memory of the largest rank"


def text_of(path: Path) -> str:
    try:
        return read_small_file(path).decode("utf-8", errors="replace")
    except RecordError:
        return ""
