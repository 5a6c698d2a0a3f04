"""`gpuwizard probe --from-run RUN` for real (issue 35 item 4): a short demo run on 2 gloo processes saves
checkpoints; a probe of the same preset starts every configuration from its newest one (the demo's own resume:
gpuwizard/demo/train.py resume_state logs "Resuming from step N"), measures from there, and labels its B_noise and
its verdict with that stage, not the initial weights. A run whose checkpoints are gone is refused in one paragraph.
The other refusals: tests/unit/test_probe_from_run_refusals.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuwizard.analysis.probe.results import ProbeResult
from gpuwizard.analysis.probe.verdict import result_text
from gpuwizard.runs.rundir import RunDir, find_run, list_runs
from support.cli import gw_subprocess

PRESET = """\
version: 1
name: from-run
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 8}}
optim: {{lr: 1.0e-3, steps: 250}}
mixed_precision: "no"
output_dir: {root}/out
trainer_options: {{episodes: 4, log_every: 10, save_every: 100}}
monitor: {{hang_timeout_s: 60}}
"""


@pytest.mark.slow
def test_a_probe_from_a_runs_checkpoint_starts_there_and_says_so(gw, tmp_path):
    path = tmp_path / "from-run.yaml"
    path.write_text(PRESET.format(root=tmp_path))
    baseline = gw_subprocess("run", "--trust", path, "--headless", timeout=300)
    assert baseline.returncode == 0, baseline.stderr[-3000:]
    (entry,) = [e for e in list_runs("from-run") if e.status is not None and not e.status.probe]
    run_id = entry.run.run_id
    assert (tmp_path / "out" / "checkpoints" / "last").resolve().name == "000250", "saved at its end, the newest"

    ran = gw("probe", "--trust", path, "--from-run", run_id, "--gpus", "1,2", "--batch", "8", "--json")
    assert ran.code == 0, ran.err
    assert f"each from step 250 of run {run_id}, its newest checkpoint" in " ".join(ran.err.split())
    result = ProbeResult.model_validate(ran.json())
    assert (result.from_run, result.start_step) == (run_id, 250)
    assert result.lr is not None and result.lr == entry.run.plan().lr, "the lr its optimizer state holds"
    measured = [r for r in [*result.rows, *result.repeats] if r.outcome == "measured"]
    assert sorted({(r.gpus, r.per_device_batch) for r in measured}) == [(1, 8), (2, 8)]
    for row in measured:  # each run resumed from the checkpoint: the demo's own line, and steps logged past it
        assert row.run_id is not None
        run = find_run(row.run_id)
        assert run is not None and run.status().probe == result.probe_id
        log = run.log.read_text()
        assert "[demo] Resuming from step 250 (" in log, log[-2000:]
        steps = [m.step for m in run.metrics() if m.step is not None and m.samples_per_s is not None]
        assert steps and min(steps) > 250, steps
        assert row.window is not None and int(row.window.split()[1].split("-")[0]) > 250, row.window
    stage = f"step 250 of run {run_id}, its newest checkpoint"
    assert result.noise_stage == stage
    if result.noise is not None:  # the 2-process runs measured it: the evidence names the stage, never the start
        text = "".join(result_text(result).split())  # the 80 columns' breaks, at spaces or after a hyphen, gone
        assert "initialweights" not in text, text
        assert "".join(f"measured over the steps after {stage}".split()) in text, text
        if not result.verdict[0].startswith("Cannot tell"):  # a verdict B_noise decided names where it came from
            assert "".join(f"from {stage}".split()) in text, text  # (CI, 2026-12-08: under load it could not tell)
    assert RunDir(entry.run.path).status().state == "finished", "the run probed from is only read"
    assert (tmp_path / "out" / "checkpoints" / "000250" / "model.pt").is_file()

    shutil.rmtree(tmp_path / "out" / "checkpoints")
    gone = gw("probe", "--trust", path, "--from-run", run_id)
    assert gone.code == 2 and not gone.out
    assert gone.err.strip() == (
        f"from-run: --from-run = '{run_id}': run {run_id} has no complete checkpoint in {Path(tmp_path, 'out')}. "
        "Fix: probe from a run that saved one (trainer_options.save_every, or a run that reached its end), or without "
        "--from-run."
    )
