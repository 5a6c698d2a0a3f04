"""Isaac-GR00T's own parser on every command gpuwizard builds for it (needs GPUWIZARD_GROOT_DIR: the checkout at
Isaac-GR00T/ and its environment at venv/, built by scripts/trainer-envs.sh; see groot-env.sh).

Upstream facts, from Isaac-GR00T main 626af89 (the same in n1.7-release 23ace64 and n1.6.1-release 5dc80c4):
- gr00t/configs/finetune_config.py: FinetuneConfig, parsed by tyro in gr00t/experiment/launch_finetune.py; it has
  no resume_from_checkpoint field.
- gr00t/experiment/experiment.py run(): per_device_train_batch_size = global_batch_size // num_gpus,
  TrainingArguments(warmup_ratio=..., lr_scheduler_type="cosine" from gr00t/configs/training/training_config.py),
  and trainer.train(resume_from_checkpoint=True) always: the newest checkpoint-* in output_dir continues.
- transformers 4.57.3 (the GR00T uv.lock pin) TrainingArguments.get_warmup_steps: ceil(max_steps * warmup_ratio).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from gpuwizard.core.errors import UserError
from gpuwizard.model import trust
from gpuwizard.model.preset import with_field
from gpuwizard.model.preset_files import load_preset
from gpuwizard.planning.plan import build_command, make_plan, with_gpus
from gpuwizard.trainers.check import CheckAnswer, compare
from gpuwizard.trainers.registry import check_command, get_trainer
from support.data import DATA
from support.trainers import parse_many, trainer_env

pytestmark = pytest.mark.groot

GROOT = get_trainer("groot")


@pytest.fixture
def groot_dir() -> Path:
    return Path(trainer_env("GPUWIZARD_GROOT_DIR", "an Isaac-GR00T checkout (Isaac-GR00T/) and its venv/"))


def in_env(groot: Path, preset_name: str, checkout: Path | None = None, **fields):
    """A shipped preset pointed at the GR00T checkout and its interpreter, with fields changed."""
    preset = load_preset(preset_name)
    fields = {
        "launch.python": str(groot / "venv" / "bin" / "python"),
        "launch.workdir": str(checkout or groot / "Isaac-GR00T"),
    } | fields
    for dotted, value in fields.items():
        preset = with_field(preset, dotted, value)
    trust.grant_for_session(preset)  # the test's own edit of a shipped preset: the user's, as a wizard edit is
    return preset


def parse_many_in(groot: Path, argvs: list[list[str]], checkout: Path | None = None) -> list[dict]:
    """Each argv through check_groot.parse, in one GR00T interpreter (one torch import for all of them)."""
    return parse_many(groot / "venv" / "bin" / "python", "check_groot", argvs, cwd=checkout or groot / "Isaac-GR00T")


def test_every_generated_command_is_accepted_with_the_planned_values(groot_dir, tmp_path):
    """The shipped presets on 1, 2, 4 and 8 GPUs, with and without accumulation, fresh and resumed, in each
    mixed_precision: every argv through the real tyro parser and the TrainingArguments experiment.py builds, and
    every value the plan computed (batch per card, global batch, accumulation, lr, steps, warmup) as GR00T reads it."""
    cases = []
    for name in ("groot-n17-8gpu", "groot-n17-accum"):
        for gpus in (1, 2, 4, 8):
            for accum in (1, 4):
                for resume in (False, True):
                    out = tmp_path / f"{name}-{gpus}-{accum}-{resume}"
                    if resume:
                        (out / "checkpoint-200").mkdir(parents=True)
                        (out / "checkpoint-1000").mkdir()
                    precision = ("bf16", "fp16", "no")[len(cases) % 3]
                    preset = in_env(
                        groot_dir,
                        name,
                        **{"batch.grad_accum": accum, "output_dir": str(out), "mixed_precision": precision},
                    )
                    plan, ctx = make_plan(with_gpus(preset, gpus), resume=resume)
                    assert plan.errors == [], [p.paragraph() for p in plan.errors]
                    query = GROOT.trainer_query(ctx, build_command(ctx))
                    assert not isinstance(query, str), query
                    cases.append((name, gpus, accum, resume, query))
    answers = parse_many_in(groot_dir, [q.argv[2:] for *_, q in cases])
    for (name, gpus, accum, resume, query), answer in zip(cases, answers, strict=True):
        result = compare(CheckAnswer.model_validate(answer), query, cached=False, seconds=0)
        assert result.status == "accepted", (name, gpus, accum, resume, result.summary)
        values = answer["values"]
        assert values["per_device_batch"] * gpus == values["global_batch"] == query.expected["global_batch"]
        assert values["grad_accum"] == accum and values["gpus"] == gpus
        assert values["resume"] == ("from checkpoint-1000" if resume else "none (a fresh start)")
        assert "--resume-from-checkpoint" not in query.argv, "626af89's FinetuneConfig has no such flag"


def test_the_warmup_agrees_with_training_arguments_for_every_step_count(groot_dir):
    """100..30,000 steps at the default 5% warmup and at a preset's warmup_ratio of 0.1: the ratio gpuwizard emits
    gives the planned warmup in transformers 4.57.3's own TrainingArguments.get_warmup_steps. The old `:.6g` of
    warmup / steps gave another warmup in 27,689 of these 59,802 commands, 14,276 of them at the 5% default (10,001
    steps: plan 501, TrainingArguments 502)."""
    plan, ctx = make_plan(in_env(groot_dir, "groot-n17-8gpu"))
    sweep = []
    for steps in range(100, 30_001):
        # the trainer's default 5%, and a preset's optim.warmup_ratio 0.1 as plan.scale computes it
        for warmup in (GROOT.default_warmup_steps(ctx.preset, ctx.policy, steps, 1), math.ceil(0.1 * steps)):
            at = replace(ctx, plan=replace(plan, steps=steps, trainer_steps=steps, warmup_steps=warmup))
            argv = GROOT.build(at).argv
            sweep.append((steps, warmup, argv[argv.index("--warmup-ratio") + 1]))
    code = r"""
