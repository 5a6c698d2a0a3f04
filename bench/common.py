"""Helpers shared by the benchmarks: timing, medians, isolated folders, a results table."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
RESULTS: list[dict[str, Any]] = []


def isolated_env(**extra: str) -> dict[str, str]:
    """Fresh config/data folders so benchmarks never touch the user's presets and runs."""
    base = Path(tempfile.mkdtemp(prefix="gpuwizard-bench-"))
    env = {**os.environ, "GPUWIZARD_CONFIG_DIR": str(base / "config"), "GPUWIZARD_DATA_DIR": str(base / "data")}
    env.pop("GPUWIZARD_NVML_REPLAY", None)
    env.update(extra)
    return env


def median(values: list[float]) -> float:
    return statistics.median(values)


def wall(cmd: list[str], env: dict[str, str] | None = None, repeat: int = 7) -> float:
    """Median wall time of a command, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return median(times)


def record(
    section: str,
    figure: str,
    value: float,
    unit: str,
    reference: float | None = None,
    goal: str = "",
    met: bool | None = None,
) -> None:
    """One row of the results table; `reference` makes the ratio."""
    ratio = value / reference if reference else None
    RESULTS.append(
        {
            "section": section,
            "figure": figure,
            "value": value,
            "unit": unit,
            "reference": reference,
            "ratio": ratio,
            "goal": goal,
            "met": met,
        }
    )
    ref = f"{reference:.4g}" if reference is not None else ""
    rat = f"{ratio:.3f}" if ratio is not None else ""
    status = {True: "ok", False: "MISSED", None: ""}[met]
    print(f"  {figure:<58} {value:>12.4g} {unit:<10} ref {ref:>10}  ratio {rat:>7}  {goal:<18} {status}", flush=True)


def machine() -> str:
    cpu = "?"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    system = f"{platform.system()} {platform.release()}"
    return f"{platform.node()}: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {system}"


def save(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"machine": machine(), "time": time.strftime("%Y-%m-%d %H:%M:%S"), "results": RESULTS}, indent=2)
    )
