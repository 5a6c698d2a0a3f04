"""Polls GPUs off the UI thread, keeps a bounded history per device, attributes use to one run's processes."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from gpuwizard.gpus.inventory import GpuInfo, NvmlReader
from gpuwizard.gpus.nvml import DeviceLost, NvmlUnavailable, open_nvml
from gpuwizard.gpus.replay import replay_module_from_env
from gpuwizard.runs.records import GpuSample


class NvmlSampleSource:
    """Reads live samples from NVML (or a replay); a device that fails every call reads as lost."""

    def __init__(self, module: Any | None = None):
        self.nv = open_nvml(module or replay_module_from_env())
        self.reader = NvmlReader(self.nv)

    def sample(self, run_pids: set[int]) -> list[GpuSample]:
        now = time.time()
        samples = []
        for index, h in enumerate(self.reader.handles):
            info = GpuInfo(index=index)
            try:
                self.reader.fill_sample(info, h)
            except DeviceLost:
                samples.append(GpuSample(t=now, index=index, lost=True))
                continue
            sample = GpuSample(
                t=now,
                index=index,
                utilization=info.utilization_gpu,
                memory_used_mb=info.memory_used_mb,
                memory_total_mb=info.memory_total_mb,
                temperature_c=info.temperature_c,
                power_w=info.power_w,
                power_limit_w=info.power_limit_w,
            )
            if run_pids:
                procs = self.reader.processes(h)
                ours = [p for p in procs if p.pid in run_pids]
                sample.run_memory_mb = sum(p.used_mb or 0 for p in ours) if ours else 0.0
                if ours and len(ours) == len(procs):
                    sample.run_utilization = sample.utilization
                elif ours:
                    sample.run_utilization = None
                else:
                    sample.run_utilization = 0.0
            samples.append(sample)
        return samples

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass


def run_memory_held(source: NvmlSampleSource, pids: set[int], wait_s: float = 5.0) -> dict[int, float]:
    """GPU memory (MB per device) still held by a finished job's processes; the driver may take a moment to free it."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            held = {s.index: s.run_memory_mb for s in source.sample(pids) if s.run_memory_mb}
        except Exception:
            return {}
        if not held or time.monotonic() >= deadline:
            return held
        time.sleep(0.5)


def open_sample_source(module: Any | None = None) -> NvmlSampleSource | None:
    """A live source, or None where NVML is unavailable (CPU-only machines)."""
    try:
        return NvmlSampleSource(module)
    except NvmlUnavailable:
        return None
    except Exception:
        return None


class GpuSampler:
    """A daemon thread that samples at `interval` seconds and keeps `history` samples per device."""

    def __init__(
        self,
        source: NvmlSampleSource,
        interval: float = 1.0,
        history: int = 300,
        run_pids: Callable[[], set[int]] | None = None,
        on_sample: Callable[[list[GpuSample]], None] | None = None,
    ):
        self.source, self.interval = source, interval
        self.run_pids = run_pids or (lambda: set())
        self.on_sample = on_sample
        self.history: dict[int, deque[GpuSample]] = {}
        self._maxlen = history
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)

    def start(self) -> GpuSampler:
        self._thread.start()
        return self

    def stop(self, close: bool = True) -> None:
        """End the thread; `close=False` keeps the source open for a last read by the caller."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if close:
            self.source.close()

    def sample_once(self) -> list[GpuSample]:
        try:
            samples = self.source.sample(self.run_pids())
        except Exception:
            return []
        with self._lock:
            for s in samples:
                self.history.setdefault(s.index, deque(maxlen=self._maxlen)).append(s)
        if self.on_sample:
            self.on_sample(samples)
        return samples

    def latest(self) -> list[GpuSample]:
        with self._lock:
            return [h[-1] for h in self.history.values() if h]

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample_once()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
