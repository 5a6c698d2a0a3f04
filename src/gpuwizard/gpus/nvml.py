"""The one place pynvml is imported and NVML is started; a recorded replay stands in for it where no GPU exists."""

from __future__ import annotations

import sys
import warnings
from typing import Any

NO_DRIVER_LINE = "no NVIDIA driver found: CPU only; the demo and CPU dry runs still work"
P2P_CAPS_INDEX_READ = 0  # nvidia-ml-py 13.615.71 defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,): pass the int
NVLINK_MAX_LINKS = 18
NVML_FAILURE_TEXT = {
    9: "the NVIDIA kernel driver is not loaded",
    12: "the NVML library (libnvidia-ml.so.1) was not found",
    18: "the NVIDIA driver was upgraded without reloading the kernel module (reboot or reload nvidia)",
    4: "no permission to query NVML",
}


class NvmlUnavailable(Exception):
    """NVML cannot be used here; the message is what the user sees."""


class DeviceLost(Exception):
    """The GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)."""


GPU_IS_LOST = 15


def import_pynvml() -> Any:
    """The nvidia-ml-py module, imported quietly (the deprecated `pynvml` shim warns on import)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import pynvml
    return pynvml


def nvml_library_loads() -> bool:
    """The dlopen pynvml itself does outside Windows, so a machine without a driver never imports pynvml (~20 ms)."""
    if sys.platform.startswith("win"):
        return True  # pynvml searches System32 and Program Files itself
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def open_nvml(module: Any | None = None) -> Any:
    """Initialise NVML and return the module; raise NvmlUnavailable with a user-facing reason."""
    if module is None and not nvml_library_loads():
        raise NvmlUnavailable(NO_DRIVER_LINE)
    try:
        nv = module or import_pynvml()
    except ImportError:
        raise NvmlUnavailable("nvidia-ml-py is not installed: CPU only; the demo and CPU dry runs still work") from None
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        code = getattr(exc, "value", None)
        if code in (9, 12):
            raise NvmlUnavailable(NO_DRIVER_LINE) from None
        reason = NVML_FAILURE_TEXT.get(code, exc) if code is not None else exc
        raise NvmlUnavailable(
            f"NVML failed to start ({reason}): CPU only; the demo and CPU dry runs still work"
        ) from None
    except OSError as exc:
        raise NvmlUnavailable(f"{NO_DRIVER_LINE} ({exc})") from None
    return nv
