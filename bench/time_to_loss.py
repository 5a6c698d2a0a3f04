"""Steps to the same loss at batch B and 4B on the demo's noise task (SGD on linear regression, demo/noise.py),
against McCandlish's S = S_min (1 + B_noise / B) with B_noise measured by the gauge at the target (the weights held
there, 1 process, accumulation 4). Each configuration is the demo's own training loop (gpuwizard.demo.train, one
process, a checkpoint every step, so |w - w*|^2 is read exactly, not from a noisy loss), its steps to the target the
median over seeds. The prediction assumes each batch trains at its best learning rate, so each batch's lr is the best
of a grid; the preset's rule (linear_lr: 4x the lr at 4B) is shown beside it.
`python bench/time_to_loss.py [--seeds N]`."""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE, estimate, read_gauge
from gpuwizard.demo import train
from gpuwizard.demo.noise import NoiseRegression, closed_form
from gpuwizard.gauge.gwgauge import ACCUM_VAR, FILE_VAR, GLOBAL_BATCH_VAR, RANK_BATCH_VAR
from gpuwizard.runner.launch.gauge_env import GAUGE_DIR

DIM, SIGMA, START = 4, 0.1, 1.0
"""d, the label noise and |w - w*| at the start: B_simple grows from 5.04 there to 21 at the target."""
TARGET = 0.05
"""|w - w*| to reach (|w - w*|^2 = 0.0025)."""
LRS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
MAX_STEPS = 120


def steps_to_target(base: Path, batch: int, lr: float, seed: int) -> int | None:
    """One demo run; the first step whose weights are within TARGET of w* (None: never within MAX_STEPS)."""
    out = base / f"b{batch}-lr{lr}-s{seed}"
    argv = ["--task=noise", f"--noise-dim={DIM}", f"--noise-sigma={SIGMA}", f"--noise-offset={START}"]
    argv += [f"--steps={MAX_STEPS}", f"--batch-size={batch}", f"--lr={lr}", f"--seed={seed}", "--save-every=1"]
    argv += [f"--output-dir={out}", f"--dataset-root={base / 'dataset'}", f"--log-every={MAX_STEPS}"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        train.main(argv)
    w_star = NoiseRegression(DIM, START).w_star
    for step in range(1, MAX_STEPS + 1):
        state = torch.load(out / "checkpoints" / f"{step:06d}" / "model.pt", weights_only=True)
        distance = float((state["model"]["w"] - w_star).norm())
        if not math.isfinite(distance) or distance > 1e3:
            return None
        if distance <= TARGET:
            return step
    return None


def median_steps(base: Path, batch: int, lr: float, seeds: int) -> float | None:
    found = [steps_to_target(base, batch, lr, s) for s in range(seeds)]
    if sum(f is None for f in found) * 2 > len(found):
        return None
    return statistics.median(f if f is not None else math.inf for f in found)


def gauged_noise(base: Path) -> tuple[float, float | None, float | None]:
    """B_simple measured by the gauge with the weights held at the target (1 process, accumulation 4 x 64)."""
    out = base / "gauged"
    out.mkdir()
    env = {**os.environ, FILE_VAR: str(out / GAUGE_FILE), ACCUM_VAR: "4", RANK_BATCH_VAR: "256"}
    env |= {GLOBAL_BATCH_VAR: "256", "PYTHONPATH": str(GAUGE_DIR), "CUDA_VISIBLE_DEVICES": ""}
    argv = [sys.executable, "-m", "gpuwizard.demo.train", "--task=noise", "--noise-hold", f"--noise-dim={DIM}"]
    argv += [f"--noise-sigma={SIGMA}", f"--noise-offset={TARGET}", "--steps=1500", "--batch-size=64", "--grad-accum=4"]
    argv += ["--log-every=500", f"--output-dir={out}", f"--dataset-root={base / 'dataset'}", "--lr=0.01"]
    subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    found = estimate(read_gauge(out / GAUGE_FILE).steps)
    assert found is not None and found.b_simple is not None, "the gauge measured nothing"
    return found.b_simple, found.low, found.high


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--batches", default="4,8")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gpuwizard-bench-ttl-"))
    b_noise, low, high = gauged_noise(base)
    truth = closed_form(DIM, SIGMA, TARGET)
    print(f"noise task d={DIM} sigma={SIGMA} from |w - w*| = {START} to {TARGET}: B_noise at the target {b_noise:.3g}")
    print(f"  (gauge, 90% interval {low:.3g}-{high:.3g}; closed form {truth:.3g}); {args.seeds} seeds per cell")
    for batch in (int(b) for b in args.batches.split(",")):
        best = {}
        for size in (batch, 4 * batch):
            cells = {lr: median_steps(base, size, lr, args.seeds) for lr in LRS}
            usable = {lr: s for lr, s in cells.items() if s is not None and math.isfinite(s)}
            lr = min(usable, key=lambda k: usable[k])
            best[size] = (lr, usable[lr])
            shown = ", ".join(f"{k:g}:{'-' if v is None else f'{v:g}'}" for k, v in cells.items())
            print(f"  batch {size:>3}: median steps per lr {shown}")
        (lr_b, s_b), (lr_4b, s_4b) = best[batch], best[4 * batch]
        measured = s_4b / s_b
        predicted = (1 + b_noise / (4 * batch)) / (1 + b_noise / batch)
        ends = sorted((1 + b / (4 * batch)) / (1 + b / batch) for b in (low or b_noise, high or b_noise))
        rule = median_steps(base, 4 * batch, 4 * lr_b, args.seeds)
        rule_text = "diverges" if rule is None or not math.isfinite(rule) else f"{rule:g} steps ({rule / s_b:.2f}x)"
        print(
            f"batch {batch} -> {4 * batch}: steps {s_b:g} (best lr {lr_b:g}) -> {s_4b:g} (best lr {lr_4b:g}): "
            f"measured {measured:.2f}x, predicted {predicted:.2f}x ({ends[0]:.2f}-{ends[1]:.2f}), "
            f"off by {measured / predicted - 1:+.0%}; linear_lr rule (lr {4 * lr_b:g} at {4 * batch}): {rule_text}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
