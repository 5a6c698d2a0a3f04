"""The gradient noise scale of a gauged run (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training",
Appendix A.1), read from the gauge's `gauge.jsonl`: past B_simple a bigger batch buys wall clock, not fewer samples.

Per step the gauge gives two squared gradient norms: each rank's own, |G_small|^2 at B_small (its samples), and the
averaged one, |G_big|^2 at B_big (every rank's). Since E|G_B|^2 = |G|^2 + tr(Sigma)/B, each step yields unbiased
estimates of |G|^2 and tr(Sigma); both are averaged over the steps after warmup separately (the ratio of two noisy
figures averaged step by step is biased), and B_simple = tr(Sigma) / |G|^2. What it is not: the theory is for plain
SGD near a fixed point, the figure grows as the loss falls, and batches drawn from the same episodes are not
independent samples, so it is a guide to where the batch stops paying, not a law."""

from __future__ import annotations

import json
import random
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from gpuwizard.runs.records import Record

GAUGE_FILE = "gauge.jsonl"
"""The gauge's file in a run folder (runner/gauge_env.py names it to the job)."""
WINDOWS = 20
"""Blocks of consecutive steps the bootstrap resamples (neighbouring steps may be correlated; blocks much less)."""
DRAWS = 1000
LEVEL = 0.9
"""The interval holds the middle 90% of the bootstrap's B_simple."""
PROVISIONAL_RATIO = 2.0
"""An interval whose ends differ by more than this factor (or that has no upper end) is called provisional."""
WARMUP_SHARE = 0.1
"""Steps left out at the start by default: the first steps of a run are rarely like the rest."""


@dataclass(frozen=True)
class GaugeStep:
    """One optimizer step: the mean squared norm of the ranks' own gradients at b_small, the averaged one at b_big."""

    step: int
    b_small: float
    g_small_sq: float
    b_big: float
    g_big_sq: float

    def estimates(self) -> tuple[float, float]:
        """Unbiased estimates of |G|^2 and tr(Sigma) from this step alone (Appendix A.1)."""
        g_sq = (self.b_big * self.g_big_sq - self.b_small * self.g_small_sq) / (self.b_big - self.b_small)
        trace = (self.g_small_sq - self.g_big_sq) / (1 / self.b_small - 1 / self.b_big)
        return g_sq, trace


@dataclass(frozen=True)
class NoiseScale:
    """B_simple with its bootstrap interval; `low`/`high` None where the data bound it on no side."""

    b_simple: float | None
    low: float | None
    high: float | None
    steps: int
    g_sq: float
    trace: float

    @property
    def provisional(self) -> bool:
        if self.b_simple is None or self.low is None or self.high is None or self.low <= 0:
            return True
        return self.high / self.low > PROVISIONAL_RATIO

    def line(self) -> str:
        """The figure in one line, as a summary shows it."""
        if self.b_simple is None:
            return (
                f"B_simple: not measurable from {self.steps} steps (the gradient's own norm reads {self.g_sq:.3g}, not "
                "above its noise): run more steps or larger batches"
            )
        low = "?" if self.low is None else f"{self.low:.3g}"
        high = "?" if self.high is None else f"{self.high:.3g}"
        word = ", provisional: the interval is still wide" if self.provisional else ""
        return (
            f"B_simple ~ {self.b_simple:.3g} samples ({LEVEL:.0%} interval {low} to {high}, {self.steps} steps{word})"
        )


def ratio(g_sum: float, trace_sum: float) -> float | None:
    return trace_sum / g_sum if g_sum > 0 else None


def estimate(steps: list[GaugeStep], warmup: int | None = None, seed: int = 0) -> NoiseScale | None:
    """B_simple over the steps after `warmup` (default: the first tenth), each sum smoothed on its own; the interval
    from a bootstrap over WINDOWS blocks of consecutive steps. None without two usable steps."""
    ordered = sorted(steps, key=lambda s: s.step)
    skip = int(len(ordered) * WARMUP_SHARE) if warmup is None else warmup
    pairs = [s.estimates() for s in ordered[skip:] if s.b_big > s.b_small > 0]
    if len(pairs) < 2:
        return None
    g_mean = sum(g for g, _ in pairs) / len(pairs)
    trace_mean = sum(t for _, t in pairs) / len(pairs)
    centre = ratio(g_mean, trace_mean)
    windows = min(WINDOWS, len(pairs))
    sums = [(0.0, 0.0)] * windows
    for i, (g, t) in enumerate(pairs):
        w = i * windows // len(pairs)
        sums[w] = (sums[w][0] + g, sums[w][1] + t)
    rng = random.Random(seed)
    drawn: list[float] = []
    for _ in range(DRAWS):
        picks = [sums[rng.randrange(windows)] for _ in range(windows)]
        value = ratio(sum(p[0] for p in picks), sum(p[1] for p in picks))
        if value is not None:
            drawn.append(value)
    drawn.sort()  # the draws with no positive |G|^2 (an unbounded B_simple) stand above every one of these
    tail = (1 - LEVEL) / 2
    low_at, high_at = int(tail * DRAWS), int((1 - tail) * DRAWS)
    low = drawn[low_at] if low_at < len(drawn) else None
    high = drawn[high_at] if high_at < len(drawn) else None
    return NoiseScale(centre, low, high, len(pairs), g_mean, trace_mean)


