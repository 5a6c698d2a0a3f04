"""The headless summary's read of a gauge file whose lines come in order, shuffled or reversed (issue 40 item 8: a
shuffled file made it quadratic, 198 s after the run): 20k and 200k lines of 2 ranks. Each line costs a look-up
whatever its order, so a shuffled or reversed file takes about what the ordered one takes: it fails where either
takes more than twice the ordered file's time and a second. `python bench/gauge_order.py [--quick]` (--quick: 20k
lines only)."""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from gpuwizard.analysis.probe.noise_scale import summary

ORDERS = ("ordered", "shuffled", "reversed")


def gauge_lines(steps: int, rng: random.Random) -> list[str]:
    """Both ranks' lines a step, as gwgauge writes the fields the summary reads."""
    lines = []
    for step in range(1, steps + 1):
        averaged = (0.2 + 30 / 128) * (1 + rng.gauss(0, 0.2))
        for rank in (0, 1):
            local = (0.2 + 30 / 64) * (1 + rng.gauss(0, 0.2))
            line = {"kind": "step", "rank": rank, "step": step, "local_sq": local, "avg_sq": averaged}
            lines.append(json.dumps(line | {"rank_batch": 64, "global_batch": 128}))
    return lines


def timed_summary(path: Path) -> tuple[float, str | None]:
    start = time.perf_counter()
    said = summary(path)
    return time.perf_counter() - start, said


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20k lines only")
    sizes = (10_000,) if parser.parse_args().quick else (10_000, 100_000)
    base, failed = Path(tempfile.mkdtemp(prefix="gpuwizard-bench-gauge-")), False
    for steps in sizes:
        lines = gauge_lines(steps, random.Random(0))
        orders = {"ordered": lines, "shuffled": random.Random(1).sample(lines, len(lines)), "reversed": lines[::-1]}
        times, said = {}, set()
        for order in ORDERS:
            path = base / f"{order}-{steps}.jsonl"
            path.write_text("\n".join(orders[order]) + "\n")
            times[order], line = timed_summary(path)
            said.add(line)
        limit = 2 * times["ordered"] + 1.0
        slow = [order for order in ORDERS if times[order] > limit]
        failed |= bool(slow) or len(said) != 1
        shown = ", ".join(f"{order} {times[order]:.2f} s" for order in ORDERS)
        print(f"{2 * steps:>7} lines: {shown} (limit {limit:.2f} s){'  TOO SLOW: ' + ', '.join(slow) if slow else ''}")
        if len(said) != 1:
            print(f"  the orders gave different summaries: {sorted(map(str, said))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
