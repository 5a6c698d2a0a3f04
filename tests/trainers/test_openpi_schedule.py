"""The lr schedule openpi builds from a plan: a short JAX run's cosine, and the PyTorch trainer's lr lines as means over
its own log interval (issue 28 items 1 and 4), against the real openpi (Physical-Intelligence/openpi at 15a9616,
GPUWIZARD_OPENPI_DIR): each planned command goes through openpi's own tyro CLI (check/scripts/check_openpi.py, as
scripts/train.py and scripts/train_pytorch.py call `_config.cli()`), and the schedule it parses through openpi's own
builders: CosineDecaySchedule.create() (src/openpi/training/optimizer.py:24-31, optax 0.2.4's
warmup_cosine_decay_schedule) for JAX, and train_pytorch.py's own `lr_schedule` and its log-line mean
(scripts/train_pytorch.py:472-480, 560-583).
"""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpuwizard.model.preset import parse_preset
from gpuwizard.planning.plan import build_command, make_plan
from gpuwizard.runner.launch.prepare import smoke_variant
from gpuwizard.trainers.check import SCRIPTS_DIR
from gpuwizard.trainers.registry import get_trainer
from support.data import REPO
from support.trainers import openpi_root

pytestmark = pytest.mark.openpi

OPENPI = get_trainer("openpi")

PARSE_AND_BUILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import check_openpi
import jax.numpy as jnp
import openpi.training.config as config
from openpi.training.optimizer import CosineDecaySchedule
found = []
for argv, steps in json.loads(sys.stdin.read()):
    values = check_openpi.parse(argv)["values"]
    schedule = CosineDecaySchedule(
        warmup_steps=values["warmup_steps"], peak_lr=values["lr"], decay_steps=values["decay_steps"],
        decay_lr=values["decay_lr"],
    )
    try:
        found.append({"values": values, "lrs": [float(lr) for lr in schedule.create()(jnp.arange(steps + 1))]})
    except ValueError as exc:  # optax refuses the schedule when the trainer builds it
        found.append({"values": values, "error": str(exc)})
    found[-1]["log_interval"] = config.cli().log_interval  # sys.argv as parse() left it
print("ANSWER " + json.dumps(found, default=str))
"""


def launch(root: Path) -> dict:
    """openpi's checkout, its venv, and its src/, client package and LeRobot stand-in on the path."""
    return {
        "python": str(root / "venv" / "bin" / "python"),
        "workdir": str(root / "openpi"),
        "env": {"PYTHONPATH": f"src:packages/openpi-client/src:{root / 'stubs'}", "WANDB_MODE": "disabled"},
    }


def context(root: Path, config: str, steps: int, **changes):
    """A plan of `config` on 2 devices, in the real openpi environment."""
    backend = changes.pop("backend", "jax")
    data = {
        "version": 1,
        "name": "openpi-schedule",
        "trainer": "openpi",
        "policy": "pi05",
        "dataset": {"repo_id": "me/droid"},
        "hardware": {"gpus": 2},
        "batch": {"size": 32},
        "optim": {"steps": steps, **changes.pop("optim", {})},
        "scaling": {"rule": "none", "reference_gpus": 2},
        "mixed_precision": "bf16",
        "trainer_options": {"config_name": config, "backend": backend, "uv": False, **changes.pop("options", {})},
        "launch": launch(root),
    }
    return make_plan(parse_preset(data, "test"))


