"""A recorded machine replayed through the pynvml API, and the recorder that captures one.

The recording stores what each NVML call returned on a real machine (or the NVML error code it
raised); the replay hands back the same nvidia-ml-py structs and raises the same NVMLError
subclasses, so the inventory and sampler code paths are the real ones.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpuwizard.gpus.nvml import NVLINK_MAX_LINKS, P2P_CAPS_INDEX_READ, import_pynvml

ERROR_KEY = "nvml_error"


class ReplayNvml:
    """Duck-types the pynvml module for the calls gpuwizard makes."""

    def __init__(self, recording: dict[str, Any]):
        self.pynvml = import_pynvml()
        self.NVMLError = self.pynvml.NVMLError
        self.rec = recording
        self.devices = recording.get("devices", [])
        self.sample_calls = [0] * len(self.devices)
        self.lost = [False] * len(self.devices)

    @classmethod
    def from_file(cls, path: str | Path) -> ReplayNvml:
        return cls(json.loads(Path(path).read_text()))

    def _value(self, value: Any) -> Any:
        if isinstance(value, dict) and ERROR_KEY in value:
            raise self.NVMLError(value[ERROR_KEY])
        return value

    def _field(self, handle: int, key: str) -> Any:
        device = self.devices[handle]
        if self.lost[handle]:
            raise self.NVMLError(self.pynvml.NVML_ERROR_GPU_IS_LOST)
        timeline = device.get("timeline") or []
        tick = min(max(self.sample_calls[handle] - 1, 0), len(timeline) - 1)
        if timeline and key in timeline[tick]:
            return self._value(timeline[tick][key])
        if key not in device:
            raise self.NVMLError(self.pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._value(device[key])

    # system
    def nvmlInit(self) -> None:
        if self.rec.get("init_error") is not None:
            raise self.NVMLError(self.rec["init_error"])

    def nvmlShutdown(self) -> None:
        return None

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self._value(self.rec.get("driver_version", {ERROR_KEY: 3})))

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return int(self._value(self.rec.get("cuda_driver_version", {ERROR_KEY: 3})))

    nvmlSystemGetCudaDriverVersion = nvmlSystemGetCudaDriverVersion_v2

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index >= len(self.devices):
            raise self.NVMLError(self.pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    # identity and static facts
    def nvmlDeviceGetName(self, h: int) -> str:
        return str(self._field(h, "name"))

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return str(self._field(h, "uuid"))

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        info = self.pynvml.nvmlPciInfo_t()
        info.busId = self._field(h, "pci_bus_id").encode()
        return info

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        major, minor = self._field(h, "compute_capability")
        return major, minor

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return int(self._field(h, "pcie_gen"))

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return int(self._field(h, "pcie_width"))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return int(self._field(h, "pcie_max_gen"))

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return int(self._field(h, "pcie_max_width"))

    def nvmlDeviceGetPersistenceMode(self, h: int) -> int:
        return int(self._field(h, "persistence_mode"))

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        return list(self._field(h, "mig_mode"))

    def nvmlDeviceGetTotalEccErrors(self, h: int, error_type: int, counter_type: int) -> int:
        return int(self._field(h, "ecc_uncorrected"))

    # samples: each memory read starts the device's next sample (and the next timeline tick)
    def nvmlDeviceGetMemoryInfo(self, h: int, version: Any = None) -> Any:
        lost_after = self.devices[h].get("lost_after_samples")
        if lost_after is not None and self.sample_calls[h] >= lost_after:
            self.lost[h] = True
        self.sample_calls[h] += 1
        total, free, used = self._field(h, "memory")
        mem = self.pynvml.c_nvmlMemory_t()
        mem.total, mem.free, mem.used = total, free, used
        return mem

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        gpu, memory = self._field(h, "utilization")
        util = self.pynvml.c_nvmlUtilization_t()
        util.gpu, util.memory = gpu, memory
        return util

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return int(self._field(h, "temperature"))

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(self._field(h, "power_usage_mw"))

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return int(self._field(h, "power_limit_mw"))

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return int(self._field(h, {1: "clock_sm", 2: "clock_mem"}.get(clock, "clock_other")))

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        procs = []
        for pid, used in self._field(h, "processes"):
            info = self.pynvml.c_nvmlProcessInfo_v3_t()
            info.pid, info.usedGpuMemory = pid, 0 if used is None else used
            friendly = self.pynvml.nvmlStructToFriendlyObject(info)
            if used is None:  # WDDM and MIG report no per-process memory
                friendly.usedGpuMemory = None
            procs.append(friendly)
        return procs

    # topology
    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        return int(self._pair(a, b, "topology"))

    def nvmlDeviceGetP2PStatus(self, a: int, b: int, index: int) -> int:
        if not isinstance(index, int):
            raise TypeError("argument 3: wrong type")  # what ctypes raises for the (0,) tuple constant
        return int(self._pair(a, b, "p2p_read"))

    def _pair(self, a: int, b: int, key: str) -> Any:
        pair = self.rec.get("pairs", {}).get(f"{min(a, b)}-{max(a, b)}", {})
        if key not in pair:
            raise self.NVMLError(self.pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._value(pair[key])

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        links = self.devices[h].get("nvlinks", {})
        if str(link) not in links:
            raise self.NVMLError(
                self.pynvml.NVML_ERROR_NOT_SUPPORTED if not links else self.pynvml.NVML_ERROR_INVALID_ARGUMENT
            )
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, h: int, link: int) -> Any:
        info = self.pynvml.nvmlPciInfo_t()
        info.busId = self.devices[h]["nvlinks"][str(link)].encode()
        return info


def _capture(fn: Any, *args: Any) -> Any:
    """The JSON form of one NVML call: its value, or the error code it raised."""
    nv = import_pynvml()
    try:
        value = fn(*args)
    except nv.NVMLError as exc:
        return {ERROR_KEY: getattr(exc, "value", 999)}
    return value.decode() if isinstance(value, bytes) else value


def record_machine(nv: Any) -> dict[str, Any]:
    """Capture a real machine's NVML answers in the replay format (run by `gpuwizard gpus --record`)."""
    rec: dict[str, Any] = {
        "driver_version": _capture(nv.nvmlSystemGetDriverVersion),
        "cuda_driver_version": _capture(nv.nvmlSystemGetCudaDriverVersion_v2),
        "devices": [],
        "pairs": {},
    }
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    for h in handles:
        mem = _capture(nv.nvmlDeviceGetMemoryInfo, h)
        util = _capture(nv.nvmlDeviceGetUtilizationRates, h)
        procs = _capture(nv.nvmlDeviceGetComputeRunningProcesses, h)
        pci = _capture(nv.nvmlDeviceGetPciInfo, h)
        device = {
            "name": _capture(nv.nvmlDeviceGetName, h),
            "uuid": _capture(nv.nvmlDeviceGetUUID, h),
            "pci_bus_id": pci
            if isinstance(pci, dict)
            else (pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId),
            "memory": mem if isinstance(mem, dict) else [mem.total, mem.free, mem.used],
            "utilization": util if isinstance(util, dict) else [util.gpu, util.memory],
            "temperature": _capture(nv.nvmlDeviceGetTemperature, h, 0),
            "power_usage_mw": _capture(nv.nvmlDeviceGetPowerUsage, h),
            "power_limit_mw": _capture(nv.nvmlDeviceGetEnforcedPowerLimit, h),
            "clock_sm": _capture(nv.nvmlDeviceGetClockInfo, h, 1),
            "clock_mem": _capture(nv.nvmlDeviceGetClockInfo, h, 2),
            "compute_capability": _capture(nv.nvmlDeviceGetCudaComputeCapability, h),
            "pcie_gen": _capture(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
            "pcie_width": _capture(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
            "pcie_max_gen": _capture(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
            "pcie_max_width": _capture(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
            "persistence_mode": _capture(nv.nvmlDeviceGetPersistenceMode, h),
            "mig_mode": _capture(nv.nvmlDeviceGetMigMode, h),
            "ecc_uncorrected": _capture(nv.nvmlDeviceGetTotalEccErrors, h, 1, 0),
            "processes": procs if isinstance(procs, dict) else [[p.pid, p.usedGpuMemory] for p in procs],
            "nvlinks": {},
        }
        for link in range(NVLINK_MAX_LINKS):
            if _capture(nv.nvmlDeviceGetNvLinkState, h, link) == 1:
                remote = _capture(nv.nvmlDeviceGetNvLinkRemotePciInfo_v2, h, link)
                if not isinstance(remote, dict):
                    device["nvlinks"][str(link)] = (
                        remote.busId.decode() if isinstance(remote.busId, bytes) else remote.busId
                    )
        rec["devices"].append(device)
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            rec["pairs"][f"{i}-{j}"] = {
                "topology": _capture(nv.nvmlDeviceGetTopologyCommonAncestor, handles[i], handles[j]),
                "p2p_read": _capture(nv.nvmlDeviceGetP2PStatus, handles[i], handles[j], P2P_CAPS_INDEX_READ),
            }
    return rec


def replay_module_from_env() -> Any | None:
    """GPUWIZARD_NVML_REPLAY=recording.json swaps real NVML for a recorded machine (demos, tests)."""
    path = os.environ.get("GPUWIZARD_NVML_REPLAY")
    if not path:
        return None
    return ReplayNvml.from_file(path)
