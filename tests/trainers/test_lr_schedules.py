"""The schedule each trainer module gives the run-time lr check, against the upstream scheduler itself, step by step
(the lr the trainer's log shows at each of its steps). HF and GR00T are in tests/test_hf.py and tests/test_groot.py.

- LeRobot 0.6.1 (src/lerobot/optim/schedulers.py): CosineDecayWithWarmupSchedulerConfig (shrunk by steps /
  num_decay_steps for a shorter run) and ConstantWithWarmupSchedulerConfig; lerobot_train.py update_policy logs
  optimizer.param_groups[0]["lr"] after lr_scheduler.step().
- openpi 15a9616 (src/openpi/training/optimizer.py): CosineDecaySchedule.create(), optax's warmup_cosine_decay;
  scripts/train_pytorch.py lr_schedule is the same formula, logged at the step it was used for.
- gpuwizard's demo (gpuwizard/demo/train.py): LambdaLR(min(1, (s + 1) / warmup)), logged after scheduler.step().
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpuwizard.model.preset import parse_preset
from gpuwizard.planning.plan import build_command, make_plan
from gpuwizard.trainers.registry import get_trainer
from support.cli import flag
from support.trainers import trainer_env


def plan_context(trainer: str, policy: str, steps: int, **extra):
    data = {
        "version": 1,
        "name": "schedule",
        "trainer": trainer,
        "policy": policy,
        "dataset": {"repo_id": "me/data"},
        "hardware": {"gpus": 1},
        "batch": {"size": 8},
        "optim": {"steps": steps, **extra.pop("optim", {})},
        **extra,
    }
    plan, ctx = make_plan(parse_preset(data, "test"))
    assert plan.errors == [], [p.paragraph() for p in plan.errors]
    return ctx


def run_in(python: str, code: str, cases: list, cwd: str | None = None) -> list[list[float]]:
    out = subprocess.run(
        [python, "-c", code], input=json.dumps(cases), capture_output=True, text=True, timeout=300, cwd=cwd, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


LEROBOT_CODE = r"""
import json, sys, torch
from lerobot.optim.schedulers import ConstantWithWarmupSchedulerConfig, CosineDecayWithWarmupSchedulerConfig
found = []
for kind, warmup, decay, peak, decay_lr, steps in json.loads(sys.stdin.read()):
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
    if kind == "cosine":
        config = CosineDecayWithWarmupSchedulerConfig(
            num_warmup_steps=warmup, num_decay_steps=decay, peak_lr=peak, decay_lr=decay_lr
        )
    else:
        config = ConstantWithWarmupSchedulerConfig(num_warmup_steps=warmup)
    scheduler = config.build(optimizer, steps)
    logged = []
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        logged.append(optimizer.param_groups[0]["lr"])
    found.append(logged)
print(json.dumps(found))
"""


@pytest.mark.lerobot
def test_lerobot_schedules_are_lerobots_own():
    """smolvla's cosine_decay_with_warmup (1,000 / 30,000 to 2.5e-6) on a run shorter than its decay (shrunk), one
    longer, and one with a warmup of the plan's own; ACT with a warmup (constant_with_warmup). Each log line shows
    the mean lr since the last one (lerobot_train.py: an AverageMeter reset every log_freq steps)."""
    python = trainer_env("GPUWIZARD_LEROBOT_PYTHON", "a LeRobot 0.6.1 interpreter")
    lerobot = get_trainer("lerobot")
    contexts = [
        plan_context("lerobot", "smolvla", 6_000, trainer_options={"api": "v0.6"}),
        plan_context("lerobot", "smolvla", 32_000, trainer_options={"api": "v0.6"}),
        plan_context("lerobot", "smolvla", 6_000, optim={"warmup_ratio": 0.1}, trainer_options={"api": "v0.6"}),
        plan_context("lerobot", "act", 3_000, optim={"warmup_ratio": 0.05}, trainer_options={"api": "v0.6"}),
        plan_context(
            "lerobot", "act", 300, optim={"warmup_ratio": 0.05}, trainer_options={"api": "v0.6", "log_freq": 1}
        ),
    ]
    cases = []
    for ctx in contexts:  # what the built command sets, else the policy preset's own (catalog) values
        facts, plan, argv = ctx.policy.lerobot, ctx.plan, build_command(ctx).argv
        if flag(argv, "--scheduler.type") == "constant_with_warmup":
            lr = float(flag(argv, "--optimizer.lr"))
            cases.append(("constant", int(flag(argv, "--scheduler.num_warmup_steps")), 0, lr, 0.0, plan.trainer_steps))
            continue
        warmup = int(flag(argv, "--policy.scheduler_warmup_steps") or facts.warmup_steps)
        decay = int(flag(argv, "--policy.scheduler_decay_steps") or facts.decay_steps)
        lr = float(flag(argv, "--policy.optimizer_lr"))
        cases.append(("cosine", warmup, decay, lr, facts.decay_lr, int(flag(argv, "--steps"))))
    for ctx, case, per_step in zip(contexts, cases, run_in(python, LEROBOT_CODE, cases), strict=True):
        schedule = lerobot.lr_schedule(ctx)
        every = int(flag(build_command(ctx).argv, "--log_freq") or 200)  # TrainPipelineConfig.log_freq
        assert schedule.averaged_over == every
        logged = {n: sum(per_step[n - every : n]) / every for n in range(every, len(per_step) + 1, every)}
        ours = {n: schedule.logged_at(n) for n in logged}
        assert ours == pytest.approx(logged, rel=1e-9, abs=1e-15), case


OPENPI_CODE = r"""
import json, sys
import jax.numpy as jnp
sys.path.insert(0, "src")
from openpi.training.optimizer import CosineDecaySchedule
found = []
for warmup, peak, decay, decay_lr, steps in json.loads(sys.stdin.read()):
    schedule = CosineDecaySchedule(warmup_steps=warmup, peak_lr=peak, decay_steps=decay, decay_lr=decay_lr).create()
    found.append([float(lr) for lr in schedule(jnp.arange(steps + 1))])