@dataclass(frozen=True)
class GaugeRead:
    """What a gauge file holds: the steps with both norms, and what the gauge said it could not measure."""

    steps: list[GaugeStep]
    unmeasured: list[str]
    lines: int


def number(line: dict, key: str) -> float | None:
    value = line.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def read_gauge(path: Path) -> GaugeRead:
    """Group the ranks' lines by step: |G_small|^2 is the mean of the ranks' own squared norms at that step. A torn
    or foreign line is skipped (the file is appended to while the job runs)."""
    local: dict[int, list[float]] = defaultdict(list)
    big: dict[int, tuple[float, float, float]] = {}
    unmeasured: list[str] = []
    count = 0
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return GaugeRead([], [], 0)
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(line, dict):
            continue
        count += 1
        if line.get("kind") == "unmeasured" and isinstance(line.get("why"), str):
            if line["why"] not in unmeasured:
                unmeasured.append(line["why"])
            continue
        values = [number(line, k) for k in ("step", "local_sq", "avg_sq", "rank_batch", "global_batch")]
        if line.get("kind") != "step" or None in values:
            continue
        step, local_sq, avg_sq, rank_batch, global_batch = (v or 0.0 for v in values)
        local[int(step)].append(local_sq)
        big[int(step)] = (rank_batch, avg_sq, global_batch)
    steps = [
        GaugeStep(step, big[step][0], sum(norms) / len(norms), big[step][2], big[step][1])
        for step, norms in local.items()
    ]
    return GaugeRead(steps, unmeasured, count)


def summary(run_path: Path) -> str | None:
    """The noise scale of a run folder in words; None where the run was not gauged."""
    path = run_path / GAUGE_FILE if run_path.is_dir() else run_path
    if not path.is_file():
        return None
    read = read_gauge(path)
    found = estimate(read.steps)
    if found is not None:
        return found.line()
    if read.unmeasured:
        return "B_simple: not measured: " + "; ".join(read.unmeasured)
    return f"B_simple: not measured: {len(read.steps)} steps with gradient norms in {path.name} (needs 2 or more)"


class NoiseFigure(Record):
    """A configuration's B_simple as probe.json keeps it: the figure, its interval and the batches it came from."""

    b_simple: float
    low: float | None = None
    high: float | None = None
    """The interval's ends; None where the data bound it on no side."""
    steps: int
    b_small: float
    b_big: float
    provisional: bool
    source: str = ""
    """The configuration it was measured in (the probe's own figure)."""

    def text(self) -> str:
        """ "B_noise ~ 12 (90% interval 8-20)", with the word provisional while the interval is wide."""
        low = "?" if self.low is None else f"{self.low:.3g}"
        high = "?" if self.high is None else f"{self.high:.3g}"
        word = ", provisional" if self.provisional else ""
        return f"B_noise ~ {self.b_simple:.3g} ({LEVEL:.0%} interval {low}-{high}{word})"

    def plus_minus(self) -> str:
        """ "12 ± 4": half the interval's width (the larger side where it is lopsided; ? where it is open)."""
        if self.low is None or self.high is None:
            return f"{self.b_simple:.3g} ± ?"
        return f"{self.b_simple:.3g} ± {max(self.high - self.b_simple, self.b_simple - self.low):.2g}"


def gauge_figure(path: Path) -> tuple[NoiseFigure | None, str]:
    """A gauged run's noise figure, or why it has none, in words."""
    if not path.is_file():
        return None, f"no {path.name}: the trainer's Python did not load the gauge (not a torch trainer?)"
    read = read_gauge(path)
    found = estimate(read.steps)
    if found is not None and found.b_simple is not None and found.b_simple > 0:
        first = min(read.steps, key=lambda s: s.step)
        figure = NoiseFigure(
            b_simple=found.b_simple,
            low=found.low,
            high=found.high,
            steps=found.steps,
            b_small=first.b_small,
            b_big=first.b_big,
            provisional=found.provisional,
        )
        return figure, ""
    if read.unmeasured:
        return None, "; ".join(read.unmeasured)
    if found is not None:
        return None, f"the gradient's own norm was not above its noise in {found.steps} steps: run more steps"
    return None, f"{len(read.steps)} steps with gradient norms (needs 2 or more)"


def main(argv: list[str]) -> int:
    """`python -m gpuwizard.analysis.noise_scale RUN_DIR`: the run's B_simple with its interval."""
    if len(argv) != 1:
        sys.stderr.write("usage: python -m gpuwizard.analysis.noise_scale RUN_DIR (or its gauge.jsonl)\n")
        return 2
    line = summary(Path(argv[0]))
    if line is None:
        sys.stderr.write(f"{argv[0]}: no {GAUGE_FILE} (the run was not gauged: monitor.gauge: true)\n")
        return 1
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
