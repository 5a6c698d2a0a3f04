"""The probe's one answer as probe.json keeps it: the configuration recommended, how sure, and the comparisons it
rests on (analysis/probe/decision.py decides it; every face shows this record, never a judgement of its own)."""

from __future__ import annotations

from typing import Literal

from gpuwizard.runs.records import Record

Basis = Literal["time to the same loss", "samples/s"]
Confidence = Literal["sure", "likely", "cannot tell", "nothing compared"]


class Compared(Record):
    """One larger count's best configuration against the fewest count's, over adjacent pairs of their windows."""

    gpus: int
    batch: int
    base_gpus: int
    base_batch: int
    efficiency: float
    """On the decision's basis, the median over the pairs kept."""
    low: float
    high: float
    """The pairs' slowest-fastest extremes, across B_noise's interval on the time basis."""
    any_low: float
    any_high: float
    """The same whatever B_noise is (0 to infinity): where this is on one side of the bar, B_noise does not matter."""
    samples_efficiency: float
    samples_low: float
    """Samples/s against the fewest per process (the median, the pairs' slowest end): the throughput evidence."""
    pairs: int
    dropped: list[str] = []
    """Pairs left out, each with the background that differed."""
    ratios: list[float] = []
    """Each kept pair's samples/s ratio (larger count over the fewest)."""


class Decision(Record):
    """The recommendation, its confidence and the paragraph that says both, first on every face."""

    basis: Basis
    gpus: int
    batch: int
    samples_per_s: float
    confidence: Confidence
    paragraph: str
    compared: list[Compared] = []
    checks: list[str] = []
    """Physics and background findings, in words, that kept it from being sure."""
