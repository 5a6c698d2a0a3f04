"""Tick labels for the monitor's curves that fit their axis: never two labels run together, and an lr reads 1.1e-05,
not 0.0000110. Imported with textual-plot, when the curves are first shown (tui/widgets/plots.py)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from textual_plot.axis_formatter import AxisFormatter

MOST_TICKS = 8
NICE = (1.0, 2.0, 5.0)
LABEL_CHARS = 8
"""textual-plot cuts a y label to its left margin (10 cells) less 1, and the tick takes one more."""


def nice_intervals(span: float) -> list[float]:
    """1, 2 and 5 times powers of ten, from the one that gives at most MOST_TICKS ticks over the span upwards."""
    power = 10.0 ** math.floor(math.log10(span / MOST_TICKS))
    candidates = [m * power * 10.0**j for j in range(4) for m in NICE]
    return [c for c in candidates if span / c <= MOST_TICKS]


def ticks_every(low: float, high: float, interval: float) -> list[float]:
    """The multiples of the interval inside [low, high]; a float's rounding never drops the last one."""
    first, last = math.ceil(low / interval - 1e-9), math.floor(high / interval + 1e-9)
    return [min(max(k * interval, low), high) for k in range(first, last + 1)]


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """As few digits as tell the ticks apart; in e-notation (1.1e-05) below 0.01, where fixed reads as a row of
    zeros, and where fixed would need more than LABEL_CHARS."""
    if not ticks:
        return []
    step = min((b - a for a, b in zip(ticks, ticks[1:]) if b > a), default=abs(ticks[0]) or 1.0)
    biggest = max(abs(t) for t in ticks)
    decimals = max(0, -math.floor(math.log10(step)))
    fixed = [f"{t:.{decimals}f}" for t in ticks]
    if biggest == 0 or (biggest >= 1e-2 and max(len(label) for label in fixed) <= LABEL_CHARS):
        return fixed
    digits = max(0, math.floor(math.log10(biggest)) - math.floor(math.log10(step)))
    return ["0" if t == 0 else f"{t:.{digits}e}" for t in ticks]


class FittedTicks(AxisFormatter):
    """Ticks at 1-2-5 intervals, as many as the axis has room for: along x each label and a space fit between two
    ticks, along y two rows."""

    def __init__(self, cells: Callable[[], int], along_x: bool):
        self.cells, self.along_x = cells, along_x

    def get_ticks(self, min_: float, max_: float, max_ticks: int = MOST_TICKS) -> list[float]:
        span = max_ - min_
        if not (span > 0 and math.isfinite(span)):
            return [min_]
        cells = max(self.cells(), 1)
        ticks: list[float] = []
        for interval in nice_intervals(span):
            ticks = ticks_every(min_, max_, interval)
            room = interval / span * cells
            need = max((len(label) for label in tick_labels(ticks)), default=0) + 1 if self.along_x else 2
            if room >= need:
                return ticks
        return ticks[:1]

    def get_labels_for_ticks(self, ticks: Sequence[float]) -> list[str]:
        return tick_labels(ticks)
