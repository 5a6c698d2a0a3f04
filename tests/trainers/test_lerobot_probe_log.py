"""The probe's LeRobot configurations log often enough to be measured (issue 35 item 7): lerobot-train writes its loss
and rate only where `step % cfg.log_freq == 0`, 200 loop steps by default (lerobot/configs/train.py and
lerobot/scripts/lerobot_train.py, 0.6.1 and main at 7427f31), more than a probe's 40 updates; the probe's variant
sets --log_freq, in main's loop steps (x grad_accum) where main counts micro-batches. LeRobot's own parser, in the
real 0.6.1 and main 7427f31 environments, reads the probe's command."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpuwizard.model import trust
from gpuwizard.model.preset_files import load_preset
from gpuwizard.planning.plan import build_command, make_plan
from gpuwizard.runner.probe.grid import Probe
from gpuwizard.runner.probe.request import ProbeRequest
from gpuwizard.trainers.registry import check_command
from support.presets import shipped_preset
from support.trainers import trainer_env

ENVS = [
    pytest.param("GPUWIZARD_LEROBOT_PYTHON", 1, id="0.6.1"),
    pytest.param("GPUWIZARD_LEROBOT_MAIN_PYTHON", 2, id="main-7427f31"),
]
OFFLINE = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
READ_BACK = """
import json, sys
import lerobot.scripts.lerobot_train as lerobot_train
from lerobot.configs.train import TrainPipelineConfig

def capture(cfg): return cfg
capture.__annotations__ = {"cfg": TrainPipelineConfig}
sys.argv = ["lerobot-train", *json.loads(sys.argv[1])]
cfg = lerobot_train.parser.wrap()(capture)()
print(json.dumps({"log_freq": cfg.log_freq, "steps": cfg.steps, "batch_size": cfg.batch_size}))
"""
"""What lerobot-train's own @parser.wrap() hands train() (as trainers/check/scripts/check_lerobot.py reads it)."""


@pytest.mark.lerobot
@pytest.mark.parametrize("variable, accum", ENVS)
def test_lerobots_own_parser_reads_the_probes_log_freq(tmp_path, monkeypatch, variable, accum):
    python = trainer_env(variable, "a LeRobot interpreter")
    monkeypatch.chdir(tmp_path)
    path = shipped_preset(
        tmp_path,
        "so100-act-1gpu",
        launch__python=python,
        launch__env=OFFLINE,
        hardware__device="cpu",
        mixed_precision="no",
        batch__grad_accum=accum,
    )
    preset = load_preset(str(path))
    trust.grant_for_session(preset)  # --trust, for this process only
    probe = Probe(ProbeRequest(preset, [1], [8]))
    assert probe.result.steps == 40, "LeRobot's probe runs 40 updates (Trainer.probe_steps)"
    plan, ctx = make_plan(probe.launch_preset(1, 8))
    spec = build_command(ctx)
    args = spec.argv[spec.argv.index(next(a for a in spec.argv if a.endswith("lerobot-train"))) + 1 :]
    assert f"--log_freq={accum}" in args, "one log line per update, in main's loop steps"
    checked = check_command(ctx, spec, use_cache=False)
    assert checked.status == "accepted", checked.summary
    read = subprocess.run(
        [python, "-c", READ_BACK, json.dumps(args)], capture_output=True, text=True, env=spec.full_env()
    )
    assert read.returncode == 0, read.stderr[-2000:]
    cfg = json.loads(read.stdout.strip().splitlines()[-1])
    assert cfg == {"log_freq": accum, "steps": 40 * accum, "batch_size": 8}
    assert cfg["steps"] // cfg["log_freq"] == 40, "40 lines where the default log_freq of 200 gave none"
