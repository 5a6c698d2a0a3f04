"""The gradient noise scale of a gauged run, read from the gauge's `gauge.jsonl` (B_simple: past it a bigger batch buys
wall clock, not fewer samples; the estimator and its interval are noise_estimate.py's): the whole file at once, or as
the job appends to it (GaugeFollower, what the live monitor looks at: the same figure, at a cost per look that does
not grow with the run); `python -m gpuwizard.analysis.probe.noise_scale RUN_DIR` prints it."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwizard.analysis.probe.noise_estimate import LEVEL, GaugeStep, NoiseFigure, NoiseScale, StepSums
from gpuwizard.runs.tail import LogTail

GAUGE_FILE = "gauge.jsonl"
"""The gauge's file in a run folder (runner/launch/gauge_env.py names it to the job)."""
STEP_LIMIT = 2**63


def estimate(steps: list[GaugeStep], warmup: int | None = None) -> NoiseScale | None:
    """B_simple of steps as a gauge file gives them (noise_estimate.StepSums.estimate over them)."""
    sums = StepSums()
    for s in steps:
        sums.add(s.step, s.g_small_sq, s.g_big_sq, s.b_small, s.b_big)
    return sums.estimate(warmup)


@dataclass(frozen=True)
class GaugeRead:
    """What a gauge file holds: the steps with both norms, and what the gauge said it could not measure."""

    steps: list[GaugeStep]
    unmeasured: list[str]
    lines: int


def number(line: dict[str, Any], key: str) -> float | None:
    value = line.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class GaugeFollower:
    """A gauge file read as the job appends to it: each look parses only the lines written since the one before (a
    torn last line waits for the next look) and starts over where the file shrank or was replaced, so a look at a
    100k-step run costs what its newest lines cost. The ranks' lines are grouped by step: |G_small|^2 is the mean of
    the ranks' own squared norms at that step; a torn or foreign line is skipped. The figure is the one read_gauge and
    estimate give of the same complete lines."""

    def __init__(self, path: Path):
        self.path = path
        self.start()

    def start(self) -> None:
        """From the file's first byte, nothing read yet."""
        self.tail = LogTail(self.path)
        self.sums = StepSums()
        self.unmeasured: list[str] = []
        self.lines = 0

    def read(self) -> None:
        """Parse what was appended since the last read (everything again where the file is no longer the same)."""
        if self.replaced():
            self.close()
            self.start()
        while chunk := self.tail.read():
            for raw in chunk.lines:
                self.feed(raw)

    def replaced(self) -> bool:
        """The file read so far is no longer the one at the path, or it shrank (truncated and written afresh)."""
        if self.tail.fh is None:
            return False
        try:
            now, held = os.stat(self.path), os.fstat(self.tail.fh.fileno())
        except OSError:
            return True
        return (now.st_ino, now.st_dev) != (held.st_ino, held.st_dev) or held.st_size < self.tail.offset

    def feed(self, raw: str) -> None:
        """One line: a rank's step, what the gauge could not measure, or something skipped."""
        try:
            line = json.loads(raw)
        except ValueError:
            return
        if not isinstance(line, dict):
            return
        self.lines += 1
        if line.get("kind") == "unmeasured" and isinstance(line.get("why"), str):
            if line["why"] not in self.unmeasured:
                self.unmeasured.append(line["why"])
            return
        values = [number(line, k) for k in ("step", "local_sq", "avg_sq", "rank_batch", "global_batch")]
        if line.get("kind") != "step" or None in values or not -STEP_LIMIT < (values[0] or 0.0) < STEP_LIMIT:
            return  # a step number that is no 64-bit integer (NaN, inf, 1e300) is foreign
        step, local_sq, avg_sq, rank_batch, global_batch = (v or 0.0 for v in values)
        self.sums.add(int(step), local_sq, avg_sq, rank_batch, global_batch)

    def look(self) -> NoiseScale | None:
        """B_simple of every step in the file, once the lines appended since the last look are read."""
        self.read()
        return self.sums.estimate()

    def close(self) -> None:
        self.tail.close()


def read_gauge(path: Path) -> GaugeRead:
    """The whole file at once, its last line too where it is whole (the job has ended)."""
    follower = GaugeFollower(path)
    try:
        follower.read()
        follower.feed(follower.tail.partial)
    finally:
        follower.close()
    return GaugeRead(follower.sums.steps(), follower.unmeasured, follower.lines)


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


def gauge_figure(path: Path) -> tuple[NoiseFigure | None, str]:
    """A gauged run's noise figure, or why it has none, in words."""
    if not path.is_file():
        return None, f"no {path.name}: the trainer's Python did not load the gauge (not a torch trainer?)"
    read = read_gauge(path)
    found = estimate(read.steps)
    first = min(read.steps, key=lambda s: s.step) if read.steps else None
    figure = found.figure(first.b_small, first.b_big) if found is not None and first is not None else None
    if figure is not None:
        return figure, ""
    if read.unmeasured:
        return None, "; ".join(read.unmeasured)
    if found is not None:
        above = "" if found.low is None else f" ({LEVEL:.0%} sure B_noise is above {found.low:.3g})"
        return None, f"the gradient's own norm was not above its noise in {found.steps} steps{above}: run more steps"
    return None, f"{len(read.steps)} steps with gradient norms (needs 2 or more)"


def main(argv: list[str]) -> int:
    """`python -m gpuwizard.analysis.probe.noise_scale RUN_DIR`: the run's B_simple with its interval."""
    if len(argv) != 1:
        sys.stderr.write("usage: python -m gpuwizard.analysis.probe.noise_scale RUN_DIR (or its gauge.jsonl)\n")
        return 2
    line = summary(Path(argv[0]))
    if line is None:
        sys.stderr.write(f"{argv[0]}: no {GAUGE_FILE} (the run was not gauged: monitor.gauge: true)\n")
        return 1
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