print(json.dumps(found))
"""


@pytest.mark.openpi
def test_openpi_schedules_are_openpis_own():
    """pi05_droid_finetune's defaults over their own 30,000 steps and over a shorter run (decay-steps follows the
    run), and pi05_libero with its own schedule (warmup 10,000, decay 1,000,000 to 5e-5)."""
    root = trainer_env("GPUWIZARD_OPENPI_DIR", "an openpi checkout (openpi/) and its venv/")
    openpi = get_trainer("openpi")
    opts = {"backend": "jax", "uv": False}
    contexts = [
        plan_context("openpi", "pi05", 30_000, trainer_options={"config_name": "pi05_droid_finetune", **opts}),
        plan_context("openpi", "pi05", 4_000, trainer_options={"config_name": "pi05_droid_finetune", **opts}),
        plan_context("openpi", "pi05", 20_000, trainer_options={"config_name": "pi05_libero", **opts}),
    ]
    cases = []
    for ctx in contexts:  # what the built command sets, else the TrainConfig's own (catalog) values
        own, argv = openpi.source(ctx.preset).facts, build_command(ctx).argv
        cases.append(
            (
                int(flag(argv, "--lr-schedule.warmup-steps") or own.warmup_steps),
                float(flag(argv, "--lr-schedule.peak-lr") or own.peak_lr),
                int(flag(argv, "--lr-schedule.decay-steps") or own.decay_steps),
                float(flag(argv, "--lr-schedule.decay-lr") or own.decay_lr),
                int(flag(argv, "--num-train-steps") or own.num_train_steps),
            )
        )
    python = os.path.join(root, "venv", "bin", "python")
    found = run_in(python, OPENPI_CODE, cases, cwd=os.path.join(root, "openpi"))
    for ctx, case, logged in zip(contexts, cases, found, strict=True):
        schedule = openpi.lr_schedule(ctx)
        assert schedule.averaged_over == 100, "train_pytorch.py logs the mean over TrainConfig.log_interval"
        ours = [schedule.lr_at(step) for step in range(len(logged))]
        assert ours == pytest.approx(logged, rel=1e-5, abs=1e-11), case  # optax computes in float32


def test_the_demo_schedule_is_what_the_demo_logs(tmp_path):
    """A real single-process demo run with a 10-step warmup, every step logged: each lr it prints is the schedule's."""
    demo = get_trainer("demo")
    ctx = plan_context("demo", "demo", 30, optim={"lr": 1e-3, "warmup_ratio": 1 / 3})
    assert ctx.plan.warmup_steps == 10
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwizard.demo.train",
            "--steps=30",
            "--batch-size=2",
            "--lr=0.001",
            "--warmup-steps=10",
            f"--output-dir={tmp_path / 'out'}",
            f"--dataset-root={tmp_path / 'data'}",
            "--episodes=2",
            "--device=cpu",
            "--log-every=1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    lines = [demo.parse_line(line) for line in out.stderr.splitlines() + out.stdout.splitlines() if "] step " in line]
    logged = {info.step: info.lr for info in lines if info and info.lr is not None}
    assert sorted(logged) == list(range(1, 31))
    schedule = demo.lr_schedule(ctx)
    assert {step: schedule.logged_at(step) for step in logged} == pytest.approx(logged, rel=1e-3)
