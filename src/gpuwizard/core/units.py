"""How quantities read: hours as minutes or hours, GPUs or processes as the unit of a run's workers, a learning
rate to three figures."""

from __future__ import annotations


def fmt_hours(hours: float | None) -> str:
    """To the nearest minute below an hour (1.05 min is "1 min", not "2 min"), else to a tenth of an hour."""
    if hours is None:
        return "?"
    minutes = hours * 60
    if minutes < 0.5:
        return "<1 min"
    if round(minutes) < 60:
        return f"{round(minutes)} min"
    return f"{hours:.1f} h"


def about(hours: float) -> str:
    """An approximate time in a sentence: "~5 min", "~1.5 h", but "<1 min" where "~<1 min" or "~0 min" would read."""
    text = fmt_hours(hours)
    return text if text.startswith("<") else f"~{text}"


def device_unit(device: str, n: int = 1) -> str:
    """What a run's workers are: GPUs on CUDA, processes on the CPU (a CPU run has no GPU to count)."""
    if device == "cuda":
        return "GPU" if n == 1 else "GPUs"
    return "process" if n == 1 else "processes"


def counted(n: int, device: str) -> str:
    """'1 GPU', '8 GPUs', '1 process', '2 processes'."""
    return f"{n} {device_unit(device, n)}"


def fmt_lr(value: float) -> str:
    return f"{value:.3g}"