def openpi_answers(root: Path, cases: list[tuple[list[str], int]]) -> list[dict]:
    """For each (check_openpi argv, steps): openpi's own parse of it and the schedule openpi builds from it."""
    out = subprocess.run(
        [str(root / "venv" / "bin" / "python"), "-c", PARSE_AND_BUILD, str(SCRIPTS_DIR)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        cwd=root / "openpi",
        env={"PYTHONPATH": f"src:packages/openpi-client/src:{root / 'stubs'}", "PATH": "/usr/bin:/bin"},
        timeout=600,
    )
    answer = [line for line in out.stdout.splitlines() if line.startswith("ANSWER ")]
    assert answer, out.stdout[-2000:] + out.stderr[-2000:]
    return json.loads(answer[-1].removeprefix("ANSWER "))


def parser_argv(ctx) -> list[str]:
    """What `gpuwizard check` hands check_openpi.py: the entry, the world size and the trainer's own arguments."""
    query = OPENPI.trainer_query(ctx, build_command(ctx))
    assert not isinstance(query, str), query
    return query.argv[2:]


def test_jax_short_runs_plan_the_schedule_openpi_builds(tmp_path):
    """Item 1. openpi keeps the config's decay_steps whatever --num-train-steps says (optimizer.py:24-31;
    config.py:752-757: pi05_libero warms up 10,000 steps and decays over 1,000,000 for 30,000 steps), and optax
    refuses only decay_steps <= warmup_steps. The shipped pi05-openpi-fsdp's --smoke variant (50 steps) was refused
    for a cosine gpuwizard had shrunk to 1,667 steps; pi05_droid_finetune (warmup 1,000, decay 30,000) at 500 steps
    likewise. A warmup of 30,000 on pi05_droid_finetune is what openpi itself refuses."""
    root = openpi_root()
    shipped = yaml.safe_load((REPO / "presets" / "pi05-openpi-fsdp.yaml").read_text())
    shipped["launch"], shipped["trainer_options"]["uv"] = launch(root), False  # where openpi is here
    plans = [
        make_plan(smoke_variant(parse_preset(shipped, "pi05-openpi-fsdp"))),
        context(root, "pi05_droid_finetune", 500),
    ]
    for plan, _ in plans:
        assert plan.errors == [], [p.paragraph() for p in plan.errors]
    refused_plan, refused_ctx = context(root, "pi05_droid_finetune", 40_000, optim={"warmup_ratio": 0.75})
    assert [p.field for p in refused_plan.errors] == ["optim.warmup_ratio"], refused_plan.errors
    assert "30,000" in refused_plan.errors[0].paragraph()
    accepted = context(root, "pi05_droid_finetune", 40_000, optim={"warmup_ratio": 0.7499})
    assert accepted[0].errors == []
    contexts = [ctx for _, ctx in plans] + [refused_ctx, accepted[1]]
    answers = openpi_answers(root, [(parser_argv(ctx), min(ctx.plan.steps, 2_000)) for ctx in contexts])
    for ctx, answer in zip(contexts, answers, strict=True):
        schedule = OPENPI.lr_schedule(ctx)
        values = answer["values"]
        assert (values["steps"], values["warmup_steps"]) == (ctx.plan.steps, schedule.warmup_steps)
        assert (values["decay_steps"], values["decay_lr"]) == pytest.approx((schedule.decay_end, schedule.end))
        if ctx is refused_ctx:
            assert "requires positive decay_steps" in answer["error"], answer
            continue
        assert "error" not in answer, answer
        ours = [schedule.lr_at(step) for step in range(len(answer["lrs"]))]
        assert ours == pytest.approx(answer["lrs"], rel=1e-5, abs=1e-11)  # optax computes in float32
    notes = [p.paragraph() for p in plans[0][0].notes]
    assert any("ending at step 1,000,000" in n and "50 steps end inside the warmup" in n for n in notes), notes


def pytorch_lr_schedule(root: Path, warmup: int, peak: float, decay: int, end: float):
    """train_pytorch.py's own lr_schedule (a closure of train_loop), compiled from its source with its free names."""
    source = (root / "openpi" / "scripts" / "train_pytorch.py").read_text()
    loop = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "train_loop")
    function = next(n for n in ast.walk(loop) if isinstance(n, ast.FunctionDef) and n.name == "lr_schedule")
    names = {"warmup_steps": warmup, "peak_lr": peak, "decay_steps": decay, "end_lr": end, "np": np}
    exec(compile(ast.Module([function], []), "train_pytorch.py", "exec"), names)  # openpi's own code
    return names["lr_schedule"]


def test_pytorch_lr_lines_are_means_over_the_runs_own_log_interval():
    """Item 4. train_pytorch.py:560-583 appends optim.param_groups[0]["lr"] every step and, when global_step %
    log_interval == 0, logs their mean and empties the list; the monitor's schedule must average the same window
    (trainer_options.log_interval, else the TrainConfig's: 100 for pi05_droid_finetune), not always 100."""
    root = openpi_root()
    intervals = (None, 7, 25, 1000)
    contexts = [
        context(root, "pi05_droid_finetune", 3_000, backend="pytorch", options={"log_interval": i} if i else {})[1]
        for i in intervals
    ]
    answers = openpi_answers(root, [(parser_argv(ctx), 0) for ctx in contexts])
    for interval, ctx, answer in zip(intervals, contexts, answers, strict=True):
        every, values = answer["log_interval"], answer["values"]
        assert every == (interval or 100), "openpi's own parse of --log-interval (TrainConfig.log_interval: 100)"
        lr_at = pytorch_lr_schedule(
            root, values["warmup_steps"], values["lr"], values["decay_steps"], values["decay_lr"]
        )
        logged, infos = {}, []
        for step in range(ctx.plan.steps):  # train_pytorch.py's loop: the lr set for global_step, logged every interval
            infos.append(lr_at(step))
            if step % every == 0:
                logged[step], infos = sum(infos) / len(infos), []
        schedule = OPENPI.lr_schedule(ctx)
        assert schedule.averaged_over == every
        assert {step: schedule.logged_at(step) for step in logged} == pytest.approx(logged, rel=1e-9), interval
