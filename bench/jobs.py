"""Demo presets for the job benchmarks, written into an isolated config folder."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from common import PYTHON, ROOT

DEMO_STEP = re.compile(r"\[demo\] step (\d+)/\d+ .* samples/s=([\d.]+)")


def write_preset(
    env: dict[str, str],
    name: str,
    gpus: int = 2,
    steps: int = 600,
    batch: int = 8,
    options: str = "",
    hang_timeout: float = 60,
    first_step_timeout: float | None = None,
) -> str:
    folder = Path(env["GPUWIZARD_CONFIG_DIR"]) / "presets"
    folder.mkdir(parents=True, exist_ok=True)
    data = Path(env["GPUWIZARD_DATA_DIR"])
    monitor = (
        f"{{hang_timeout_s: {hang_timeout}"
        + (f", first_step_timeout_s: {first_step_timeout}" if first_step_timeout else "")
        + "}"
    )
    (folder / f"{name}.yaml").write_text(f"""\
version: 1
name: {name}
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {data}/dataset}}
hardware: {{gpus: {gpus}, device: cpu}}
batch: {{size: {batch}}}
optim: {{lr: 1.0e-3, steps: {steps}}}
mixed_precision: "no"
output_dir: null
trainer_options:
  log_every: 50
{options}
monitor: {monitor}
""")
    return name


def gw(env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-m", "gpuwizard", *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def newest_run(env: dict[str, str]) -> Path:
    runs = sorted((Path(env["GPUWIZARD_DATA_DIR"]) / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    return runs[-1]


def mean_samples_per_s(log_text: str) -> float:
    """Mean of the demo's windowed samples/s, leaving out the first (start-up) window."""
    rates = [float(m.group(2)) for m in DEMO_STEP.finditer(log_text)][1:]
    return sum(rates) / len(rates)


def events(run: Path) -> list[Any]:
    """The run's events, read through the typed records."""
    from gpuwizard.runs.rundir import RunDir

    found, _ = RunDir(run).events()
    return found
