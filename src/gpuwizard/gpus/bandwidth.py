"""What `gpuwizard gpus --bandwidth` measured: the all-reduce bus bandwidth of this host's devices, per message size,
kept in the data folder per host and device set so the probe's throughput model can use it later.

NCCL-tests' convention (nccl-tests doc/PERFORMANCE.md): algbw = bytes / time, busbw = algbw x 2 (n - 1) / n, the
share of the data each rank sends and receives in a ring all-reduce, so busbw can be compared across rank counts and
with the link's own speed. The time of one size is the median of its timed iterations (each the slowest rank's)."""

from __future__ import annotations

import hashlib
import re
import socket
import statistics
import time
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from gpuwizard.core import paths
from gpuwizard.runs.records import Count, Record, RecordError, Seconds, read_record

MIB = 1 << 20
CPU_SIZES_MIB = (1, 4, 16, 64)
"""gloo over loopback copies through the CPU: 64 MiB already takes ~0.1 s an iteration on two cores."""
GPU_SIZES_MIB = (1, 4, 16, 64, 256)
"""NCCL reaches its bus bandwidth only from some hundred MiB (NCCL-tests sweeps to GiBs)."""
WARMUP = 5
ITERATIONS = 20

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A time or a bandwidth read back: finite and above zero (a figure divides by it)."""


def bus_factor(ranks: int) -> float:
    """2 (n - 1) / n: the share of the message each rank moves in a ring all-reduce (0 for one rank)."""
    return 2 * (ranks - 1) / ranks


def algbw(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s: the message over the time of its all-reduce."""
    return size_bytes / seconds


def busbw(size_bytes: int, seconds: float, ranks: int) -> float:
    """Bus bandwidth in bytes/s (NCCL-tests): algbw x 2 (n - 1) / n."""
    return algbw(size_bytes, seconds) * bus_factor(ranks)


class SizeResult(Record):
    """One message size: the median of its timed iterations, with the fastest and slowest of them."""

    size_bytes: Count
    iterations: Count
    time_s: Positive
    """The median iteration (each iteration's time is its slowest rank's)."""
    time_min_s: Positive
    time_max_s: Positive
    algbw: Positive
    """bytes/s at the median time."""
    busbw: Positive
    """bytes/s at the median time, x 2 (n - 1) / n."""
    busbw_low: Positive
    """At the slowest iteration."""
    busbw_high: Positive
    """At the fastest iteration."""


def size_result(size_bytes: int, times: list[float], ranks: int) -> SizeResult:
    """A size's figures from its iterations' times (seconds, each the slowest rank's)."""
    if not times or min(times) <= 0:
        raise ValueError(f"no positive iteration time for {size_bytes} bytes: {times}")
    median, fast, slow = statistics.median(times), min(times), max(times)
    return SizeResult(
        size_bytes=size_bytes,
        iterations=len(times),
        time_s=median,
        time_min_s=fast,
        time_max_s=slow,
        algbw=algbw(size_bytes, median),
        busbw=busbw(size_bytes, median, ranks),
        busbw_low=busbw(size_bytes, slow, ranks),
        busbw_high=busbw(size_bytes, fast, ranks),
    )


