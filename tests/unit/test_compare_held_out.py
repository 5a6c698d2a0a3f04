"""compare reads the training loss only: a run that also logs a held-out loss (dataset.eval_split) keeps its
held-out lines out of the training curve, its final loss and the loss at equal samples."""

from __future__ import annotations

import json

from gpuwizard.analysis.compare.runs import compare
from gpuwizard.runs.rundir import RunDir
from support.runs import copy_runs

RUNS = ("20261129-120000-demo-cpu", "20261201-005700-demo-cmp")


def test_held_out_lines_stay_out_of_the_training_curve(isolated_dirs):
    data = isolated_dirs / "data"
    copy_runs(data, *RUNS)
    runs = [RunDir(data / "runs" / name) for name in RUNS]
    before = compare(runs).runs
    metrics = runs[1].metrics_file
    lines = metrics.read_text().splitlines()
    held = [json.dumps({**json.loads(line), "loss": 99.0, "samples_per_s": None, "kind": "held_out"}) for line in lines]
    metrics.write_text("\n".join(line for pair in zip(lines, held) for line in pair) + "\n")
    assert sum(m.kind == "held_out" for m in runs[1].metrics()) == len(lines), "the held-out lines were written"
    after = compare(runs).runs
    assert [(f.final_loss, f.loss_at_equal_samples) for f in after] == [
        (f.final_loss, f.loss_at_equal_samples) for f in before
    ]
