"""GPU inventory through the pynvml API (real NVML or a recorded replay), and the CPU-only fallback."""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuwizard.gpus.nvml import (
    GPU_IS_LOST,
    NVLINK_MAX_LINKS,
    P2P_CAPS_INDEX_READ,
    DeviceLost,
    NvmlUnavailable,
    open_nvml,
)
from gpuwizard.gpus.replay import replay_module_from_env

TOPOLOGY_NAMES = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
P2P_STATUS = {
    0: "OK",
    1: "chipset not supported",
    2: "GPU not supported",
    3: "IOH topology not supported",
    4: "disabled by regkey",
    5: "not supported",
    6: "unknown",
}


@dataclass
class GpuProcess:
    pid: int
    used_mb: float | None
    user: str | None = None
    command: str | None = None


@dataclass
class GpuInfo:
    """One physical GPU; None means the driver does not report that field."""

    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    cuda_index: int | None = None
    memory_total_mb: float | None = None
    memory_used_mb: float | None = None
    memory_free_mb: float | None = None
    utilization_gpu: float | None = None
    utilization_memory: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    clock_sm_mhz: float | None = None
    clock_mem_mhz: float | None = None
    compute_capability: str | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    persistence_mode: bool | None = None
    mig_mode: bool | None = None
    ecc_uncorrected: int | None = None
    processes: list[GpuProcess] = field(default_factory=list)
    error: str | None = None


@dataclass
class Link:
    """How two GPUs talk: NVLink count, or the PCIe topology level, and P2P read status."""

    a: int
    b: int
    topology: str | None
    nvlinks: int
    p2p_read: str | None

    @property
    def label(self) -> str:
        return f"NV{self.nvlinks}" if self.nvlinks else (self.topology or "?")


@dataclass
class CpuInfo:
    model: str
    cores_logical: int
    cores_physical: int | None
    memory_total_gb: float
    memory_available_gb: float


@dataclass
class Inventory:
    gpus: list[GpuInfo]
    links: list[Link]
    driver_version: str | None = None
    cuda_version: str | None = None
    cuda_visible_devices: str | None = None
    message: str | None = None

    @functools.cached_property
    def cpu(self) -> CpuInfo:
        """Read on first use: planning needs only the GPUs."""
        return cpu_info()

    @property
    def has_gpus(self) -> bool:
        return bool(self.gpus)

    def visible(self) -> list[GpuInfo]:
        """The GPUs a CUDA program here would see, in CUDA order."""
        shown = [g for g in self.gpus if g.cuda_index is not None]
        return sorted(shown, key=lambda g: g.cuda_index or 0)

    def link(self, a: int, b: int) -> Link | None:
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        return None

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"cpu": asdict(self.cpu)}


