"""`run P --resume` without a run id continues only a run of this preset (issue 40 item 5): another project's
preset of the same name is refused with its runs listed and the fix (`--resume RUN_ID`), and nothing starts."""

from __future__ import annotations

import pytest

from gpuwizard.model.preset_files import load_preset_file
from gpuwizard.runner.launch.resume import find_target
from gpuwizard.runs.rundir import list_runs
from support.cli import gw_subprocess
from support.runs import newest_run

pytestmark = pytest.mark.slow

PRESET = """\
version: 1
name: same
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 1, device: cpu}}
batch: {{size: 4}}
optim: {{lr: {lr}, steps: {steps}}}
mixed_precision: "no"
trainer_options: {{log_every: 5, save_every: 5, step_time_s: 0.05}}
"""


def test_a_resume_without_an_id_continues_only_this_presets_run(tmp_path, monkeypatch):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for folder, lr, steps in ((ours, "1.0e-3", 10), (theirs, "5.0e-4", 20)):  # theirs would train 10 more steps
        folder.mkdir()
        (folder / "same.yaml").write_text(PRESET.format(root=tmp_path, lr=lr, steps=steps))
    monkeypatch.chdir(ours)
    assert gw_subprocess("run", ours / "same.yaml", "--headless", timeout=240).returncode == 0
    finished = newest_run()

    target, problems = find_target(load_preset_file(ours / "same.yaml"), None)
    assert problems == [] and target.run is not None and target.run.run_id == finished.run_id

    monkeypatch.chdir(theirs)
    refused = gw_subprocess("run", theirs / "same.yaml", "--headless", "--resume", timeout=240)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr
    assert finished.run_id in refused.stderr and "--resume RUN_ID" in refused.stderr, refused.stderr
    assert len(list(list_runs("same"))) == 1, "a resume of another project's run started"
