"""Does the probe's B_noise predict the critical batch off its own task (issue 35 item 5)? Two learning tasks that
are not the noise task (bench/tasks_critical.py: `spirals`, a classifier; `reach`, behaviour cloning of a scripted
controller), each trained by plain SGD.

The truth, the expensive way: steps to the task's target loss (its eval set's) at batches 4 to 256, several seeds,
each batch at its best lr of a grid (the median over seeds per lr), fitted to S = S_min (1 + B_crit / B) by least
squares in log S; B_crit's interval from a bootstrap over the seeds. The probe's figure: B_noise from the product's
own gauge and estimator (read_gauge, estimate: what gauge_figure reads) on the same task under torchrun (2 processes,
gloo, DDP, the gauge's sitecustomize first on PYTHONPATH), from the initial weights (what a probe reads today),
training on from a checkpoint at the target (what `probe --from-run` reads), and at that checkpoint with the weights
held (lr 0: the gauge against the exact B_simple, from per-sample gradients, off the noise task). Then the step
ratios at 2x and 4x a batch: predicted (1 + B_noise / kB) / (1 + B_noise / B) against measured, each batch at its
best lr, and at the smaller batch's lr (what a probe that keeps the preset's lr measures).
`python bench/critical_batch.py [--seeds 4] [--tasks spirals,reach] [--quick]`."""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpuwizard.analysis.probe.noise_estimate import NoiseScale
from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE, estimate, read_gauge
from gpuwizard.gauge.gwgauge import ACCUM_VAR, FILE_VAR, GLOBAL_BATCH_VAR, RANK_BATCH_VAR
from gpuwizard.runner.launch.gauge_env import GAUGE_DIR
from tasks_critical import TASKS, Task, exact_noise_scale, make_model, state_of, train_many

TORCHRUN = str(Path(sys.executable).parent / "torchrun")
HERE = Path(__file__).resolve().parent
BATCHES = (4, 8, 16, 32, 64, 128, 256)
LRS = {
    "spirals": (0.03, 0.06, 0.12, 0.25, 0.5, 1.0, 2.0, 4.0),
    "reach": (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28),
}
"""A factor 2 apart. The smallest batch tries them all; each next one from half the batch before's best lr to 4x
it, and the best lr of the batch a quarter its size (the step ratios at a fixed lr need it)."""
LIMIT = 20_000
"""Steps a copy may take to the target; one that has not reached it by then counts as never."""
PROBE_RANK_BATCH = 16
"""The probe's configuration: 2 processes x 16, so B_small 16 and B_big 32, at the best lr of batch 32."""
PROBE_STEPS = 200
REFERENCES = (8, 32)
"""The batches B whose step ratios at 2B and 4B are predicted and measured."""


@dataclass
class Truth:
    """Per batch: steps to the target per lr and seed (None: not reached); the fitted B_crit and its interval."""

    steps: dict[int, dict[float, list[float | None]]]

    def median(self, batch: int, lr: float, seeds: list[int] | None = None) -> float | None:
        """The median over seeds (these, with repeats, for the bootstrap); None where half or more never reached."""
        found = self.steps.get(batch, {}).get(lr)
        if found is None:
            return None
        picked = [found[s] for s in seeds] if seeds is not None else found
        if sum(f is None for f in picked) * 2 >= len(picked):
            return None
        return statistics.median(math.inf if f is None else f for f in picked)

    def best(self, batch: int, seeds: list[int] | None = None) -> tuple[float, float] | None:
        """(lr, steps) of the batch's best lr: the fewest median steps."""
        cells = [(lr, self.median(batch, lr, seeds)) for lr in self.steps.get(batch, {})]
        usable = [(lr, s) for lr, s in cells if s is not None and math.isfinite(s)]
        return min(usable, key=lambda c: c[1]) if usable else None