import json, sys
from transformers import TrainingArguments
args = TrainingArguments(output_dir="unused", use_cpu=True, report_to="none")
found = []
for steps, _, ratio in json.loads(sys.stdin.read()):
    args.warmup_ratio = float(ratio)
    found.append(args.get_warmup_steps(steps))
print(json.dumps(found))
"""
    out = subprocess.run(
        [str(groot_dir / "venv" / "bin" / "python"), "-c", code],
        input=json.dumps(sweep),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    computed = json.loads(out.stdout.strip().splitlines()[-1])
    wrong = [(s, w, r, c) for (s, w, r), c in zip(sweep, computed, strict=True) if c != w]
    assert wrong == [], f"{len(wrong)} differ, first {wrong[:5]}"
    # and through the whole path: plan, the built command, the real parser, for the example
    preset = in_env(groot_dir, "groot-n17-8gpu", **{"optim.steps": 10_001})
    plan, ctx = make_plan(preset)
    assert plan.warmup_steps == 501
    result = check_command(ctx, build_command(ctx), use_cache=False)
    assert result.status == "accepted" and result.values["warmup_steps"] == 501, result.summary


def test_resume_is_the_same_command_and_a_fresh_start_needs_an_empty_folder(groot_dir, tmp_path, gw):
    """626af89 has no --resume-from-checkpoint (tyro: "Unrecognized options"), and launch_finetune.py continues from
    the newest checkpoint-* on its own: `--resume` builds the same command; a fresh run into a folder that holds
    checkpoints is told it would resume, and the launch is blocked by the trainer's own answer."""
    out = tmp_path / "out"
    (out / "checkpoint-500").mkdir(parents=True)
    preset = in_env(
        groot_dir,
        "groot-n17-accum",
        output_dir=str(out),
        **{"dataset.root": str(DATA / "datasets" / "so100_tiny_lerobot061"), "trainer_options.uv": False},
    )
    _, fresh_ctx = make_plan(preset)
    _, resume_ctx = make_plan(preset, resume=True)
    fresh, resumed = build_command(fresh_ctx), build_command(resume_ctx)
    assert fresh.argv == resumed.argv and "--resume-from-checkpoint" not in resumed.argv
    refused = parse_many_in(
        groot_dir, [[*GROOT.trainer_query(resume_ctx, resumed).argv[2:], "--resume-from-checkpoint"]]
    )
    assert refused[0] == {"status": "refused", "error": "Unrecognized options: --resume-from-checkpoint"}

    resumed_check = check_command(resume_ctx, resumed, use_cache=False)
    assert resumed_check.status == "accepted", resumed_check.summary
    assert "resume from checkpoint-500" in resumed_check.summary
    fresh_check = check_command(fresh_ctx, fresh)
    assert fresh_check.cached, "the same command: GR00T's answer is asked once and read against either plan"
    assert fresh_check.status == "mismatch" and [m.key for m in fresh_check.mismatches] == ["resume"]
    assert "empty " + str(out) in fresh_check.problems()[0].paragraph()

    path = tmp_path / "groot.yaml"
    path.write_text(preset.to_yaml())
    warning = " ".join(gw("plan", "--trust", path, "--json").json()["warnings"])
    assert "this run would resume, not start fresh" in warning and "--resume` (the same command)" in warning
    preview = gw("preview", "--trust", path, "--resume", "--format", "json")
    assert preview.code == 0, preview.err
    preview = preview.json()
    assert "--resume-from-checkpoint" not in preview["argv"]
    from gpuwizard.runner.launch.prepare import prepare_run

    with pytest.raises(UserError) as refused_run:
        prepare_run(preset, inventory=None)
    # a fresh run into a folder that holds checkpoints is refused before GR00T would continue from them
    assert "holds checkpoints" in str(refused_run.value) and "--resume" in str(refused_run.value)

    # the newest checkpoint appears: the remembered answer is not reused
    (out / "checkpoint-900").mkdir()
    again = check_command(resume_ctx, resumed)
    assert not again.cached and "resume from checkpoint-900" in again.summary


