"""Live curves in the monitor: loss (log scale on request), lr and samples/s, against step or wall time.

Drawn with textual-plot, which is imported when the curves are first shown, never on the path to the first frame
(README: why textual-plot and not textual-plotext)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

if TYPE_CHECKING:
    from textual_plot import PlotWidget

    from gpuwizard.runs.records import Metric

METRICS = ("loss", "lr", "samples/s")
HELD_OUT_STYLE = "bold yellow"
"""The held-out loss, drawn with the training loss on the loss curve where the run logs one (dataset.eval_split)."""
MAX_POINTS = 400
"""Curves are thinned to this many points: a redraw stays a few milliseconds on a week-long run."""
REDRAW_EVERY_S = 0.5


def thinned(points: list[tuple[float, float]], limit: int = MAX_POINTS) -> list[tuple[float, float]]:
    if len(points) <= limit:
        return points
    step = len(points) / limit
    picked = [points[int(i * step)] for i in range(limit - 1)]
    return [*picked, points[-1]]


DRAWABLE = 1e300
"""Values past this magnitude are left out of a curve: textual-plot 0.10.1 maps data to cells through the axis span,
which overflows past ~8e307 (a loss of 1e308 raised OverflowError and ended the app), and no loss, lr or rate that
large is a number anyone reads off a curve."""


def drawable(value: float) -> bool:
    return math.isfinite(value) and abs(value) <= DRAWABLE


def series(
    metrics: list[Metric], metric: str, x_time: bool, log: bool, started: float, kind: str = "train"
) -> tuple[list[tuple[float, float]], int]:
    """(x, y) for one metric of one kind of loss line, x the step or the minutes since start, and how many values
    were left out: NaN, infinities and values past DRAWABLE, and on a log scale a loss of 0 or less."""
    out, left_out = [], 0
    for m in metrics:
        if m.kind != kind:
            continue
        y = {"loss": m.loss, "lr": m.lr, "samples/s": m.samples_per_s}[metric]
        x = (m.t - started) / 60 if x_time else m.step
        if x is None or y is None:
            continue
        if log and metric == "loss":
            y = math.log10(y) if math.isfinite(y) and y > 0 else math.nan
        if not (drawable(x) and drawable(y)):
            left_out += 1
            continue
        out.append((float(x), float(y)))
    return out, left_out


Limits = tuple[float, float] | None


def flat_limits(values: list[float]) -> Limits:
    """Limits for values that (nearly) coincide, widened by 1% of their size; None where textual-plot's own
    autoscale works. It widens a flat range by 1e-6, below a float's resolution past ~1e10 (a flat 1e10 curve
    raised "math domain error")."""
    low, high = min(values), max(values)
    size = max(abs(low), abs(high))
    if high - low > size * 1e-9:
        return None
    pad = max(size * 0.01, 1e-6)
    return low - pad, high + pad


class MetricsPlot(Vertical):
    """One curve at a time; keys in the monitor switch the metric, the x axis and the log scale."""

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self.metrics: list[Metric] = []
        self.metric = 0
        self.x_time = False
        self.log_loss = False
        self.started = 0.0
        self.plot: PlotWidget | None = None
        self.ready = False
        self.drawn_at = 0.0
        self.pending = False
        self.title_text = ""
        self.fixed: tuple[Limits, Limits] = (None, None)
        """The x and y limits set for a flat curve; None: autoscaled (a mouse zoom then stays across redraws)."""

    def compose(self) -> ComposeResult:
        yield Static("", id="plot-title")

    def add(self, metrics: list[Metric], started: float) -> None:
        self.metrics += metrics
        self.started = started
        if metrics and self.display:
            self.schedule()

    def schedule(self) -> None:
        """Redraw now, or once the last redraw is REDRAW_EVERY_S old (a flood of log lines draws a few frames)."""
        wait = self.drawn_at + REDRAW_EVERY_S - time.monotonic()
        if wait <= 0:
            self.redraw()
        elif not self.pending:
            self.pending = True
            self.set_timer(wait, self.redraw)

    def show_title(self) -> None:
        """The curve's name, and its keys where the width allows (help lists them too)."""
        keys = " · keys: l metric · x step/time · g log loss · v view"
        fits = len(self.title_text + keys) <= self.content_region.width
        self.query_one("#plot-title", Static).update(self.title_text + keys if fits else self.title_text)

    def on_resize(self) -> None:
        if self.title_text:
            self.show_title()

    def cycle_metric(self) -> None:
        self.metric = (self.metric + 1) % len(METRICS)
        self.redraw()

    def toggle_x(self) -> None:
        self.x_time = not self.x_time
        self.redraw()

    def toggle_log(self) -> None:
        self.log_loss = not self.log_loss
        self.redraw()

    async def mount_plot(self) -> None:
        """Draw once the plot's own canvas is composed; the title line names the curve, so the plot's top margin
        goes to the curve (readable at 80x24); ticks as many as fit (tui/widgets/axes.py)."""
        plot = self.plot
        if plot is None:  # made before this is called
            return
        from gpuwizard.tui.widgets.axes import FittedTicks

        await self.mount(plot)
        plot.margin_top = 0
        plot.margin_bottom = 2
        area = plot.query_one("#plot")  # the curve's own canvas, inside the tick margins
        plot.set_x_formatter(FittedTicks(lambda: area.size.width, along_x=True))
        plot.set_y_formatter(FittedTicks(lambda: area.size.height, along_x=False))
        self.ready = True
        self.redraw()

    def redraw(self) -> None:
        self.pending = False
        self.drawn_at = time.monotonic()
        if not self.display:
            return
        if self.plot is None:
            from textual_plot import PlotWidget

            self.plot = PlotWidget(id="curve")
            self.call_later(self.mount_plot)
            return
        if not self.ready:
            return
        name = METRICS[self.metric]
        drawn, left_out = series(self.metrics, name, self.x_time, self.log_loss, self.started)
        held: list[tuple[float, float]] = []
        if name == "loss":
            held, held_left_out = series(self.metrics, name, self.x_time, self.log_loss, self.started, "held_out")
            left_out += held_left_out
        points, held = thinned(drawn), thinned(held)
        axis = "minutes" if self.x_time else "step"
        shown = f"log10 {name}" if self.log_loss and name == "loss" else name
        missing = f", {left_out} left out" if left_out else ""
        both = f" (white: train, yellow: held-out, {len(held)} points)" if held else ""
        self.title_text = f"{shown} against {axis} · {len(points)} points{missing}{both}"
        self.show_title()
        self.plot.clear()
        if len(points) >= 2:
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            fixed = (flat_limits(xs + [p[0] for p in held]), flat_limits(ys + [p[1] for p in held]))
            if fixed != self.fixed:  # only then: setting limits resets a mouse zoom
                self.fixed = fixed
                self.plot.set_xlimits(*(fixed[0] or (None, None)))
                self.plot.set_ylimits(*(fixed[1] or (None, None)))
            self.plot.plot(xs, ys)
            if len(held) >= 2:
                self.plot.plot([p[0] for p in held], [p[1] for p in held], line_style=HELD_OUT_STYLE)
        self.plot.set_xlabel(axis)