def fit(points: dict[int, float]) -> tuple[float, float]:
    """(S_min, B_crit) of S = S_min (1 + B_crit / B), least squares in log S: a search over log B_crit, S_min in
    closed form at each."""

    def cost(b_crit: float) -> tuple[float, float]:
        logs = [math.log(s) - math.log1p(b_crit / b) for b, s in points.items()]
        s_min = statistics.fmean(logs)
        return sum((v - s_min) ** 2 for v in logs), math.exp(s_min)

    grid = [10 ** (k / 100) for k in range(-200, 601)]
    b_crit = min(grid, key=lambda b: cost(b)[0])
    return cost(b_crit)[1], b_crit


def ground_truth(name: str, seeds: int, quick: bool) -> tuple[Truth, list[str]]:
    """Steps to the target per batch, lr and seed; the lines that say them as they were measured."""
    torch.set_num_threads(1)
    task, truth, said = TASKS[name], Truth({}), []
    for batch in BATCHES:
        started, cpu = time.monotonic(), time.process_time()
        before, quarter = truth.best(batch // 2) if batch // 2 in truth.steps else None, truth.best(batch // 4)
        lrs = [
            lr
            for lr in LRS[name]
            if before is None or before[0] / 2 <= lr <= 4 * before[0] or (quarter is not None and lr == quarter[0])
        ]
        found = train_many(task, batch, lrs, list(range(seeds)), LIMIT // (4 if quick else 1)).steps
        truth.steps[batch] = {lr: found[i * seeds : (i + 1) * seeds] for i, lr in enumerate(lrs)}
        cells = ", ".join(f"{lr:g}:{'-' if (m := truth.median(batch, lr)) is None else f'{m:.0f}'}" for lr in lrs)
        said.append(
            f"  {name} batch {batch:>3}: median steps per lr {cells} ({time.monotonic() - started:.0f} s, "
            f"{time.process_time() - cpu:.0f} s CPU)"
        )
    return truth, said


def fitted(truth: Truth, seeds: int, draws: int = 200) -> tuple[float, float, float, float]:
    """(S_min, B_crit, B_crit's 5th and 95th percentile over resampled seeds)."""
    points = {b: best[1] for b in BATCHES if (best := truth.best(b)) is not None}
    s_min, b_crit = fit(points)
    rng, drawn = random.Random(0), []
    for _ in range(draws):
        picks = [rng.randrange(seeds) for _ in range(seeds)]
        resampled = {b: best[1] for b in BATCHES if (best := truth.best(b, picks)) is not None}
        if len(resampled) >= 3:
            drawn.append(fit(resampled)[1])
    drawn.sort()
    return s_min, b_crit, drawn[int(0.05 * len(drawn))], drawn[int(0.95 * len(drawn)) - 1]


def gauged(base: Path, task: Task, lr: float, init: Path | None, name: str) -> NoiseScale | None:
    """B_noise as the probe reads it: the task under torchrun, 2 processes, DDP on gloo, gauged."""
    out = base / name
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    env |= {FILE_VAR: str(out / GAUGE_FILE), ACCUM_VAR: "1", RANK_BATCH_VAR: str(PROBE_RANK_BATCH)}
    env |= {GLOBAL_BATCH_VAR: str(2 * PROBE_RANK_BATCH), "PYTHONPATH": str(GAUGE_DIR)}
    argv = [TORCHRUN, "--standalone", "--nproc-per-node=2", str(HERE / "tasks_critical.py"), f"--task={task.name}"]
    argv += [f"--lr={lr!r}", f"--batch-size={PROBE_RANK_BATCH}", f"--steps={PROBE_STEPS}"]
    argv += [f"--init={init}"] if init is not None else []
    subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return estimate(read_gauge(out / GAUGE_FILE).steps)


def at_target(base: Path, task: Task, lr: float) -> Path:
    """A checkpoint of seed 0 trained at batch 32 and `lr` until its eval loss reached the target."""
    sweep = train_many(task, 2 * PROBE_RANK_BATCH, [lr], [0], LIMIT)
    path = base / f"{task.name}-at-target.pt"
    torch.save(state_of(task, sweep.reached[0]), path)
    return path


def ratio_text(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def predicted(b_noise: float, batch: int, k: int) -> float:
    return (1 + b_noise / (k * batch)) / (1 + b_noise / batch)


def report(task: Task, truth: Truth, seeds: int, figures: dict[str, tuple[NoiseScale | None, float]]) -> None:
    s_min, b_crit, low, high = fitted(truth, seeds)
    print(f"\n{task.name}: fitted B_crit {b_crit:.3g} (90% over seeds {low:.3g}-{high:.3g}), S_min {s_min:.3g} steps")
    print("| stage | B_noise, gauge (90% interval) | exact B_simple |")
    print("|---|---|---|")
    for stage, (found, exact) in figures.items():
        shown = found.line().removeprefix("B_simple ") if found is not None else "no estimate"
        print(f"| {stage} | {shown} | {exact:.3g} |")
    print("| B -> kB | measured, best lr each | measured, B's lr | fitted B_crit | " + " | ".join(figures) + " |")
    print("|---" * (4 + len(figures)) + "|")
    for batch in REFERENCES:
        best = truth.best(batch)
        if best is None:
            continue
        lr, steps = best
        for k in (2, 4):
            bigger = truth.best(k * batch)
            kept = truth.median(k * batch, lr)
            cells = [
                f"{batch} -> {k * batch}",
                ratio_text(bigger[1] / steps if bigger else None) + (f" (lr {bigger[0]:g})" if bigger else ""),
                ratio_text(kept / steps if kept is not None else None) + f" (lr {lr:g})",
                ratio_text(predicted(b_crit, batch, k)),
            ]
            for found, _ in figures.values():
                if found is None or found.b_simple is None:
                    cells.append("-")
                    continue
                ends = sorted(predicted(b, batch, k) for b in (found.low or 0.0, found.high or math.inf) if b != 0.0)
                span = f" ({ends[0]:.2f}-{ends[-1]:.2f})" if ends else ""
                cells.append(f"{predicted(found.b_simple, batch, k):.2f}{span}")
            print("| " + " | ".join(cells) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--tasks", default="spirals,reach")
    parser.add_argument("--quick", action="store_true", help="a quarter of the step limit")
    args = parser.parse_args()
    torch.set_num_threads(1)
    base = Path(tempfile.mkdtemp(prefix="gpuwizard-bench-critical-"))
    started, cpu, load = time.monotonic(), time.process_time(), [os.getloadavg()[0]]
    names = args.tasks.split(",")
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:  # 2 at most
        truths = list(pool.map(ground_truth, names, [args.seeds] * len(names), [args.quick] * len(names)))
    load.append(os.getloadavg()[0])
    print(f"ground truth in {time.monotonic() - started:.0f} s")
    for name, (truth, said) in zip(names, truths):
        print("\n".join(said))
        task = TASKS[name]
        probe = truth.best(2 * PROBE_RANK_BATCH)
        if probe is None:
            print(f"{name}: batch {2 * PROBE_RANK_BATCH} never reached the target: no probe figure")
            continue
        lr = probe[0]
        checkpoint = at_target(base, task, lr)
        initial = {k: v.detach() for k, v in make_model(task, 0).state_dict().items()}
        exact = exact_noise_scale(task, torch.load(checkpoint, weights_only=True))
        figures = {
            f"initial weights, first {PROBE_STEPS} steps": (
                gauged(base, task, lr, None, f"{name}-initial"),
                exact_noise_scale(task, initial),
            ),
            f"from the target, next {PROBE_STEPS} steps": (gauged(base, task, lr, checkpoint, f"{name}-target"), exact),
            "the target's weights held (lr 0)": (gauged(base, task, 0.0, checkpoint, f"{name}-held"), exact),
        }
        load.append(os.getloadavg()[0])
        report(task, truth, args.seeds, figures)
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    print(f"\n{elapsed:.0f} s ({cpu:.0f} s CPU here), 1-min load {min(load):.1f}-{max(load):.1f}, {base}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
