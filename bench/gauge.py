"""The gauge (monitor.gauge): the demo's samples/s with and without it on 2 gloo processes, alternated to cancel
drift, and its B_simple on the known-noise task against the closed form. `python bench/gauge.py [--pairs N]`."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE, estimate, read_gauge
from gpuwizard.demo.noise import closed_form
from gpuwizard.gauge.gwgauge import ACCUM_VAR, FILE_VAR, GLOBAL_BATCH_VAR, RANK_BATCH_VAR
from gpuwizard.runner.launch.gauge_env import GAUGE_DIR

TORCHRUN = str(Path(sys.executable).parent / "torchrun")


def job(base: Path, name: str, gauge: bool, batch: int, steps: int, *flags: str) -> tuple[float, Path]:
    """One demo job on 2 processes; the mean of its samples/s lines, and its folder."""
    out = base / name
    out.mkdir()
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "CUDA_VISIBLE_DEVICES": ""}
    if gauge:
        env |= {FILE_VAR: str(out / GAUGE_FILE), ACCUM_VAR: "1", RANK_BATCH_VAR: str(batch)}
        env |= {GLOBAL_BATCH_VAR: str(2 * batch), "PYTHONPATH": str(GAUGE_DIR)}
    argv = [TORCHRUN, "--standalone", "--nproc-per-node=2", "-m", "gpuwizard.demo.train", f"--steps={steps}"]
    argv += [f"--batch-size={batch}", f"--log-every={max(1, steps // 20)}", f"--dataset-root={base / 'dataset'}"]
    ran = subprocess.run([*argv, f"--output-dir={out}", *flags], env=env, capture_output=True, text=True, check=True)
    rates = [float(line.rsplit("samples/s=", 1)[1]) for line in ran.stdout.splitlines() if "samples/s=" in line]
    return statistics.mean(rates[1:] or rates), out


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.0f} (min {min(values):.0f}, max {max(values):.0f}, n={len(values)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=3)
    pairs = parser.parse_args().pairs
    base = Path(tempfile.mkdtemp(prefix="gpuwizard-bench-gauge-"))
    job(base, "warm", False, 8, 20)  # writes the demo dataset once
    plain, gauged = [], []
    for i in range(pairs):
        plain.append(job(base, f"plain-{i}", False, 8, 300)[0])
        gauged.append(job(base, f"gauged-{i}", True, 8, 300)[0])
    print(f"demo policy, 2 gloo processes, batch 8: samples/s without the gauge {spread(plain)}")
    print(f"                                       samples/s with the gauge    {spread(gauged)}")
    print(f"  ratio of medians: {statistics.median(gauged) / statistics.median(plain):.3f}")
    for sigma in (1.0, 10**0.5):
        flags = ("--task=noise", "--noise-hold", f"--noise-sigma={sigma!r}", "--noise-offset=0.25", "--noise-dim=4")
        _, out = job(base, f"noise-{sigma:g}", True, 512, 2000, *flags)
        found = estimate(read_gauge(out / GAUGE_FILE).steps)
        truth = closed_form(4, sigma, 0.25)
        line = found.line() if found else "no estimate"
        print(f"noise task sigma={sigma:.3g}: closed form {truth:.4g}; measured {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