def test_the_flag_is_passed_where_the_installed_finetune_config_has_it(groot_dir, tmp_path):
    """A GR00T whose FinetuneConfig has `resume_from_checkpoint: bool = False` (an upstream PR branch) resumes only
    with --resume-from-checkpoint: gpuwizard reads the checkout's fields and the real parser accepts the flag."""
    checkout = tmp_path / "Isaac-GR00T"
    shutil.copytree(groot_dir / "Isaac-GR00T", checkout)
    config = checkout / "gr00t" / "configs" / "finetune_config.py"
    config.write_text(
        config.read_text() + '\n    resume_from_checkpoint: bool = False\n    """Continue from output_dir."""\n'
    )
    out = tmp_path / "out"
    (out / "checkpoint-300").mkdir(parents=True)
    preset = in_env(groot_dir, "groot-n17-8gpu", checkout, output_dir=str(out))
    _, fresh_ctx = make_plan(preset)
    plan, resume_ctx = make_plan(preset, resume=True)
    resumed, fresh = build_command(resume_ctx), build_command(fresh_ctx)
    assert "--resume-from-checkpoint" in resumed.argv and "--resume-from-checkpoint" not in fresh.argv
    queries = [GROOT.trainer_query(c, s) for c, s in ((resume_ctx, resumed), (fresh_ctx, fresh))]
    answers = parse_many_in(groot_dir, [q.argv[2:] for q in queries], checkout)
    for query, answer in zip(queries, answers, strict=True):
        result = compare(CheckAnswer.model_validate(answer), query, cached=False, seconds=0)
        assert result.status == "accepted", result.summary
    assert [a["values"]["resume"] for a in answers] == ["from checkpoint-300", "none (a fresh start)"]


def test_the_lr_check_follows_the_cosine_schedule_groot_trains_with(groot_dir):
    """experiment.py's TrainingArguments (lr_scheduler_type "cosine", warmup from the ratio), stepped as
    transformers 4.57.3's Trainer does (the lr logged is read before lr_scheduler.step()): the schedule the
    run-time lr check uses, at every step of a 2,000-step run and of the issue's 10,001."""
    code = r"""
import json, sys, torch
from transformers import TrainingArguments, get_scheduler
found = []
for steps, ratio in json.loads(sys.stdin.read()):
    args = TrainingArguments(output_dir="unused", use_cpu=True, report_to="none", lr_scheduler_type="cosine",
                             warmup_ratio=float(ratio), max_steps=steps, learning_rate=1e-4)
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=args.learning_rate)
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, args.get_warmup_steps(steps), steps)
    logged = []
    for _ in range(steps):
        optimizer.step()
        logged.append(scheduler.get_last_lr()[0])
        scheduler.step()
    found.append(logged)
print(json.dumps(found))
"""
    contexts = [make_plan(in_env(groot_dir, "groot-n17-8gpu", **{"optim.steps": n}))[1] for n in (2_000, 10_001)]
    cases = []
    for ctx in contexts:
        argv = build_command(ctx).argv
        cases.append((ctx.plan.steps, argv[argv.index("--warmup-ratio") + 1]))
    out = subprocess.run(
        [str(groot_dir / "venv" / "bin" / "python"), "-c", code],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    for ctx, logged in zip(contexts, json.loads(out.stdout.strip().splitlines()[-1]), strict=True):
        schedule = GROOT.lr_schedule(ctx)
        assert [schedule.logged_at(step) for step in range(1, ctx.plan.steps + 1)] == pytest.approx(logged, abs=1e-15)
