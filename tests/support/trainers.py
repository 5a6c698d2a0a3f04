"""The real trainers' environments: found from their variables (or skipped), probed in one interpreter, or faked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def trainer_env(variable: str, what: str) -> str:
    """A real trainer environment named by `variable`; skipped without one, a failure where
    GPUWIZARD_REQUIRE_TRAINERS=1 (set by .ci/run, which builds them with scripts/trainer-envs.sh)."""
    value = os.environ.get(variable)
    if value and Path(value).exists():
        return value
    reason = f"set {variable} to {what} (scripts/trainer-envs.sh builds it and prints the variables)"
    if os.environ.get("GPUWIZARD_REQUIRE_TRAINERS"):
        pytest.fail(reason)
    pytest.skip(reason)


def openpi_root() -> Path:
    """The openpi environment's folder: its checkout (openpi/), venv/ and the LeRobot stand-in (stubs/)."""
    return Path(trainer_env("GPUWIZARD_OPENPI_DIR", "an openpi environment (shared/scripts/openpi-env.sh)"))


def parse_many(
    python: str | Path, module: str, argvs: list[list[str]], cwd: Path | None = None, env: dict[str, str] | None = None
) -> list[dict]:
    """Each argv through the check script `module`'s parse(), in one training interpreter (one import of the trainer
    for them all), answered as gwcheck.main answers."""
    from gpuwizard.trainers.check import SCRIPTS_DIR

    out = subprocess.run(
        [str(python), "-c", batch_driver(module), str(SCRIPTS_DIR)],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env=env,
    )
    answers = [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{"status"')]
    assert len(answers) == len(argvs), out.stdout[-2000:] + out.stderr[-2000:]
    return answers


def batch_driver(module: str) -> str:
    """A script that runs one probe's parse() on many argvs in one interpreter (argv[1]: the check scripts folder, the
    argvs as JSON on stdin), answering each like gwcheck.main does: one training interpreter start for them all."""
    return f"""
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[1])
import gwcheck, {module}
for argv in json.loads(sys.stdin.read()):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            found = {module}.parse(argv)
        print(json.dumps({{"status": "parsed", **found}}, default=str))
    except SystemExit:
        print(json.dumps({{"status": "refused", "error": gwcheck.last_error_line(err.getvalue())}}))
    except Exception as exc:
        print(json.dumps({{"status": "refused", "error": f"{{type(exc).__name__}}: {{exc}}"}}))
"""


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


def metadata_venv(folder: Path, packages: dict[str, str]) -> Path:
    """A real venv (no pip, fast) whose site-packages holds each named distribution's metadata, and its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    site = next(folder.glob("lib/python3*/site-packages"))
    for name, version in packages.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return folder / "bin" / "python3"


FINISHED_STEPS = 12
"""Updates of the shared finished LeRobot runs (tests/trainers/conftest.py): the gauge test reads 10 gauged steps or
more of them; their one checkpoint is at the end."""
SHARES_061_RUN = pytest.mark.xdist_group("lerobot-0.6.1-run")
"""On the tests that read LeRobot 0.6.1's finished run: `make test` (--dist loadgroup) gives them one worker, which
makes the run once."""

SMALL_ACT = [
    "--policy.dim_model=64",
    "--policy.n_heads=2",
    "--policy.dim_feedforward=128",
    "--policy.n_encoder_layers=1",
    "--policy.n_vae_encoder_layers=1",
    "--policy.chunk_size=10",
    "--policy.n_action_steps=10",
]
"""ACTConfig's own fields (lerobot/policies/act/configuration_act.py, 0.6.1 and main at 7427f31), shrunk from
dim_model 512, dim_feedforward 3200, 4 + 4 encoder layers and chunks of 100: what the real-trainer tests prove (the
plan's steps, samples, lr, checkpoints, resume, the gauge's hook on DDP) does not depend on the model's size, and a
loop step on 2 CPU processes takes 0.9 s instead of 3.6 s (main at load 6; resnet18, the smallest backbone, stays)."""


def real_preset(tmp_path: Path, variable: str, accum: int, steps: int, save_freq: int, gauge: bool = False) -> Path:
    """ACT on the tiny dataset, 2 CPU processes, linear_lr from 1 GPU, logging every step, the model kept small."""
    python = trainer_env(variable, "a LeRobot interpreter (scripts/envs/lerobot-env.sh)")
    dataset = os.environ.get("GPUWIZARD_LEROBOT_DATASET") or Path(python).parents[2] / "so100_tiny"  # beside its venv
    preset = tmp_path / "lerobot-real.yaml"
    preset.write_text(f"""\
version: 1
name: lerobot-real
trainer: lerobot
policy: act
dataset: {{repo_id: local/so100_tiny, root: {dataset}}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 2, grad_accum: {accum}}}
optim: {{lr: 1.0e-5, steps: {steps}}}
scaling: {{rule: linear_lr, reference_gpus: 1}}
mixed_precision: "no"
launch:
  python: {python}
  env: {{HF_HUB_OFFLINE: "1", WANDB_MODE: disabled}}
  extra_args: {json.dumps(["--policy.pretrained_backbone_weights=null", "--num_workers=0", *SMALL_ACT])}
trainer_options: {{log_freq: 1, save_freq: {save_freq}}}
output_dir: {tmp_path}/out
monitor: {{gauge: {str(gauge).lower()}, hang_timeout_s: 300}}
""")
    return preset
