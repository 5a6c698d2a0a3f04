"""LeRobot version probing and the real `lerobot-train` (when a LeRobot environment is configured)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import gw_subprocess
from gpuwizard.trainers import lerobot
from gpuwizard.trainers.lerobot import _probe

LEROBOT_PYTHON = os.environ.get("GPUWIZARD_LEROBOT_PYTHON")
LEROBOT_DATASET = os.environ.get("GPUWIZARD_LEROBOT_DATASET")


def fake_env(root: Path, version: str, parallelism: bool) -> Path:
    """A training environment with a given lerobot layout: bin/python, bin/lerobot-train, site-packages."""
    site = root / "site"
    (site / "lerobot" / "configs").mkdir(parents=True)
    (site / "lerobot" / "__init__.py").write_text("raise ImportError('the probe must not import lerobot')\n")
    (site / "lerobot" / "configs" / "__init__.py").write_text("")
    if parallelism:
        (site / "lerobot" / "configs" / "parallelism.py").write_text("")
    dist = site / f"lerobot-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: lerobot\nVersion: {version}\n")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    train = bin_dir / "lerobot-train"
    train.write_text("#!/bin/sh\nexit 0\n")
    for exe in (python, train):
        exe.chmod(0o755)
    return python


PRESET = """\
version: 1
name: act-probe
trainer: lerobot
policy: act
dataset: {{repo_id: me/pick}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 8, grad_accum: {accum}}}
optim: {{lr: 1.0e-5, steps: 100}}
mixed_precision: "no"
launch: {{python: {python}}}
"""


@pytest.mark.parametrize("version, parallelism, api", [("0.6.1", False, "v0.6"), ("0.6.2.dev0", True, "main")])
def test_probe_tells_release_from_main_without_importing_lerobot(tmp_path, version, parallelism, api):
    _probe.cache_clear()
    python = fake_env(tmp_path / "env", version, parallelism)
    assert _probe(str(python)) == {"version": version, "parallelism": parallelism}
    preset = tmp_path / "p.yaml"
    preset.write_text(PRESET.format(python=python, accum=1))
    spec = json.loads(gw_subprocess("preview", preset, "--format", "json").stdout)
    assert spec["argv"][spec["argv"].index("--max-restarts=0") + 1] == str(python.parent / "lerobot-train"), (
        "the resolved path, never $(which ...)"
    )
    has_accum_flag = any(a.startswith("--accelerator.gradient_accumulation.steps") for a in spec["argv"])
    assert has_accum_flag == (api == "main")
    preset.write_text(PRESET.format(python=python, accum=2))
    result = gw_subprocess("plan", preset)
    assert (result.returncode == 0) == (api == "main"), result.stderr


def test_probe_is_remembered_until_the_environment_changes(tmp_path, monkeypatch):
    """A real interpreter's answer is kept on disk; a branch switch or an upgrade is noticed."""
    _probe.cache_clear()
    fake_env(tmp_path / "env", "0.6.1", parallelism=False)
    site = tmp_path / "env" / "site"
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.symlink_to(os.path.realpath(sys.executable))  # a binary, unlike the fake env's sh wrapper
    monkeypatch.setenv("PYTHONPATH", str(site))
    assert _probe(str(python)) == {"version": "0.6.1", "parallelism": False}

    def no_subprocess(*args, **kwargs):
        raise AssertionError("probed again although nothing changed")

    _probe.cache_clear()
    with monkeypatch.context() as patched:
        patched.setattr(lerobot.subprocess, "run", no_subprocess)
        assert _probe(str(python)) == {"version": "0.6.1", "parallelism": False}

    (site / "lerobot" / "configs" / "parallelism.py").write_text("")  # git switch to main in an editable checkout
    _probe.cache_clear()
    assert _probe(str(python)) == {"version": "0.6.1", "parallelism": True}
    (site / "lerobot-0.6.1.dist-info").rename(site / "lerobot-0.7.0.dist-info")  # pip install --upgrade
    (site / "lerobot-0.7.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: lerobot\nVersion: 0.7.0\n")
    _probe.cache_clear()
    assert _probe(str(python)) == {"version": "0.7.0", "parallelism": True}


def test_version_can_be_stated_where_it_cannot_be_probed(gw, write_preset, tmp_path):
    _probe.cache_clear()
    text = PRESET.format(python=sys.executable, accum=2)
    assert gw("plan", write_preset(text)).code == 2
    plan = gw("plan", write_preset(text + "trainer_options: {api: main}\n"), "--json")
    assert plan.code == 0 and plan.json()["effective_batch"] == 32


@pytest.mark.lerobot
@pytest.mark.skipif(
    not (LEROBOT_PYTHON and LEROBOT_DATASET),
    reason="set GPUWIZARD_LEROBOT_PYTHON and GPUWIZARD_LEROBOT_DATASET (see README)",
)
def test_real_lerobot_train_on_cpu_with_two_processes(tmp_path):
    """Plan, launch and parse the real lerobot-train: ACT, 2 CPU processes, linear lr scaling."""
    preset = tmp_path / "lerobot-real.yaml"
    preset.write_text(f"""\
version: 1
name: lerobot-real
trainer: lerobot
policy: act
dataset: {{repo_id: local/so100_tiny, root: {LEROBOT_DATASET}}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 2}}
optim: {{lr: 1.0e-5, steps: 10}}
scaling: {{rule: linear_lr, reference_gpus: 1}}
mixed_precision: "no"
launch:
  python: {LEROBOT_PYTHON}
  env: {{HF_HUB_OFFLINE: 1, WANDB_MODE: disabled}}
  extra_args: ["--policy.pretrained_backbone_weights=null", "--num_workers=0"]
trainer_options: {{log_freq: 5, save_freq: 10}}
output_dir: {tmp_path}/out
monitor: {{hang_timeout_s: 300}}
""")
    result = gw_subprocess("run", preset, "--headless", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    from gpuwizard.runner.rundir import all_runs

    run = all_runs()[0]
    progress = run.read_json("progress.json")
    assert (progress["step"], progress["total"], progress["finished"]) == (10, 10, True)
    assert progress["lr"] == pytest.approx(2e-5), "the linearly scaled lr reached LeRobot"
    assert [e["kind"] for e in run.events()] == [], "banner and lr agree with the plan"
    assert (tmp_path / "out" / "checkpoints" / "000010" / "pretrained_model" / "model.safetensors").is_file()
