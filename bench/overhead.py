"""Monitor overhead: the demo's samples/s under gpuwizard (supervisor + headless follower) against the same
torchrun command run bare, alternating the two to cancel drift."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

from common import isolated_env, median, record
from jobs import gw, mean_samples_per_s, newest_run, write_preset


def bare(env: dict[str, str], name: str) -> float:
    spec = json.loads(gw(env, "preview", name, "--format", "json").stdout)
    full = dict(env)
    for var in spec["unset"]:
        full.pop(var, None)
    full.update(spec["env"])
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
        subprocess.run(
            spec["argv"], cwd=spec["workdir"], env=full, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=900
        )
        log.seek(0)
        return mean_samples_per_s(log.read())


def monitored(env: dict[str, str], name: str) -> float:
    result = gw(env, "run", name, "--headless")
    assert result.returncode == 0, result.stdout + result.stderr
    return mean_samples_per_s((newest_run(env) / "log.txt").read_text())


def run(quick: bool = False) -> None:
    print("3. Monitor overhead")
    env = isolated_env()
    name = write_preset(env, "overhead", gpus=2, steps=400 if quick else 1000)
    monitored(env, name)  # writes the demo dataset once
    pairs = 2 if quick else 4
    with_monitor, without = [], []
    for _ in range(pairs):
        without.append(bare(env, name))
        with_monitor.append(monitored(env, name))
    w, b = median(with_monitor), median(without)
    record(
        "overhead",
        f"demo samples/s with the monitor attached (median of {pairs})",
        w,
        "samples/s",
        b,
        ">= 0.98x",
        w / b >= 0.98,
    )
    os.environ.pop("GPUWIZARD_DATA_DIR", None)