def cpu_info() -> CpuInfo:
    import psutil

    memory = psutil.virtual_memory()
    return CpuInfo(
        model=_cpu_model(),
        cores_logical=psutil.cpu_count(logical=True) or os.cpu_count() or 1,
        cores_physical=psutil.cpu_count(logical=False),
        memory_total_gb=round(memory.total / 2**30, 1),
        memory_available_gb=round(memory.available / 2**30, 1),
    )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class NvmlReader:
    """Reads inventory and samples through a pynvml-shaped module; every field is optional."""

    def __init__(self, nv: Any):
        self.nv = nv
        self.handles = [self.nv.nvmlDeviceGetHandleByIndex(i) for i in range(self.nv.nvmlDeviceGetCount())]

    def query(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call an NVML function; NOT_SUPPORTED and other per-field errors read as None."""
        try:
            value = fn(*args)
        except self.nv.NVMLError:
            return None
        return value.decode() if isinstance(value, bytes) else value

    def device(self, index: int, cuda_order: dict[str, int]) -> GpuInfo:
        nv, h = self.nv, self.handles[index]
        info = GpuInfo(index=index)
        try:
            info.name = _text(nv.nvmlDeviceGetName(h))
            info.uuid = _text(nv.nvmlDeviceGetUUID(h))
        except nv.NVMLError as exc:
            info.error = (
                "GPU is lost (fell off the bus)" if getattr(exc, "value", None) == GPU_IS_LOST else f"unreadable: {exc}"
            )
            return info
        pci = self.query(nv.nvmlDeviceGetPciInfo, h)
        info.bus_id = _text(pci.busId) if pci is not None else None
        info.cuda_index = cuda_order.get(info.uuid or "", cuda_order.get(str(index)))
        try:
            self.fill_sample(info, h)
        except DeviceLost:
            info.error = "GPU is lost (fell off the bus)"
            return info
        cc = self.query(nv.nvmlDeviceGetCudaComputeCapability, h)
        info.compute_capability = f"{cc[0]}.{cc[1]}" if cc else None
        info.pcie_gen = self.query(nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
        info.pcie_width = self.query(nv.nvmlDeviceGetCurrPcieLinkWidth, h)
        info.pcie_max_gen = self.query(nv.nvmlDeviceGetMaxPcieLinkGeneration, h)
        info.pcie_max_width = self.query(nv.nvmlDeviceGetMaxPcieLinkWidth, h)
        persistence = self.query(nv.nvmlDeviceGetPersistenceMode, h)
        info.persistence_mode = None if persistence is None else bool(persistence)
        mig = self.query(nv.nvmlDeviceGetMigMode, h)
        info.mig_mode = None if mig is None else bool(mig[0])
        info.ecc_uncorrected = self.query(nv.nvmlDeviceGetTotalEccErrors, h, 1, 0)
        info.processes = self.processes(h)
        return info

    def fill_sample(self, info: GpuInfo, h: Any) -> None:
        """The fields that change over time; raises DeviceLost when the GPU is gone."""
        nv = self.nv
        try:
            memory = nv.nvmlDeviceGetMemoryInfo(h)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == GPU_IS_LOST:
                raise DeviceLost from None
            memory = None
        if memory is not None:
            info.memory_total_mb = memory.total / 2**20
            info.memory_used_mb = memory.used / 2**20
            info.memory_free_mb = memory.free / 2**20
        util = self.query(nv.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            info.utilization_gpu, info.utilization_memory = float(util.gpu), float(util.memory)
        info.temperature_c = self.query(nv.nvmlDeviceGetTemperature, h, 0)
        power = self.query(nv.nvmlDeviceGetPowerUsage, h)
        info.power_w = power / 1000 if power is not None else None
        limit = self.query(nv.nvmlDeviceGetEnforcedPowerLimit, h)
        info.power_limit_w = limit / 1000 if limit is not None else None
        info.clock_sm_mhz = self.query(nv.nvmlDeviceGetClockInfo, h, 1)
        info.clock_mem_mhz = self.query(nv.nvmlDeviceGetClockInfo, h, 2)

    def processes(self, h: Any) -> list[GpuProcess]:
        nv = self.nv
        found = self.query(nv.nvmlDeviceGetComputeRunningProcesses, h)
        if found is None and hasattr(nv, "nvmlDeviceGetComputeRunningProcesses_v2"):
            found = self.query(nv.nvmlDeviceGetComputeRunningProcesses_v2, h)
        result = []
        for proc in found or []:
            used = getattr(proc, "usedGpuMemory", None)
            used_mb = used / 2**20 if isinstance(used, int) and used < 2**63 else None
            result.append(describe_process(proc.pid, used_mb))
        return result

    def links(self, gpus: list[GpuInfo]) -> list[Link]:
        """Pairwise topology: direct NVLinks by remote bus id, NVSwitch links, else the PCIe level."""
        nv = self.nv
        by_bus = {g.bus_id.lower(): g.index for g in gpus if g.bus_id}
        direct: dict[tuple[int, int], int] = {}
        to_switch: dict[int, int] = {}
        for g in gpus:
            if g.error:
                continue
            h = self.handles[g.index]
            for link in range(NVLINK_MAX_LINKS):
                if self.query(nv.nvmlDeviceGetNvLinkState, h, link) != 1:
                    continue
                remote = self.query(nv.nvmlDeviceGetNvLinkRemotePciInfo_v2, h, link)
                other = by_bus.get(_text(remote.busId).lower()) if remote is not None else None
                if other is None:
                    to_switch[g.index] = to_switch.get(g.index, 0) + 1
                elif other != g.index:
                    key = (min(g.index, other), max(g.index, other))
                    direct[key] = direct.get(key, 0) + 1
        result = []
        for i, a in enumerate(gpus):
            for b in gpus[i + 1 :]:
                if a.error or b.error:
                    continue
                ha, hb = self.handles[a.index], self.handles[b.index]
                level = self.query(nv.nvmlDeviceGetTopologyCommonAncestor, ha, hb)
                p2p = self.query(nv.nvmlDeviceGetP2PStatus, ha, hb, P2P_CAPS_INDEX_READ)
                count = (direct.get((a.index, b.index), 0) + 1) // 2  # each link is reported from both ends
                if not count and a.index in to_switch and b.index in to_switch:
                    count = min(to_switch[a.index], to_switch[b.index])
                topology = TOPOLOGY_NAMES.get(level, str(level)) if level is not None else None
                result.append(Link(a.index, b.index, topology, count, P2P_STATUS.get(p2p) if p2p is not None else None))
        return result

    def inventory(self) -> Inventory:
        nv = self.nv
        driver = self.query(nv.nvmlSystemGetDriverVersion)
        cuda = self.query(nv.nvmlSystemGetCudaDriverVersion_v2) or self.query(nv.nvmlSystemGetCudaDriverVersion)
        visible_env = os.environ.get("CUDA_VISIBLE_DEVICES")
        uuids: list[str | None] = []
        for h in self.handles:
            try:
                uuids.append(_text(nv.nvmlDeviceGetUUID(h)))
            except nv.NVMLError:
                uuids.append(None)
        order = cuda_order(visible_env, uuids)
        gpus = [self.device(i, order) for i in range(len(self.handles))]
        return Inventory(
            gpus, self.links(gpus), driver, f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None, visible_env
        )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_order(visible: str | None, uuids: list[str | None]) -> dict[str, int]:
    """Map NVML devices (by UUID, or index as str) to the CUDA index a program would use."""
    if visible is None:
        return {str(i): i for i in range(len(uuids))} | {u: i for i, u in enumerate(uuids) if u}
    order: dict[str, int] = {}
    for cuda_index, token in enumerate(t.strip() for t in visible.split(",")):
        if not token:
            break
        if token.isdigit():
            nvml_index = int(token)
            if nvml_index >= len(uuids):
                break
        else:
            matches = [
                i
                for i, u in enumerate(uuids)
                if u and u.startswith(token if token.startswith("GPU-") else f"GPU-{token}")
            ]
            if len(matches) != 1:
                break
            nvml_index = matches[0]
        order[str(nvml_index)] = cuda_index
        uuid = uuids[nvml_index]
        if uuid:
            order[uuid] = cuda_index
    return order


_user_cache: dict[int, tuple[str | None, str | None]] = {}


def describe_process(pid: int, used_mb: float | None) -> GpuProcess:
    """Who runs a GPU process (psutil); processes we cannot inspect keep their pid only."""
    if pid not in _user_cache:
        import psutil

        try:
            proc = psutil.Process(pid)
            _user_cache[pid] = (proc.username(), " ".join(proc.cmdline())[:200] or proc.name())
        except (psutil.Error, OSError):
            _user_cache[pid] = (None, None)
    user, command = _user_cache[pid]
    return GpuProcess(pid, used_mb, user, command)


def read_inventory(module: Any | None = None) -> Inventory:
    """The full inventory; never raises: no driver gives an empty GPU list and a message."""
    try:
        nv = open_nvml(module or replay_module_from_env())
    except NvmlUnavailable as exc:
        return Inventory([], [], message=str(exc))
    try:
        return NvmlReader(nv).inventory()
    except Exception as exc:
        return Inventory(
            [],
            [],
            message=f"NVML failed while reading the GPUs ({exc}): CPU only; the demo and CPU dry runs still work",
        )
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass
