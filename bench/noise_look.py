"""One look of the live monitor at a gauged run's noise scale (issue 26), at 1k, 10k and 100k steps of 2 ranks:
before, read_gauge + estimate of the whole gauge file (what the monitor did every NOISE_EVERY_S); after, a
GaugeFollower's look at the lines appended since its last look (100 steps, 10 s at 10 steps/s), and its first look,
which still reads the whole file once. `python bench/noise_look.py [--quick]`."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpuwizard.analysis.probe.noise_scale import GaugeFollower, estimate, read_gauge

SIZES = (1_000, 10_000, 100_000)
NEW_STEPS = 100


def gauge_lines(first: int, count: int, rng: random.Random) -> str:
    """Both ranks' lines as gwgauge writes them (every field), norms around |G|^2 0.2 and tr(Sigma) 30."""
    lines = []
    for step in range(first, first + count):
        averaged = (0.2 + 30 / 128) * (1 + rng.gauss(0, 0.2))
        for rank in (0, 1):
            local = (0.2 + 30 / 64) * (1 + rng.gauss(0, 0.2))
            lines.append(
                json.dumps(
                    {
                        "kind": "step",
                        "rank": rank,
                        "step": step,
                        "t": 1.7e9 + step * 0.1,
                        "dt_s": 0.1,
                        "max_rss_mb": 890.1,
                        "rss_mb": 890.3,
                        "local_sq": local,
                        "avg_sq": averaged,
                        "rank_batch": 64,
                        "global_batch": 128,
                    }
                )
            )
    return "\n".join(lines) + "\n"


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def spread(values: list[float]) -> str:
    low, middle, high = (v * 1e3 for v in (min(values), statistics.median(values), max(values)))
    return f"median {middle:9.2f} ms (min {low:.2f}, max {high:.2f}, n={len(values)})"


def whole_file(path: Path) -> Callable[[], object]:
    """What the monitor did at each look before: read and estimate the whole file."""
    return lambda: estimate(read_gauge(path).steps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    quick = parser.parse_args().quick
    base, rng = Path(tempfile.mkdtemp(prefix="gpuwizard-bench-noise-")), random.Random(0)
    print(f"one look at a gauge file of 2 ranks; after: {NEW_STEPS} new steps a look")
    for size in SIZES:
        path = base / f"gauge-{size}.jsonl"
        path.write_text(gauge_lines(1, size, rng))
        mib = path.stat().st_size / 2**20
        whole_repeats = 3 if quick or size == SIZES[-1] else 7
        before = [timed(whole_file(path)) for _ in range(whole_repeats)]
        first = [timed(GaugeFollower(path).look) for _ in range(whole_repeats)]
        follower, after, steps = GaugeFollower(path), [], size
        follower.look()
        for _ in range(5 if quick else 20):
            with path.open("a") as f:
                f.write(gauge_lines(steps + 1, NEW_STEPS, rng))
            steps += NEW_STEPS
            after.append(timed(follower.look))
        assert follower.look() == estimate(read_gauge(path).steps), "the same figure as the whole file's"
        follower.close()
        ratio = statistics.median(before) / statistics.median(after)
        print(f"{size:>7} steps ({mib:4.1f} MiB)")
        print(f"  before, whole file    {spread(before)}")
        print(f"  after, first look     {spread(first)}")
        print(f"  after, next looks     {spread(after)}, up to {steps} steps: {ratio:.0f}x less than before")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
