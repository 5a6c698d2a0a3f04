"""The gradient noise scale's estimator (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training",
Appendix A.1) over a gauged run's steps, and several configurations' figures combined into one or said to disagree.

Per step the gauge gives two squared gradient norms: each rank's own, |G_small|^2 at B_small (its samples), and the
averaged one, |G_big|^2 at B_big (every rank's). Since E|G_B|^2 = |G|^2 + tr(Sigma)/B, each step yields unbiased
estimates of |G|^2 and tr(Sigma); both are averaged over the steps after warmup separately (the ratio of two noisy
figures averaged step by step is biased), and B_simple = tr(Sigma) / |G|^2. Its interval is Fieller's for a ratio of
two means: every B for which tr(Sigma) - B |G|^2 is within Student's quantile of its standard error, the variances
and covariance of both means from WINDOWS blocks of consecutive steps (neighbouring steps may be correlated; blocks
much less). Where |G|^2 is not told apart from zero the interval has no upper end, and may still have a lower one.
On the demo's noise task, whose answer is known, the 90% intervals of real gauged runs held the closed form 91% of the
time (bench/noise_calibration.py, in bench/RESULTS.md); a percentile bootstrap over the same blocks, the interval
before, held it 80-86% of the time in simulated probes of 5 to 300 steps where this one held it 88-92%.
What it is not: the theory is for plain SGD near a fixed point, the figure grows as the loss falls, and batches drawn
from the same episodes are not independent samples, so it is a guide to where the batch stops paying, not a law
(bench/critical_batch.py measures how far it goes on two tasks). Reading the gauge's file: noise_scale.py."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from gpuwizard.runs.records import Record

WINDOWS = 20
"""Blocks of consecutive steps whose means give the variances (neighbouring steps may be correlated; blocks much
less): at most this many, one step each where there are fewer steps."""
LEVEL = 0.9
"""The interval's confidence: it holds the true B_simple in this share of measurements."""
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


class Means(Record):
    """The means of the steps' |G|^2 and tr(Sigma) estimates, the variances and covariance of those means, and the
    degrees of freedom the variances have (blocks less one): what an interval of their ratio needs."""

    g_sq: float
    trace: float
    var_g: float
    var_trace: float
    cov: float
    dof: int

    def spread(self, b: float) -> float:
        """The variance of trace - b g_sq."""
        return self.var_trace - 2 * b * self.cov + b * b * self.var_g

    def interval(self) -> tuple[float | None, float | None]:
        """Fieller's LEVEL set of B = trace / g_sq over B > 0: every B whose trace - B g_sq is within Student's
        quantile of its standard error. (low, high); None where the data bound it on no side."""
        q2 = t_quantile(self.dof) ** 2
        a = self.g_sq**2 - q2 * self.var_g
        b = -2 * (self.trace * self.g_sq - q2 * self.cov)
        c = self.trace**2 - q2 * self.var_trace
        disc = b * b - 4 * a * c
        if a > 0:  # |G|^2 told apart from zero: a closed interval, none where it reads below zero
            if self.g_sq < 0:
                return None, None
            root = math.sqrt(max(disc, 0.0))  # exact norms: one point, up to rounding
            low = (-b - root) / (2 * a)
            return (low if low > 0 else None), (-b + root) / (2 * a)
        if a == 0 or disc <= 0:
            return None, None
        near, far = sorted(((-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)))
        return (far if near < 0 < far else None), None  # B from `far` up; below `near` only B < 0, if near < 0


def t_quantile(dof: int) -> float:
    """Student's t with `dof` degrees of freedom that |T| stays under with probability LEVEL (bisection on its exact
    distribution for whole degrees of freedom, Abramowitz and Stegun 26.7.3-4)."""

    def within(t: float) -> float:
        theta = math.atan(t / math.sqrt(dof))
        odd = dof % 2
        term = math.cos(theta) if odd else 1.0
        total = term
        for k in range(3 if odd else 2, dof - 1, 2):  # the series up to cos^(dof - 2)
            term *= math.cos(theta) ** 2 * (k - 1) / k
            total += term
        if not odd:
            return math.sin(theta) * total
        return 2 / math.pi * (theta + (math.sin(theta) * total if dof > 1 else 0.0))

    low, high = 0.0, 1e3
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if within(middle) < LEVEL else (low, middle)
    return high