class BandwidthRecord(Record):
    """bandwidth/<host>-<device set>.json: one measurement of the all-reduce over a set of devices."""

    host: str
    device: Literal["cpu", "cuda"]
    backend: Literal["gloo", "nccl"]
    ranks: Annotated[int, Field(ge=2, le=4096)]
    devices: list[str]
    """What the device set is: the GPUs' UUIDs (or CUDA indices where NVML gave none), or ["cpu"]."""
    hardware: str
    dtype: str = "float32"
    warmup: Annotated[int, Field(ge=0, le=10_000)]
    created: Seconds
    seconds: Seconds
    """Wall time of the whole measurement, processes' start included."""
    sizes: list[SizeResult] = Field(min_length=1)

    @property
    def largest(self) -> SizeResult:
        """The figure used: busbw at the largest size (the closest to a gradient's all-reduce of a real model)."""
        return max(self.sizes, key=lambda s: s.size_bytes)

    def busbw_at(self, size_bytes: int) -> tuple[float, float, float]:
        """(busbw, at the slowest, at the fastest iteration) for a message of this size: its time interpolated
        linearly between the two sizes measured around it (t = latency + bytes / bandwidth between them); below
        the smallest its time (latency bounds it), above the largest its busbw."""
        sizes = sorted(self.sizes, key=lambda s: s.size_bytes)
        top = sizes[-1]
        if size_bytes >= top.size_bytes:
            return top.busbw, top.busbw_low, top.busbw_high
        upper = next(i for i, s in enumerate(sizes) if s.size_bytes >= size_bytes)
        a, b = sizes[max(0, upper - 1)], sizes[upper]
        share = 0.0 if b.size_bytes == a.size_bytes else (size_bytes - a.size_bytes) / (b.size_bytes - a.size_bytes)
        share = max(0.0, share)
        median, slowest, fastest = (
            x + share * (y - x)
            for x, y in ((a.time_s, b.time_s), (a.time_max_s, b.time_max_s), (a.time_min_s, b.time_min_s))
        )
        return (
            busbw(size_bytes, median, self.ranks),
            busbw(size_bytes, slowest, self.ranks),
            busbw(size_bytes, fastest, self.ranks),
        )

    def figure_text(self) -> str:
        """ "busbw 1.92 GB/s at 64 MiB (1.51-2.10 over 20 iterations)"."""
        top = self.largest
        return (
            f"busbw {gbps(top.busbw)} GB/s at {size_text(top.size_bytes)} "
            f"({gbps(top.busbw_low)}-{gbps(top.busbw_high)} over {top.iterations} iterations)"
        )

    def source_text(self) -> str:
        """Where and when: "2 gloo processes on CPU, 2 cores, measured 2026-12-01 11:30"."""
        unit = "GPUs" if self.device == "cuda" else "processes"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.created))
        return f"{self.ranks} {self.backend} {unit} on {self.hardware}, measured {when}"


def gbps(value: float) -> str:
    """bytes/s as GB/s (10^9, as NCCL-tests prints it), three significant figures ("1.00", "12.3", "123")."""
    value /= 1e9
    return f"{value:.0f}" if value >= 99.95 else f"{value:#.3g}"


def size_text(size_bytes: int) -> str:
    """ "64 MiB", "1.14 MiB", "256 KiB", "16 B"."""
    if size_bytes >= MIB:
        return f"{size_bytes / MIB:.3g} MiB"
    return f"{size_bytes / 1024:.3g} KiB" if size_bytes >= 1024 else f"{size_bytes} B"


def bandwidth_dir() -> Path:
    """Machine-wide measurements live beside the runs and probes, in the user's data folder."""
    return paths.data_dir() / "bandwidth"


def host_name() -> str:
    return socket.gethostname() or "localhost"


def device_key(device: str, devices: list[str]) -> str:
    """A file-name-safe key of a device set: "cpu", or "cuda-" and a digest of the GPUs' UUIDs in order."""
    if device == "cpu":
        return "cpu"
    return "cuda-" + hashlib.sha256(",".join(devices).encode()).hexdigest()[:12]


def record_path(host: str, device: str, devices: list[str]) -> Path:
    safe_host = re.sub(r"[^A-Za-z0-9._-]", "_", host)[:64] or "host"
    return bandwidth_dir() / f"{safe_host}-{device_key(device, devices)}.json"


def save(record: BandwidthRecord) -> Path:
    """The record written whole (atomically) over the previous one of this host and device set."""
    from gpuwizard.core.yamlio import atomic_write

    path = record_path(record.host, record.device, record.devices)
    atomic_write(path, record.to_json_text())
    return path


def find(
    device: str, devices: list[str] | None = None, host: str | None = None, hardware: str | None = None
) -> BandwidthRecord | None:
    """This host's measurement of that device set, or, without a set, its newest of that kind of device, one on
    `hardware` (as the probe names it) first (None where none was measured or the file cannot be read)."""
    host = host or host_name()
    if devices is not None:
        candidates = [record_path(host, device, devices)]
    else:
        folder = bandwidth_dir()
        candidates = sorted(folder.glob("*.json")) if folder.is_dir() else []
    found = []
    for path in candidates:
        try:
            record = read_record(path, BandwidthRecord)
        except RecordError:
            continue
        if record.host == host and record.device == device and record.sizes:
            found.append(record)
    return max(found, key=lambda r: (r.hardware == hardware, r.created)) if found else None
