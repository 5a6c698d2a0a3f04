"""A gauge file whose steps come out of order (ranks writing late, a file stitched from parts, shuffled lines) gives
the same steps and the same noise scale as the ordered file, whole or looked at as it grows. The cost per line is
bench/gauge_order.py's (a shuffled file once made the headless summary quadratic: 198 s)."""

from __future__ import annotations

import json
import random

from gpuwizard.analysis.probe.noise_scale import GaugeFollower, read_gauge, summary


def step_lines(steps: int, rng: random.Random) -> list[str]:
    """Two ranks' lines a step, norms around |G|^2 0.2 and tr(Sigma) 30 (as bench/noise_look.py's)."""
    lines = []
    for step in range(1, steps + 1):
        averaged = (0.2 + 30 / 128) * (1 + rng.gauss(0, 0.2))
        for rank in (0, 1):
            local = (0.2 + 30 / 64) * (1 + rng.gauss(0, 0.2))
            line = {"kind": "step", "rank": rank, "step": step, "local_sq": local, "avg_sq": averaged}
            lines.append(json.dumps(line | {"rank_batch": 64, "global_batch": 128}))
    return lines


def test_a_shuffled_gauge_file_reads_as_the_ordered_one(tmp_path):
    lines = step_lines(1_000, random.Random(0))  # 2k lines: the order is what is tested; the size, bench/gauge_order.py
    ordered, shuffled = tmp_path / "ordered.jsonl", tmp_path / "shuffled.jsonl"
    ordered.write_text("\n".join(lines) + "\n")
    random.Random(1).shuffle(lines)
    shuffled.write_text("\n".join(lines) + "\n")
    assert read_gauge(shuffled).steps == read_gauge(ordered).steps
    said = summary(shuffled)
    assert said == summary(ordered) and said is not None and said.startswith("B_simple"), said


def test_a_follower_looking_while_late_steps_arrive_gives_the_whole_files_figure(tmp_path):
    """Each look merges what came late, including steps before ones already summed."""
    lines = step_lines(600, random.Random(2))
    random.Random(3).shuffle(lines)
    path = tmp_path / "gauge.jsonl"
    path.write_text("")
    follower = GaugeFollower(path)
    try:
        for start in range(0, len(lines), 100):
            with path.open("a") as fh:
                fh.write("\n".join(lines[start : start + 100]) + "\n")
            looked = follower.look()
        assert looked == GaugeFollower(path).look()
        assert looked is not None and looked.steps == 540, "all 600 steps, the first tenth a warmup"
    finally:
        follower.close()


def test_a_late_step_before_every_other_joins_the_sums(tmp_path):
    path = tmp_path / "gauge.jsonl"
    lines = step_lines(50, random.Random(4))
    path.write_text("\n".join(lines[2:] + lines[:2]) + "\n")  # step 1's two lines last
    steps = read_gauge(path).steps
    assert [s.step for s in steps] == list(range(1, 51))
    ordered = tmp_path / "ordered.jsonl"
    ordered.write_text("\n".join(lines) + "\n")
    assert steps == read_gauge(ordered).steps
