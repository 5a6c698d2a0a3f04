"""The gauge file read as the job appends to it (analysis/noise_scale.GaugeFollower, what the live monitor looks at
every NOISE_EVERY_S): fed in pieces, a line torn across two looks among them, each look gives the NoiseScale that
read_gauge + estimate give of the same complete lines, on a recorded real gauge file and on a synthetic one whose
answer is known; it starts over on a file that shrank or was replaced; and its running sums give the warmup and the
windows of the estimator's definition."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from gpuwizard.analysis.probe.noise_estimate import WARMUP_SHARE, WINDOWS, GaugeStep, NoiseScale, block_means
from gpuwizard.analysis.probe.noise_scale import GaugeFollower, estimate, read_gauge
from support.data import DATA, noise_truth

REAL = DATA / "gauge" / "demo_noise_2proc_b64_held.jsonl"
"""A real gauge file: the demo's noise task (d 4, sigma 1, |w - w*| 0.25 held) for 150 steps on 2 gloo processes
through torchrun, batch 64 a rank, as gwgauge wrote it."""

REAL_TRUTH = noise_truth(4, 1.0, 0.25)
"""The recorded task's B_simple (69)."""


def whole(text: str, tmp_path: Path) -> NoiseScale | None:
    """read_gauge + estimate of the complete lines of `text`, in a file of their own."""
    path = tmp_path / "whole.jsonl"
    path.write_text(text[: text.rfind("\n") + 1])
    return estimate(read_gauge(path).steps)