@dataclass(frozen=True)
class NoiseScale:
    """B_simple with its LEVEL interval; `low`/`high` None where the data bound it on no side (a lower end may stand
    where |G|^2 is not yet above its noise and B_simple is not measurable)."""

    b_simple: float | None
    low: float | None
    high: float | None
    steps: int
    means: Means

    @property
    def provisional(self) -> bool:
        if self.b_simple is None or self.low is None or self.high is None or self.low <= 0:
            return True
        return self.high / self.low > PROVISIONAL_RATIO

    def line(self) -> str:
        """The figure in one line, as a summary shows it."""
        if self.b_simple is None:
            above = "" if self.low is None else f"; {LEVEL:.0%} sure it is above {self.low:.3g} samples"
            return (
                f"B_simple: not measurable from {self.steps} steps (the gradient's own norm reads "
                f"{self.means.g_sq:.3g}, not above its noise{above}): run more steps or larger batches"
            )
        low = "?" if self.low is None else f"{self.low:.3g}"
        high = "?" if self.high is None else f"{self.high:.3g}"
        word = ", provisional: the interval is still wide" if self.provisional else ""
        return (
            f"B_simple ~ {self.b_simple:.3g} samples ({LEVEL:.0%} interval {low} to {high}, {self.steps} steps{word})"
        )

    def figure(self, b_small: float, b_big: float, source: str = "") -> NoiseFigure | None:
        """The figure as probe.json keeps it, measured at these batches; None while not measurable."""
        if self.b_simple is None or self.b_simple <= 0:
            return None
        return NoiseFigure(
            b_simple=self.b_simple,
            low=self.low,
            high=self.high,
            steps=self.steps,
            b_small=b_small,
            b_big=b_big,
            provisional=self.provisional,
            source=source,
            means=self.means,
        )

    def short(self) -> str | None:
        """ "B~70 (58-84)" for a progress line, "?" after it while provisional; None while not measurable."""
        if self.b_simple is None:
            return None
        span = f" ({self.low:.3g}-{self.high:.3g})" if self.low is not None and self.high is not None else ""
        return f"B~{self.b_simple:.3g}{span}{'?' if self.provisional else ''}"


