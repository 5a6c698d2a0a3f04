"""The optimizer and schedule lerobot-train builds from a plan: ACT's two parameter groups at the planned lrs, a
preset's own schedule under accumulation counted in updates, and no precision flag on CPU (issue 28 items 3 and 5, issue
25), against the real LeRobot: 0.6.1 (GPUWIZARD_LEROBOT_PYTHON) and main at 7427f31 (GPUWIZARD_LEROBOT_MAIN_PYTHON, the
wheel in shared/vendor). Each planned command goes through lerobot-train's own parser and make_optimizer_and_scheduler
(check/scripts/check_lerobot.py, in one interpreter per environment), and the schedule through LeRobot's own scheduler
configs.
"""

from __future__ import annotations

import json
import math
import os
import subprocess

import pytest

from gpuwizard.model.preset import parse_preset
from gpuwizard.planning.plan import build_command, make_plan
from gpuwizard.trainers.registry import get_trainer
from support.cli import flag
from support.trainers import parse_many, trainer_env

pytestmark = pytest.mark.lerobot

LEROBOT = get_trainer("lerobot")
ENVS = [pytest.param("GPUWIZARD_LEROBOT_PYTHON", id="0.6.1"), pytest.param("GPUWIZARD_LEROBOT_MAIN_PYTHON", id="main")]


def context(python: str, policy: str, **changes):
    """A plan of `policy` on 2 CPU processes in the real LeRobot environment `python`."""
    data = {
        "version": 1,
        "name": "lerobot-optimizer",
        "trainer": "lerobot",
        "policy": policy,
        "dataset": {"repo_id": "me/pick"},
        "hardware": {"gpus": 2, "device": "cpu"},
        "batch": {"size": 8, **changes.pop("batch", {})},
        "optim": {"steps": 20_000, **changes.pop("optim", {})},
        "scaling": {"rule": "none", "reference_gpus": 2, **changes.pop("scaling", {})},
        "launch": {"python": python, "env": {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}},
        **changes,
    }
    return make_plan(parse_preset(data, "test"))


def answers(python: str, contexts: list, extra_path: str | None = None) -> list[tuple[dict, dict]]:
    """(lerobot-train's own answer, the plan's expected values) for each context, from one interpreter."""
    queries = [LEROBOT.trainer_query(ctx, build_command(ctx)) for ctx in contexts]
    assert not any(isinstance(q, str) for q in queries), queries
    env = {**os.environ, "WORLD_SIZE": "2", "HF_HUB_OFFLINE": "1"} | ({"PYTHONPATH": extra_path} if extra_path else {})
    found = parse_many(python, "check_lerobot", [q.argv[2:] for q in queries], env=env)
    return [(answer, query.expected) for answer, query in zip(found, queries, strict=True)]


@pytest.mark.parametrize("variable", ENVS)
def test_act_trains_both_optimizer_groups_at_the_planned_lrs(variable):
    """Item 3. ACTPolicy.get_optim_params (lerobot/policies/act/modeling_act.py:72-91, 0.6.1 and main at 7427f31)
    gives model.backbone a group at optimizer_lr_backbone (1e-5, configuration_act.py:128). With only
    --policy.optimizer_lr passed, lr 3e-5 left the backbone at 1e-5 while linear_lr's warmup merged it into one group
    at 6e-5 (lerobot/optim/factory.py:37), and `check` said "as planned". Now the backbone flag is passed, scaled by
    the rule's factor alone; lerobot-train's own optimizer holds exactly the planned groups; the plan shows both."""
    python = trainer_env(variable, "a LeRobot interpreter")
    own = dict(optim={"lr": 3e-5})
    cases = [
        (context(python, "act", **own), [3e-5, 1e-5]),
        (
            context(python, "act", scaling={"rule": "sqrt_lr", "reference_gpus": 1}, **own),
            [3e-5 * 2**0.5, 2**0.5 * 1e-5],
        ),
        (
            context(
                python, "act", scaling={"rule": "linear_lr", "reference_gpus": 1}, optim={"lr": 3e-5, "warmup_ratio": 0}
            ),
            [6e-5, 2e-5],
        ),
        (context(python, "act", scaling={"rule": "linear_lr", "reference_gpus": 1}, **own), [6e-5]),
    ]
    for (plan, _), _ in cases:
        assert plan.errors == [], [p.paragraph() for p in plan.errors]
    found = answers(python, [ctx for (_, ctx), _ in cases])
    for ((plan, ctx), groups), (answer, expected) in zip(cases, found, strict=True):
        assert answer["status"] == "parsed", answer
        built = answer["values"].get("group_lrs", [answer["values"]["lr"]])  # check_lerobot lists two or more
        assert built == pytest.approx(groups, rel=1e-5), "lerobot-train's own param groups"
        planned = expected["group_lrs"] if len(groups) > 1 else [pytest.approx(expected["lr"])]
        assert planned == built, "the plan expects what lerobot-train builds (check compares these lists as equal)"
        notes = " ".join(p.paragraph() for p in plan.notes)
        argv = build_command(ctx).argv
        if len(groups) == 2:
            assert float(flag(argv, "--policy.optimizer_lr_backbone")) == pytest.approx(groups[1], rel=1e-5)
            assert f"optimizer_lr_backbone {groups[1]:.3g} (its default 1e-05" in notes, notes
            assert f"main group at {groups[0]:.3g}" in notes, notes
        else:
            assert "--use_policy_training_preset=false" in argv
            assert "one group at lr 6e-05" in notes and "optim.warmup_ratio: 0 keeps" in notes, notes


