"""What the plan says about a LeRobot command before anything runs: version limits, precision, sharding, the lr
LeRobot logs and schedules that do not fit the run (LeRobotTrainer.check)."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from gpuwizard.core.errors import Problem, note, problem, warning
from gpuwizard.core.kinds import ProblemLevel
from gpuwizard.model.trainer_options import LeRobotOptions
from gpuwizard.trainers.check.doctor_facts import flag_value

if TYPE_CHECKING:
    from gpuwizard.model.job import BuildContext
    from gpuwizard.runs.records import LrSchedule
    from gpuwizard.trainers.lerobot.install import LeRobotInstall

ACCELERATE_PREFIXES = ("ACCELERATE_", "FSDP_", "PARALLELISM_CONFIG_")
MAIN_REFUSED_ENV = (
    "ACCELERATE_USE_FSDP",
    "ACCELERATE_USE_PARALLELISM_CONFIG",
    "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
)
"""lerobot/distributed/factory.py (main at 7427f31), guard_against_env_interference: the variables it refuses."""
LOG_FREQ, SAVE_FREQ = 200, 20_000
"""TrainPipelineConfig's log_freq and save_freq, in loop steps (lerobot/configs/train.py, 0.6.1 and main at 7427f31:
a line at step % log_freq == 0, a checkpoint at step % save_freq == 0 and after the last step)."""


def group_lrs(ctx: BuildContext) -> dict[str, float]:
    """The policy's parameter groups with an lr of their own (ACT's optimizer_lr_backbone: ACTPolicy.get_optim_params,
    lerobot/policies/act/modeling_act.py:72-91; 1e-5 in configuration_act.py:128, 0.6.1 and main at 7427f31), each
    scaled by the rule's factor as optimizer_lr is; passed always, since lerobot-train would keep the default while
    --policy.optimizer_lr moves."""
    plan, facts = ctx.plan, ctx.policy.lerobot
    return {name: value * plan.lr / plan.base_lr for name, value in (facts.group_lrs if facts else {}).items()}


def presets_bypassed(ctx: BuildContext) -> bool:
    """A warmup on a policy preset without a scheduler needs --use_policy_training_preset=false, and then
    make_optimizer_and_scheduler trains policy.parameters() in one group (lerobot/optim/factory.py:37)."""
    facts = ctx.policy.lerobot
    return bool(ctx.plan.warmup_steps) and (facts is None or facts.scheduler == "none")


def plan_findings(ctx: BuildContext, install: LeRobotInstall) -> list[Problem]:
    preset, plan = ctx.preset, ctx.plan
    found: list[Problem] = []
    if not install.asked and LeRobotOptions.of(preset).api == "auto":
        found.append(
            warning(
                "trainer_options.api",
                f"which LeRobot {ctx.python} has is not known: this preset is not trusted yet, so its interpreter "
                "was not asked; the plan assumes the 0.6.1 release API",
                "trust it (the wizard asks at ctrl+r; `gpuwizard presets trust PRESET`), or state trainer_options.api",
            )
        )
    elif not install.detected and LeRobotOptions.of(preset).api == "auto":
        found.append(
            warning(
                "trainer_options.api",
                f"could not find lerobot in {ctx.python}; assuming the 0.6.1 release API",
                "set launch.python to the LeRobot environment's interpreter, or state trainer_options.api: v0.6 or "
                "main",
            )
        )
    if install.train_path is None:
        found.append(
            warning(
                "launch.python",
                f"no lerobot-train next to {ctx.python} or on PATH; run will refuse until LeRobot is installed there",
                "pip install 'lerobot[training]' in the training environment, or point launch.python at it",
            )
        )
    if preset.batch.grad_accum > 1 and install.api == "v0.6":
        found.append(
            problem(
                "batch.grad_accum",
                "LeRobot 0.6.1 has no gradient accumulation (it arrived on main with PR #4010)",
                "set batch.grad_accum: 1 and raise batch.size, or use LeRobot main (trainer_options.api: main)",
                value=preset.batch.grad_accum,
            )
        )
    if plan.strategy == "fsdp":
        found += fsdp_findings(ctx, install)
    found += precision_findings(ctx, install)
    leaked = sorted(n for n in set(os.environ) | set(preset.launch.env) if n.startswith(ACCELERATE_PREFIXES))
    if leaked:
        found.append(
            warning(
                "launch.env",
                f"accelerate-configuring variables {', '.join(leaked)} will be removed from the job's environment: "
                "they can override the planned precision or sharding (LeRobot main itself refuses only "
                f"{', '.join(MAIN_REFUSED_ENV)}, unless LEROBOT_ALLOW_ACCELERATE_ENV=1)",
                "unset them in your shell to silence this",
            )
        )
    found += group_lr_notes(ctx) + logged_group_notes(ctx) + unshrunk_warmup_findings(ctx)
    if preset.dataset.repo_id is None:
        found.append(
            problem(
                "dataset.repo_id",
                "lerobot-train needs a dataset repo id (--dataset.repo_id), even for a local dataset.root",
                "set dataset.repo_id, e.g. local/my_dataset next to dataset.root",
                value=None,
            )
        )
    if not LeRobotOptions.of(preset).repo_id:
        found.append(
            problem(
                None,
                "the policy is not pushed to the Hub (--policy.push_to_hub=false)",
                "set trainer_options.repo_id to push",
                level=ProblemLevel.NOTE,
            )
        )
    found += cloud_target_findings(ctx) + period_findings(ctx)
    if ctx.output_path.exists() and not ctx.resume:
        found.append(
            problem(
                "output_dir",
                "already exists; lerobot-train refuses to start in an existing output dir unless resuming",
                f"continue it with `gpuwizard run {preset.name} --resume`, choose a new output_dir, or delete the "
                "folder",
                value=ctx.output_dir,
            )
        )
    return found


def precision_findings(ctx: BuildContext, install: LeRobotInstall) -> list[Problem]:
    """A CPU run trains in float32: worth a word only where the preset asked for mixed precision itself."""
    preset, policy, facts = ctx.preset, ctx.policy, ctx.policy.lerobot
    mp = preset.mixed_precision
    if ctx.plan.device == "cpu":
        if mp == "no" or "mixed_precision" not in preset.model_fields_set:
            return []
        return [
            warning(
                "mixed_precision",
                "mixed precision is not applied on CPU runs; the job trains in float32",
                "set mixed_precision: no for CPU dry runs",
                value=mp,
            )
        ]
    if facts and facts.bf16_flag and mp == "fp16":
        return [
            problem(
                "mixed_precision",
                f"{policy.key} in LeRobot autocasts only to bf16 (--policy.{facts.bf16_flag}); there is no fp16 path",
                "use mixed_precision: bf16, or no for float32",
                value="fp16",
            )
        ]
    if install.api == "v0.6" and mp == "fp16" and facts and facts.dtype_field and "float16" not in facts.dtype_choices:
        # lerobot_train.py 0.6.1 drives accelerate's autocast from policy.dtype alone when the policy has one, and
        # PI0Config/PI05Config/PI0FastConfig/XVLAConfig.__post_init__ raise "Invalid dtype: float16"
        return [
            problem(
                "mixed_precision",
                f"LeRobot 0.6.1 takes {policy.key}'s mixed precision from --policy.dtype, which accepts only "
                f'{" or ".join(facts.dtype_choices)} (float16 stops lerobot-train at start-up: "Invalid dtype: '
                'float16"), so there is no fp16 path',
                "use mixed_precision: bf16, or no for float32; LeRobot main runs fp16 autocast through "
                "--accelerator.mixed_precision (trainer_options.api: main)",
                value="fp16",
            )
        ]
    if install.api == "v0.6" and mp == "bf16" and facts and not facts.dtype_field and not facts.bf16_flag:
        return [
            warning(
                "mixed_precision",
                f"LeRobot 0.6.1 turns on AMP for {policy.key} with --policy.use_amp, which autocasts to float16 on "
                "CUDA, not bf16",
                "accept fp16 autocast, or set mixed_precision: no",
                value="bf16",
            )
        ]
    return []


def fsdp_findings(ctx: BuildContext, install: LeRobotInstall) -> list[Problem]:
    preset, policy = ctx.preset, ctx.policy
    if install.api == "v0.6":
        return [
            problem(
                "strategy",
                "FSDP on LeRobot 0.6.1 only works through an accelerate YAML config (accelerate launch "
                "--config_file), which gpuwizard does not drive",
                "use strategy: ddp, or LeRobot main where --parallelism.dp_shard selects FSDP2",
                value="fsdp",
            )
        ]
    found = []
    if not policy.fsdp_supported:
        found.append(
            problem(
                "strategy",
                f"{policy.key} cannot be sharded with FSDP in LeRobot (its layers are read outside module.forward; "
                "lerobot PR #3767)",
                "use strategy: ddp",
                value="fsdp",
            )
        )
    if not (policy.fsdp_wrap_units or preset.fsdp.wrap_modules or preset.fsdp.min_num_params):
        found.append(
            problem(
                "fsdp.wrap_modules",
                f"policy {policy.key} declares no FSDP wrap units and none are given, so lerobot-train would fail "
                "at startup",
                "set fsdp.wrap_modules to the policy's block class names, or fsdp.min_num_params for size-based "
                "wrapping",
                value=None,
            )
        )
    if preset.mixed_precision == "fp16":
        found.append(
            problem(
                "mixed_precision", "LeRobot rejects fp16 under FSDP sharding", "use mixed_precision: bf16", value="fp16"
            )
        )
    return found


def group_lr_notes(ctx: BuildContext) -> list[Problem]:
    """Each optimizer group's lr and what the scaling rule did to it (group_lrs), or, where a warmup bypasses the
    policy preset, the one group lerobot-train then trains (presets_bypassed)."""
    plan, facts = ctx.plan, ctx.policy.lerobot
    groups = group_lrs(ctx)
    if not facts or not groups:
        return []
    factor = plan.lr / plan.base_lr
    rule = f" x {factor:.3g} by {plan.rule}" if factor != 1 else ""
    if presets_bypassed(ctx):
        scaled = ", ".join(f"{name} {value:.3g}" for name, value in groups.items())
        return [
            note(
                f"the warmup needs --use_policy_training_preset=false, and then lerobot-train puts every parameter in "
                f"one group at lr {plan.lr:.3g}: the policy's own group lrs ({scaled} after scaling) are not applied; "
                "optim.warmup_ratio: 0 keeps the policy preset and its groups (without a warmup)"
            )
        ]
    shown = "; ".join(
        f"{name} {value:.3g} (its default {facts.group_lrs[name]:.3g}{rule}, passed as --policy.{name})"
        for name, value in groups.items()
    )
    main = f"{plan.base_lr:.3g}{rule}, " if rule else ""
    return [
        note(
            f"optimizer groups ({ctx.policy.key}'s get_optim_params): the main group at {plan.lr:.3g} "
            f"({main}--policy.optimizer_lr); {shown}"
        )
    ]


def logged_group_notes(ctx: BuildContext) -> list[Problem]:
    """A policy whose first parameter group trains at a share of the lr (X-VLA's VLM at a tenth): lerobot-train
    logs that group's lr, so the log reads lower than optim.lr."""
    plan, facts = ctx.plan, ctx.policy.lerobot
    if not facts or facts.logged_lr_scale == 1.0:
        return []
    logged = plan.lr * facts.logged_lr_scale
    return [
        note(
            f"{ctx.policy.title} trains {facts.logged_group} at {facts.logged_lr_scale:g}x the lr ({logged:.3g}; the "
            f"rest at {plan.lr:.3g}), and lerobot-train logs that group's lr: the log and the lr check read "
            f"{logged:.3g}"
        )
    ]


def unshrunk_warmup_findings(ctx: BuildContext) -> list[Problem]:
    """The diffuser scheduler (diffusion's own) warms up over its full num_warmup_steps whatever the run's length:
    DiffuserSchedulerConfig.build hands it to diffusers' get_scheduler("cosine") unchanged (lerobot/optim/
    schedulers.py, 0.6.1 and main at 7427f31; diffusers 0.39 optimization.py), unlike cosine_decay_with_warmup."""
    plan, facts = ctx.plan, ctx.policy.lerobot
    if not facts or facts.scheduler != "diffuser" or plan.warmup_source != "trainer default" or not plan.warmup_steps:
        return []
    warmup, steps, key = plan.warmup_steps, plan.steps, ctx.policy.key
    fix = "set optim.warmup_ratio (e.g. 0.05) for a warmup that fits the run"
    if warmup >= steps:
        return [
            warning(
                "optim.steps",
                f"{key} warms up over {warmup:,} steps whatever the run's length (LeRobot does not shorten the "
                f"diffuser schedule, unlike the cosine one): this {steps:,}-step run never reaches lr {plan.lr:.3g} "
                f"and ends at {plan.lr * steps / warmup:.3g}",
                f"{fix}, or train at least {warmup:,} steps",
                value=ctx.preset.optim.steps,
            )
        ]
    if warmup * 10 > steps:
        return [
            note(
                f"{key} warms up over {warmup:,} of the run's {steps:,} steps (LeRobot does not shorten the diffuser "
                f"schedule for short runs); {fix}"
            )
        ]
    return []


def schedule_end_notes(ctx: BuildContext, schedule: LrSchedule) -> list[Problem]:
    """Where the policy preset's schedule ends, in optimizer updates. LeRobot main steps the scheduler every loop
    step, one micro-batch per worker (scripts/lerobot_train.py:235-237 with step_scheduler_with_optimizer False in
    configs/accelerator.py, main at 7427f31), and a preset's own warmup and decay (optim/schedulers.py:144-161) are
    loop steps that nothing scales by the accumulation: with grad_accum 2 smolvla's 1,000 / 30,000 end at updates 500
    and 15,000. Said where they end before the run does, or where an update is more than one loop step."""
    plan, facts = ctx.plan, ctx.policy.lerobot
    per = plan.trainer_steps_per_update
    if not facts or facts.scheduler == "none" or schedule.decay == "constant":
        return []
    warmup, decay = schedule.warmup_steps, schedule.decay_end
    if per == 1 and decay >= plan.trainer_steps:
        return []

    def at(loop: int) -> str:
        return f"update {math.ceil(loop / per):,}" + (f" (loop step {loop:,})" if per > 1 else "")

    floor = f"its floor {schedule.end:.3g}" if facts.scheduler == "cosine_decay_with_warmup" else "0"
    units = (
        f"; lerobot-train counts its schedule in loop steps, {per} per update with batch.grad_accum {per}"
        if per > 1
        else ""
    )
    return [
        note(
            f"lr schedule ({ctx.policy.key}'s {facts.scheduler}): the warmup ends at {at(warmup)}, the decay reaches "
            f"{floor} at {at(decay)}, of the run's {plan.steps:,} updates{units}"
        )
    ]


def cloud_target_findings(ctx: BuildContext) -> list[Problem]:
    """`--job.target=<flavor>` makes lerobot-train submit the run to HF Jobs instead of training (train() returns
    submit_to_hf(cfg) when cfg.job.is_remote: lerobot_train.py and configs/default.py JobConfig, 0.6.1 and main at
    7427f31); under torchrun every rank enters that code, one paid cloud job per rank."""
    target = flag_value(ctx.preset.launch.extra_args, "--job.target")
    if target in (None, "local"):  # JobConfig.is_remote_target
        return []
    if ctx.plan.world_size > 1:
        return [
            problem(
                "launch.extra_args",
                f"--job.target={target} submits the run to HF Jobs from every one of the {ctx.plan.world_size} "
                "processes torchrun starts: one paid cloud job per rank, each training alone",
                "remove --job.target to train here, or submit it once yourself with `lerobot-train ... "
                f"--job.target={target}` outside gpuwizard (the flavor sets the cloud GPUs)",
                value=target,
            )
        ]
    return [
        warning(
            "launch.extra_args",
            f"--job.target={target} trains on HF Jobs, not on this machine: gpuwizard watches only the process that "
            "submits it and streams its log; the plan's GPUs, memory and time are not the job's",
            "remove --job.target to train here",
            value=target,
        )
    ]


def period(ctx: BuildContext, name: str, default: int) -> int:
    """lerobot-train's loop steps between log lines (`log_freq`) or checkpoints (`save_freq`): the flag in
    launch.extra_args (given last, it wins), else trainer_options' (updates, x grad_accum on main), else `default`."""
    given = flag_value(ctx.preset.launch.extra_args, f"--{name}")
    own = getattr(LeRobotOptions.of(ctx.preset), name)
    return int(given) if given else (own * ctx.plan.trainer_steps_per_update if own else default)


def period_findings(ctx: BuildContext) -> list[Problem]:
    """A run shorter than lerobot-train's log or save period: no loss line at all, or only the last checkpoint."""
    plan, loop_steps = ctx.plan, ctx.plan.trainer_steps
    found: list[Problem] = []
    log_every = period(ctx, "log_freq", LOG_FREQ)
    if 0 < loop_steps < log_every:
        found.append(
            warning(
                "trainer_options.log_freq",
                f"lerobot-train logs every {log_every:,} loop steps and this run has {loop_steps:,}: it logs no loss "
                "and no samples/s at all, so the monitor draws no curve and has no step to measure time by",
                f"set trainer_options.log_freq: {max(1, plan.steps // 20)}",
                value=log_every,
            )
        )
    save_every = period(ctx, "save_freq", SAVE_FREQ)
    if 0 < loop_steps <= save_every:
        found.append(
            warning(
                "trainer_options.save_freq",
                f"lerobot-train saves every {save_every:,} loop steps and after the last one: this run of "
                f"{loop_steps:,} keeps only its last step's checkpoint, so a run stopped before its end cannot be "
                "resumed",
                f"set trainer_options.save_freq: {max(1, plan.steps // 4)} to keep one every quarter of the run",
                value=save_every,
            )
        )
    return found