class StepSums:
    """The gauge's steps in step order with running sums of their estimates, so that an estimate costs the same at
    100 steps as at 100k (the warmup and each window are two look-ups in the sums; a difference of running sums
    agrees with the sum taken step by step to about 1e-14) and a rank's late line revises only the sums from its
    step on. A line costs a look-up whatever its order: a step that comes after a later one waits aside and joins
    the ordered steps in one merge at the next estimate (a shuffled file once took time quadratic in its lines).
    Nothing is capped or thinned: memory is 72 bytes a step, 7 MB at 100k steps."""

    def __init__(self) -> None:
        self.numbers = array("q")
        self.local, self.lines = array("d"), array("d")
        """Per step: the sum of the ranks' own squared norms, and how many ranks' lines it holds."""
        self.small, self.averaged, self.big = array("d"), array("d"), array("d")
        """Per step: the latest line's batch sizes and averaged squared norm."""
        self.g_sums, self.trace_sums, self.usable = array("d", [0.0]), array("d", [0.0]), array("q", [0])
        """Before each position: the sums of the usable steps' estimates, and how many they are."""
        self.settled = 0
        """The running sums are right up to this position."""
        self.late: dict[int, list[float]] = {}
        """Steps first seen after a later one, not merged yet: [local, lines, small, averaged, big] each."""

    def add(self, step: int, local_sq: float, avg_sq: float, rank_batch: float, global_batch: float) -> None:
        """One rank's line: its own squared norm joins the step's mean, the averaged one and the batches replace it."""
        if not self.numbers or self.numbers[-1] < step:
            for column, value in zip(self.columns(), (step, local_sq, 1.0, rank_batch, avg_sq, global_batch)):
                column.append(value)
            self.g_sums.append(0.0)  # a placeholder: settle() writes the sums from `settled` on
            self.trace_sums.append(0.0)
            self.usable.append(0)
            return
        at = bisect_left(self.numbers, step)
        if self.numbers[at] == step:
            self.local[at] += local_sq
            self.lines[at] += 1
            self.small[at], self.averaged[at], self.big[at] = rank_batch, avg_sq, global_batch
            self.settled = min(self.settled, at)
        elif (waiting := self.late.get(step)) is not None:
            waiting[0] += local_sq
            waiting[1] += 1
            waiting[2:] = [rank_batch, avg_sq, global_batch]
        else:
            self.late[step] = [local_sq, 1.0, rank_batch, avg_sq, global_batch]

    def columns(self) -> tuple[array[Any], ...]:
        """The per-step arrays, the step numbers (int) first, in the order of a late step's row."""
        return self.numbers, self.local, self.lines, self.small, self.averaged, self.big

    def merge(self) -> None:
        """The late steps into their places: the ordered steps from the first of them on, rewritten once."""
        if not self.late:
            return
        first = bisect_left(self.numbers, min(self.late))
        columns = self.columns()
        kept = zip(*(column[first:] for column in columns))
        merged = sorted([*kept, *((step, *rest) for step, rest in self.late.items())], key=lambda row: row[0])
        for column, values in zip(columns, zip(*merged)):
            del column[first:]
            column.extend(values)
        for _ in self.late:
            self.g_sums.append(0.0)
            self.trace_sums.append(0.0)
            self.usable.append(0)
        self.settled = min(self.settled, first)
        self.late.clear()

    def step(self, at: int) -> GaugeStep:
        return GaugeStep(
            self.numbers[at], self.small[at], self.local[at] / self.lines[at], self.big[at], self.averaged[at]
        )

    def steps(self) -> list[GaugeStep]:
        self.merge()
        return [self.step(at) for at in range(len(self.numbers))]

    def settle(self) -> None:
        """The running sums from the first step that changed on."""
        self.merge()
        for at in range(self.settled, len(self.numbers)):
            found = self.step(at)
            usable = found.b_big > found.b_small > 0
            g, trace = found.estimates() if usable else (0.0, 0.0)
            self.g_sums[at + 1] = self.g_sums[at] + g
            self.trace_sums[at + 1] = self.trace_sums[at] + trace
            self.usable[at + 1] = self.usable[at] + usable
        self.settled = len(self.numbers)

    def estimate(self, warmup: int | None = None) -> NoiseScale | None:
        """B_simple over the steps after `warmup` (default: the first tenth), each sum smoothed on its own; the
        interval from the means of WINDOWS blocks of consecutive steps. None without two usable steps."""
        self.settle()
        end = len(self.numbers)
        skip = min(end, int(end * WARMUP_SHARE) if warmup is None else warmup)
        base, count = self.usable[skip], self.usable[end] - self.usable[skip]
        if count < 2:
            return None
        windows = min(WINDOWS, count)  # window w holds the usable steps i (from 0) with i * windows // count == w
        starts = [bisect_left(self.usable, base - (-w * count // windows), skip) for w in range(windows)] + [end]
        blocks = [
            (self.usable[b] - self.usable[a], self.g_sums[b] - self.g_sums[a], self.trace_sums[b] - self.trace_sums[a])
            for a, b in pairwise(starts)
        ]
        means = block_means(blocks)
        b_simple = means.trace / means.g_sq if means.g_sq > 0 else None
        return NoiseScale(b_simple, *means.interval(), count, means)


def block_means(blocks: list[tuple[int, float, float]]) -> Means:
    """The Means of blocks given as (steps, sum of |G|^2 estimates, sum of tr(Sigma) estimates): each block's mean
    about the overall one, weighted by its steps, gives the per-step (co)variances, the means' are those / steps."""
    count = sum(n for n, _, _ in blocks)
    g_sq, trace = sum(g for _, g, _ in blocks) / count, sum(t for _, _, t in blocks) / count
    dof = len(blocks) - 1
    apart = [(g - n * g_sq, t - n * trace, n) for n, g, t in blocks]
    return Means(
        g_sq=g_sq,
        trace=trace,
        var_g=sum(dg * dg / n for dg, _, n in apart) / dof / count,
        var_trace=sum(dt * dt / n for _, dt, n in apart) / dof / count,
        cov=sum(dg * dt / n for dg, dt, n in apart) / dof / count,
        dof=dof,
    )


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
    means: Means | None = None
    """What its interval came from, for combine (None in records written before it was kept)."""

    @property
    def ends(self) -> tuple[float, float]:
        """The interval with its open ends at 0 and infinity."""
        return self.low or 0.0, math.inf if self.high is None else self.high

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


@dataclass(frozen=True)
class Combined:
    """Configurations whose intervals share values: one figure pooled from all of them."""

    figure: NoiseFigure
    parts: list[NoiseFigure]


@dataclass(frozen=True)
class Disagreement:
    """Configurations whose intervals share no value: no one figure stands for them."""

    parts: list[NoiseFigure]
    lower: NoiseFigure
    higher: NoiseFigure
    """The interval that ends lowest and the one that starts highest: apart."""

    def text(self) -> str:
        """One sentence that says which figures disagree and what that means."""
        return (
            f"the configurations' noise scales disagree: {self.lower.text()} from {self.lower.source or 'one'} and "
            f"{self.higher.text()} from {self.higher.source or 'another'} share no value, so no one figure stands for "
            "the job (their steps, batches or stage of training differed more than their noise)"
        )


def combine(figures: list[NoiseFigure]) -> Combined | Disagreement | None:
    """One B_noise from several configurations' figures, or that they disagree; never the narrowest picked alone
    (the narrowest is the one whose |G|^2 read highest, so its B_noise is the lowest). Where every interval shares a
    value with every other: Fieller's interval of the pooled means, each configuration weighted by the inverse
    variance of trace - B |G|^2 at the plain means' ratio (records without their means: the narrowest of those that
    agree). None for no figures."""
    if not figures:
        return None
    lower, higher = min(figures, key=lambda f: f.ends[1]), max(figures, key=lambda f: f.ends[0])
    if higher.ends[0] > lower.ends[1]:
        return Disagreement(figures, lower, higher)
    parts = [f.means for f in figures if f.means is not None]
    if len(parts) < len(figures):
        return Combined(min(figures, key=lambda f: f.ends[1] / max(f.ends[0], 1e-300)), figures)
    pilot = sum(m.trace for m in parts) / sum(m.g_sq for m in parts)
    weights = [1 / m.spread(pilot) if m.spread(pilot) > 0 else 1.0 for m in parts]
    share = [w / sum(weights) for w in weights]

    def pooled(field: str, power: int) -> float:
        return sum(w**power * float(getattr(m, field)) for w, m in zip(share, parts))

    means = Means(
        g_sq=pooled("g_sq", 1),
        trace=pooled("trace", 1),
        var_g=pooled("var_g", 2),
        var_trace=pooled("var_trace", 2),
        cov=pooled("cov", 2),
        dof=sum(m.dof for m in parts),
    )
    found = NoiseScale(means.trace / means.g_sq, *means.interval(), sum(f.steps for f in figures), means)
    source = "; ".join(f.source for f in figures if f.source)
    figure = found.figure(min(f.b_small for f in figures), max(f.b_big for f in figures), source)
    assert figure is not None, "every part's |G|^2 and trace are positive, so are their weighted means"
    return Combined(figure, figures)