LEROBOT_SCHEDULE = r"""
import json, sys, torch
from lerobot.optim.schedulers import CosineDecayWithWarmupSchedulerConfig
warmup, decay, peak, floor, loop_steps, per = json.loads(sys.stdin.read())
optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
scheduler = CosineDecayWithWarmupSchedulerConfig(
    num_warmup_steps=warmup, num_decay_steps=decay, peak_lr=peak, decay_lr=floor
).build(optimizer, loop_steps)
after_update = []
for loop in range(1, loop_steps + 1):  # lerobot_train.py:235-237: lr_scheduler.step() on every micro-batch
    optimizer.step()
    scheduler.step()
    if loop % per == 0:
        after_update.append(optimizer.param_groups[0]["lr"])
print(json.dumps(after_update))
"""


def test_main_with_accumulation_says_where_the_presets_own_schedule_ends_in_updates():
    """Item 5. On LeRobot main (7427f31) --steps counts loop steps, one micro-batch per worker, and the scheduler
    steps on each (scripts/lerobot_train.py:235-237; configs/accelerator.py: step_scheduler_with_optimizer False),
    while smolvla's preset warmup and cosine (1,000 / 30,000, optim/schedulers.py:144-161) are loop steps nothing
    scales: at 20,000 updates with grad_accum 2, lerobot-train's own schedule warms up until update 500 and sits at
    its floor from update 15,000. The plan says so, in updates."""
    python = trainer_env("GPUWIZARD_LEROBOT_MAIN_PYTHON", "LeRobot main's interpreter")
    extras = trainer_env("GPUWIZARD_LEROBOT_EXTRAS", "the folder of lerobot[xvla,pi,smolvla,diffusion]'s packages")
    plan, ctx = context(python, "smolvla", batch={"grad_accum": 2}, trainer_options={"api": "main"})
    assert plan.errors == [], [p.paragraph() for p in plan.errors]
    ((answer, expected),) = answers(python, [ctx], extras)
    assert answer["status"] == "parsed", answer
    values = answer["values"]
    assert (values["steps"], values["grad_accum"]) == (40_000, 2)
    assert (values["warmup_steps"], values["decay_steps"]) == (1_000, 30_000), "the preset's own, in loop steps"
    lrs = json.loads(
        subprocess.run(
            [python, "-c", LEROBOT_SCHEDULE],
            input=json.dumps(
                [values["warmup_steps"], values["decay_steps"], values["lr"], values["decay_lr"], 40_000, 2]
            ),
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        ).stdout.splitlines()[-1]
    )
    # the warmup's last update is the last whose lr rose (LeRobot's cosine counts from step 0, so none reads the peak)
    peak_from = next(u for u in range(2, len(lrs) + 1) if lrs[u - 1] < lrs[u - 2])
    floor_from = next(u for u in range(peak_from, len(lrs) + 1) if lrs[u - 1] <= values["decay_lr"] * (1 + 1e-9))
    assert (peak_from, floor_from) == (math.ceil(1_000 / 2), math.ceil(30_000 / 2))
    notes = " ".join(p.paragraph() for p in plan.notes)
    assert f"warmup ends at update {peak_from:,} (loop step 1,000)" in notes, notes
    assert f"at update {floor_from:,} (loop step 30,000), of the run's 20,000 updates" in notes, notes


@pytest.mark.parametrize("variable", ENVS)
def test_a_cpu_run_warns_about_precision_only_where_the_preset_set_it(variable):
    """Issue 25: a LeRobot preset that never set mixed_precision (the default bf16) warned "mixed precision is not
    applied on CPU runs" on every CPU dry run. lerobot-train gets no precision flag on CPU either way (and on main
    --accelerator.mixed_precision stays its default "no"); only a preset that asked for bf16 or fp16 hears why."""
    python = trainer_env(variable, "a LeRobot interpreter")
    unset, explicit = context(python, "act"), context(python, "act", mixed_precision="bf16")
    assert [p.field for p in unset[0].warnings if p.field == "mixed_precision"] == []
    assert [p.field for p in explicit[0].warnings if p.field == "mixed_precision"] == ["mixed_precision"]
    for answer, expected in answers(python, [unset[1], explicit[1]]):
        assert answer["status"] == "parsed", answer
        assert answer["values"].get("mixed_precision", "no") == "no" == expected.get("mixed_precision", "no")
    assert build_command(unset[1]).argv == build_command(explicit[1]).argv, "the same float32 command"
