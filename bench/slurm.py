"""From `gpuwizard run --slurm` to RUNNING seen, against sbatch's own latency on the same cluster.

Needs a cluster that answers (`make slurm-up`, SLURM_CONF); skipped otherwise. The reference is a bare
`sbatch` of a trivial script polled with squeue at 10 Hz; the figure is the same for gpuwizard, from the
command's start to its run folder saying running. The difference is what gpuwizard adds."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from common import PYTHON, isolated_env, median, record

PRESET = """\
version: 1
name: bench-slurm
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 1, device: cpu, nodes: 2}}
batch: {{size: 4}}
optim: {{steps: 20}}
mixed_precision: "no"
output_dir: {root}/out
trainer_options: {{log_every: 5}}
"""


def cluster_answers() -> bool:
    if shutil.which("sinfo") is None:
        return False
    return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=15, check=False).returncode == 0


def wait_idle(timeout: float = 300) -> None:
    """Every earlier job gone, so each measurement starts on free nodes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout:
        time.sleep(0.2)


def bare_sbatch(folder: Path) -> float:
    script = folder / "bare.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --output={folder}/bare-%j.out\nsrun sleep 2\n")
    start = time.perf_counter()
    job = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, check=True).stdout
    job_id = job.strip().split(";")[0]
    while True:
        state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout
        if state.strip() in ("RUNNING", "COMPLETING", ""):
            return time.perf_counter() - start
        time.sleep(0.1)


def gpuwizard_run(preset: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(
        [PYTHON, "-m", "gpuwizard", "run", str(preset), "--slurm", "--headless"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    runs = Path(env["GPUWIZARD_DATA_DIR"]) / "runs"
    try:
        while True:
            for status in runs.glob("*/status.json"):
                try:
                    if json.loads(status.read_text()).get("state") in ("running", "finished", "failed"):
                        return time.perf_counter() - start
                except (OSError, ValueError):
                    pass
            time.sleep(0.1)
    finally:
        proc.wait(timeout=300)


def run(quick: bool = False) -> None:
    print("8. SLURM submission")
    if not cluster_answers():
        print("  skipped: no SLURM cluster answers (make slurm-up, then export SLURM_CONF)")
        return
    from gpuwizard.demo.dataset import ensure_dataset

    folder = Path(tempfile.mkdtemp(prefix="gpuwizard-bench-slurm-"))
    ensure_dataset(folder / "dataset", 20)
    preset = folder / "bench-slurm.yaml"
    preset.write_text(PRESET.format(root=folder))
    bare, ours = [], []
    for _ in range(2 if quick else 5):
        wait_idle()
        bare.append(bare_sbatch(folder))
        wait_idle()
        ours.append(gpuwizard_run(preset, isolated_env()))
    reference, value = median(bare), median(ours)
    record(
        "slurm",
        "run --slurm: submit to RUNNING seen (sbatch + squeue as reference)",
        value,
        "s",
        reference,
        goal="< reference + 5 s",
        met=value < reference + 5.0,
    )
