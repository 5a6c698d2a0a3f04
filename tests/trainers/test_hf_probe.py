"""`gpuwizard probe` of a real HF Trainer script (tests/data/hf/tiny_train.py on CPU processes; needs
GPUWIZARD_HF_PYTHON: transformers 5.24.0): every configuration gets a samples/s, though the Trainer logs none per
step (trainer.py:2262-2268, _maybe_log_save_evaluate: loss, grad_norm, learning_rate, epoch; the throughput only in
the final dict). The monitor reads it from the Trainer's own bar (trainer_callback.py:645, tqdm(total=max_steps):
its it/s) times the total train batch of its banner."""

from __future__ import annotations

import pytest

from gpuwizard.core.yamlio import dumps
from gpuwizard.runs.rundir import list_runs
from support.data import REPO
from support.trainers import trainer_env

SCRIPT = REPO / "tests" / "data" / "hf" / "tiny_train.py"


@pytest.mark.hf
@pytest.mark.slow
def test_a_probe_of_an_hf_trainer_script_measures_samples_per_s(gw, tmp_path):
    python = trainer_env("GPUWIZARD_HF_PYTHON", "a transformers 5.24 interpreter")
    preset = tmp_path / "hf-probe.yaml"
    preset.write_text(
        dumps(
            {
                "version": 1,
                "name": "hf-probe",
                "trainer": "hf",
                "policy": "act",
                "dataset": {"repo_id": "local/synthetic"},
                "hardware": {"gpus": 1, "device": "cpu"},
                "batch": {"size": 4},
                "optim": {"lr": 1.0e-3, "steps": 2000},
                "mixed_precision": "no",
                "trainer_options": {"script": str(SCRIPT)},
                "launch": {"python": python, "env": {"HF_HUB_OFFLINE": "1"}},
                "output_dir": str(tmp_path / "out"),
                "monitor": {"hang_timeout_s": 300},
            }
        )
    )
    result = gw("probe", "--trust", preset, "--gpus", "1,2", "--batch", "4", "--json")
    assert result.code == 0, result.err
    probe = result.json()
    assert sorted(row["gpus"] for row in probe["rows"]) == [1, 2], "1 and 2 CPU processes (issue 28, done when)"
    for row in probe["rows"]:
        assert row["outcome"] == "measured", row["detail"]
        assert row["samples_per_s"] > 0 and row["window"].startswith("steps ")
    run = next(e.run for e in list_runs("hf-probe") if e.status is not None and e.status.world_size == 1)
    timed = [m for m in run.metrics() if m.samples_per_s is not None]
    assert len(timed) >= 8, "a loss dict every few steps, each with the bar's rate x the batch"
    log = (run.path / "log.txt").read_text()
    assert "it/s]" in log and "Total train batch size (w. parallel, distributed & accumulation) = 4" in log
    assert run.progress().samples_per_s