def fed_in_pieces(text: str, path: Path, tmp_path: Path, pieces: int, seed: int) -> GaugeFollower:
    """Append `text` to `path` in pieces cut at random bytes (one cut inside a line for sure), look after each, and
    hold every look to the whole-file figure of the same complete lines."""
    rng = random.Random(seed)
    newline = text.index("\n", len(text) // 2)
    cuts = sorted({*rng.sample(range(1, len(text)), pieces - 2), newline - 7, newline + 1, len(text)})
    assert text[newline - 7] != "\n", "a line torn across two looks"
    follower, done = GaugeFollower(path), 0
    for cut in cuts:
        with path.open("a") as f:
            f.write(text[done:cut])
        done = cut
        assert follower.look() == whole(text[:cut], tmp_path), f"after {cut} of {len(text)} characters"
    return follower


def test_a_real_gauge_file_fed_in_pieces_gives_the_whole_files_figure_at_every_look(tmp_path):
    text = REAL.read_text()
    path = tmp_path / "gauge.jsonl"
    follower = fed_in_pieces(text, path, tmp_path, pieces=20, seed=1)
    found = estimate(read_gauge(REAL).steps)
    assert follower.look() == found and found is not None and found.low is not None and found.high is not None
    assert found.low < REAL_TRUTH < found.high, found
    assert follower.lines == read_gauge(REAL).lines == 300, "each line parsed once, none read twice"
    follower.close()


def synthetic_gauge(g_sq: float, trace: float, steps: int, seed: int = 3) -> str:
    """Two ranks' lines as the gauge writes them, norms drawn around E|G_B|^2 = |G|^2 + tr(Sigma)/B at B 64 (each
    rank's) and 128 (the average), rank 1 now and then a step behind rank 0 (a late line revises a step already read);
    among them a foreign line, a torn one and what the gauge could not measure."""
    rng = random.Random(seed)
    lines: list[str] = []
    late: list[str] = []
    for step in range(1, steps + 1):
        averaged = (g_sq + trace / 128) * (1 + rng.gauss(0, 0.2))
        for rank in (0, 1):
            local = (g_sq + trace / 64) * (1 + rng.gauss(0, 0.2))
            fields = {"local_sq": local, "avg_sq": averaged, "rank_batch": 64, "global_batch": 128}
            line = json.dumps({"kind": "step", "rank": rank, "step": step, "t": 0.0, "dt_s": 0.01, **fields})
            (late if rank == 1 and rng.random() < 0.3 else lines).append(line)
        if late and rng.random() < 0.5:
            lines += late
            late = []
        if step == 40:
            lines += ['{"kind": "step", "rank": 0, "ste', "[gpuwizard] not json", '{"kind": "unmeasured", "why": 3}']
    return "\n".join(lines + late) + "\n"


def test_a_synthetic_file_whose_answer_is_known_fed_in_pieces_gives_the_whole_files_figure(tmp_path):
    truth = 30.0 / 0.2
    text = synthetic_gauge(g_sq=0.2, trace=30.0, steps=1500)
    follower = fed_in_pieces(text, tmp_path / "gauge.jsonl", tmp_path, pieces=15, seed=2)
    found = follower.look()
    assert found == whole(text, tmp_path) and found is not None and found.low is not None and found.high is not None
    assert found.steps == 1500 - int(1500 * WARMUP_SHARE) and found.b_simple == pytest.approx(truth, rel=0.15)
    assert found.low < truth < found.high and not found.provisional, found
    follower.close()


def test_a_file_that_shrank_or_was_replaced_is_read_again_from_its_start(tmp_path):
    path = tmp_path / "gauge.jsonl"
    first, second = synthetic_gauge(0.2, 30.0, 400, seed=4), synthetic_gauge(1.0, 8.0, 300, seed=5)
    path.write_text(first)
    follower = GaugeFollower(path)
    assert follower.look() == whole(first, tmp_path)
    path.write_text(second[: len(second) // 3])  # truncated and written afresh, shorter than what was read
    assert follower.look() == whole(second[: len(second) // 3], tmp_path)
    path.with_suffix(".new").write_text(first + second)  # a new file put in its place, longer than the old one
    os.replace(path.with_suffix(".new"), path)
    assert follower.look() == whole(first + second, tmp_path)
    path.unlink()
    assert follower.look() is None, "a file gone is a run with no figure yet"
    follower.close()


def by_definition(steps: list[GaugeStep], warmup: int | None) -> NoiseScale | None:
    """The estimator as Appendix A.1 and the module say it, summed step by step: the usable steps after the warmup,
    the i-th of P in window i * W // P; the variances from the windows' means."""
    ordered = sorted(steps, key=lambda s: s.step)
    skip = int(len(ordered) * WARMUP_SHARE) if warmup is None else warmup
    pairs = [s.estimates() for s in ordered[skip:] if s.b_big > s.b_small > 0]
    if len(pairs) < 2:
        return None
    windows = min(WINDOWS, len(pairs))
    blocks = [(0, 0.0, 0.0)] * windows
    for i, (g, t) in enumerate(pairs):
        w = i * windows // len(pairs)
        blocks[w] = (blocks[w][0] + 1, blocks[w][1] + g, blocks[w][2] + t)
    means = block_means(blocks)
    g_mean, trace_mean = sum(g for g, _ in pairs) / len(pairs), sum(t for _, t in pairs) / len(pairs)
    assert (means.g_sq, means.trace) == (pytest.approx(g_mean), pytest.approx(trace_mean))
    return NoiseScale(trace_mean / g_mean if g_mean > 0 else None, *means.interval(), len(pairs), means)


@pytest.mark.parametrize("count", [2, 19, 20, 21, 137, 1000])
@pytest.mark.parametrize("warmup", [None, 0, 5])
def test_the_running_sums_give_the_warmup_and_windows_of_the_definition(count, warmup):
    """Steps in no order, some with no usable pair of batches (B_small 0, or B_big not above it) between the others."""
    rng = random.Random(count)
    steps = [
        GaugeStep(n, rng.choice([8, 8, 8, 0, 16]), rng.uniform(1, 3), rng.choice([16, 16, 8]), rng.uniform(0.5, 2))
        for n in rng.sample(range(3 * count), count)
    ]
    found, expected = estimate(steps, warmup), by_definition(steps, warmup)
    assert (found is None) == (expected is None)
    if found is None or expected is None:
        return
    assert found.steps == expected.steps
    for field in ("b_simple", "low", "high"):
        value, wanted = getattr(found, field), getattr(expected, field)
        assert value == wanted if wanted is None else value == pytest.approx(wanted, rel=1e-9), field
    for field in ("g_sq", "trace", "var_g", "var_trace", "cov", "dof"):
        assert getattr(found.means, field) == pytest.approx(getattr(expected.means, field), rel=1e-9), field
