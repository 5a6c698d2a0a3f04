"""LeRobot `lerobot-train` under torchrun, for the 0.6.1 release and main after PR #4010."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwizard.core.errors import Problem, problem
from gpuwizard.model.job import BatchLayout, BuildContext, LaunchSpec, TrainerQuery
from gpuwizard.model.preset import with_field
from gpuwizard.model.trainer_options import LeRobotOptions
from gpuwizard.model.trust import is_trusted
from gpuwizard.runs.records import LrSchedule
from gpuwizard.trainers.base import (
    Trainer,
    device_env,
    interpreter_missing,
    per_worker_layout,
    torchrun_prefix,
    trainer_args,
)
from gpuwizard.trainers.check import check_script
from gpuwizard.trainers.lerobot.accepts import (
    Accepts,
    dropped_notes,
    installed_accepts,
    shipped_policy,
    without_unaccepted,
)
from gpuwizard.trainers.lerobot.findings import (
    ACCELERATE_PREFIXES,
    LOG_FREQ,
    group_lrs,
    period,
    plan_findings,
    presets_bypassed,
    schedule_end_notes,
)
from gpuwizard.trainers.lerobot.install import LeRobotInstall, find_install
from gpuwizard.trainers.logparse import LineInfo, parse_lerobot

if TYPE_CHECKING:
    from gpuwizard.model.catalog import LeRobotPolicyFacts, PolicyEntry
    from gpuwizard.model.preset import Preset

RESUME_CONFIG = Path("checkpoints", "last", "pretrained_model", "train_config.json")
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "no": "float32"}


def default_loop_warmup(facts: LeRobotPolicyFacts | None, loop_steps: int) -> int | None:
    """The policy preset's warmup in lerobot-train's own steps (loop steps on main); a cosine schedule longer than
    the run is shrunk to it, warmup included: int(warmup * steps / decay) (CosineDecayWithWarmupSchedulerConfig.build,
    lerobot/optim/schedulers.py, 0.6.1 and main at 7427f31); the diffuser schedule keeps its warmup whatever the
    run's length (DiffuserSchedulerConfig.build hands it to diffusers' get_scheduler unchanged)."""
    if facts is None or facts.scheduler == "none" or not facts.warmup_steps:
        return None
    if facts.scheduler == "cosine_decay_with_warmup" and facts.decay_steps and loop_steps < facts.decay_steps:
        return int(facts.warmup_steps * loop_steps / facts.decay_steps)
    return facts.warmup_steps


class LeRobotTrainer(Trainer):
    name = "lerobot"
    title = "LeRobot (lerobot-train)"
    batch_flag = "--batch_size"
    progress_markers = (
        "step:",
        "eval_loss=",
        "Effective batch size",
        "cfg.steps=",
        "Checkpoint policy",
        "End of training",
        "%|",
    )
    batch_meaning = "--batch_size is per GPU process: N GPUs train on N x batch samples per step."
    checkpoint_parts = (  # lerobot/common/train_utils.py save_checkpoint: the weights, then the training state
        (
            "pretrained_model/model.safetensors",
            "pretrained_model/pytorch_model_fsdp_0",
            "pretrained_model/adapter_model.safetensors",
        ),
        ("pretrained_model/train_config.json",),
        ("training_state/training_step.json",),
        ("training_state/optimizer_state.safetensors", "training_state/optimizer_0"),
    )
    Options = LeRobotOptions
    supports_fsdp = True

    def batch_layout(self, size: int, grad_accum: int, world: int) -> BatchLayout:
        return per_worker_layout(size, grad_accum, world)

    def default_warmup_steps(self, preset: Preset, policy: PolicyEntry, steps: int, per_update: int) -> int | None:
        """The policy preset's warmup in optimizer updates (see default_loop_warmup)."""
        warmup = default_loop_warmup(policy.lerobot, steps * per_update)
        return None if warmup is None else math.ceil(warmup / per_update)

    def trainer_steps_per_update(self, preset: Preset, python: str) -> int:
        """Main counts loop steps, one micro-batch per worker each (lerobot_train.py at 7427f31: `step = 0  # number
        of loop steps (= micro-batches consumed per data-parallel worker)`); 0.6.1 has no accumulation."""
        main = find_install(python, LeRobotOptions.of(preset).api, is_trusted(preset)).api == "main"
        return preset.batch.grad_accum if main else 1

    def held_out(self, preset: Preset, python: str, dataset: dict[str, Any] | None) -> str | None:
        """LeRobot holds out the last ceil(n x split) episodes of each task's n and logs `step N: eval_loss=X` every
        --eval_steps loop steps (datasets/factory.py and lerobot_train.py, 0.6.1 and main at 7427f31); an installed
        config without the field (asked through accepts.py) is given none."""
        accepts = installed_accepts(python, is_trusted(preset))
        if accepts is not None and "dataset.eval_split" not in accepts.fields:
            return None
        split = preset.dataset.eval_split
        return (
            f"--dataset.eval_split={split:g}: LeRobot holds out the last ceil(n x {split:g}) episodes of each task's "
            "n and logs their loss at every log line (--eval_steps)"
        )

    def shipped_policy(self, preset: Preset, python: str) -> PolicyEntry | str | None:
        """preset.policy as the installed LeRobot registers it, where the catalog lacks it (accepts.shipped_policy)."""
        return shipped_policy(preset.policy, installed_accepts(python, is_trusted(preset)), self.name)

    def install(self, ctx: BuildContext) -> LeRobotInstall:
        return find_install(ctx.python, LeRobotOptions.of(ctx.preset).api, is_trusted(ctx.preset))

    def managed_flags(self) -> tuple[str, ...]:
        return (
            "--batch_size",
            "--steps",
            "--output_dir",
            "--job_name",
            "--policy.type",
            "--policy.path",
            "--dataset.repo_id",
            "--dataset.root",
            "--policy.device",
            "--policy.optimizer_lr",
            "--policy.optimizer_lr_backbone",
            "--policy.use_bf16",
            "--policy.use_amp",
            "--optimizer.lr",
            "--policy.scheduler_warmup_steps",
            "--accelerator.gradient_accumulation.steps",
            "--accelerator.mixed_precision",
            "--parallelism.dp_shard",
            "--policy.push_to_hub",
            "--config_path",
            "--resume",
        )

    def check(self, ctx: BuildContext) -> list[Problem]:
        install, accepts = self.install(ctx), self.accepts(ctx)
        _, dropped = without_unaccepted(self._own_args(ctx, install), accepts, ctx.policy.key)
        found = plan_findings(ctx, install) + schedule_end_notes(ctx, self.main_schedule(ctx))
        return found + dropped_notes(dropped, accepts)

    def preflight(self, ctx: BuildContext) -> list[Problem]:
        found = []
        if self.install(ctx).train_path is None:
            found.append(
                problem(
                    "launch.python",
                    f"lerobot-train was not found next to {ctx.python} or on PATH",
                    "install LeRobot in the training environment (pip install 'lerobot[training]') and set "
                    "launch.python to its interpreter",
                    value=ctx.preset.launch.python,
                )
            )
        out, preset = ctx.output_path, ctx.preset
        if out.exists() and not ctx.resume:
            found.append(
                problem(
                    "output_dir",
                    "already exists and lerobot-train refuses to start in it unless resuming",
                    f"continue it with `gpuwizard run {preset.name} --resume`, choose a new output_dir, or delete the "
                    "folder",
                    value=ctx.output_dir,
                )
            )
        return found

    def lr_schedule(self, ctx: BuildContext) -> LrSchedule:
        """The schedule of the group lerobot-train logs (logged_lr: X-VLA's VLM at a tenth), every lr scaled alike."""
        schedule, scale = self.main_schedule(ctx), self.logged_lr(ctx) / ctx.plan.lr
        if scale == 1:
            return schedule
        end = schedule.end * scale if schedule.end is not None else None
        return schedule.model_copy(update={"peak": schedule.peak * scale, "end": end})

    def main_schedule(self, ctx: BuildContext) -> LrSchedule:
        """What _lr_args makes lerobot-train's scheduler do, in its loop steps (lerobot/optim/schedulers.py, 0.6.1
        and main at 7427f31; it logs group 0's lr after `step` scheduler steps): constant_with_warmup from 0;
        cosine_decay_with_warmup from peak / (warmup + 1), the cosine counted from step 0 down to decay_lr, warmup and
        decay shrunk by steps / decay_steps for a shorter run; diffuser (diffusers' cosine) from 0, down to 0. The
        line shows the mean lr since the last one (an AverageMeter reset every log_freq loop steps, default 200)."""
        plan, facts = ctx.plan, ctx.policy.lerobot
        scheduler = facts.scheduler if facts else "none"
        steps, warmup = plan.trainer_steps, (plan.warmup_steps or 0) * plan.trainer_steps_per_update
        log_freq = LeRobotOptions.of(ctx.preset).log_freq
        window = log_freq * plan.trainer_steps_per_update if log_freq else 200
        if scheduler == "none" or facts is None:
            return LrSchedule(peak=plan.lr, warmup_steps=warmup, averaged_over=window)
        if scheduler == "diffuser":
            return LrSchedule(
                peak=plan.lr,
                warmup_steps=warmup,
                decay="cosine",
                decay_start=warmup,
                decay_end=steps,
                averaged_over=window,
            )
        decay = facts.decay_steps or steps
        if plan.warmup_source == "trainer default":  # the policy preset's own warmup, shrunk by lerobot-train
            warmup = facts.warmup_steps or 0
            warmup = int(warmup * steps / decay) if steps < decay else warmup
        return LrSchedule(
            peak=plan.lr,
            warmup_steps=warmup,
            warmup_start=1 / (warmup + 1),
            decay="cosine",
            decay_end=min(decay, steps),
            end=facts.decay_lr or 0.0,
            averaged_over=window,
        )

    def probe_variant(self, preset: Preset, steps: int) -> Preset:
        """A log line every thirtieth of the probe's updates: lerobot-train logs loss and rate only where `step %
        cfg.log_freq == 0`, 200 loop steps by default (configs/train.py, lerobot_train.py, 0.6.1 and main at 7427f31),
        which a probe of 40 updates never reaches; log_freq counts updates here, and build() turns it into main's loop
        steps (x grad_accum) as it does for every run."""
        every = with_field(preset, "trainer_options.log_freq", max(1, steps // 30))
        return super().probe_variant(every, steps)

    def last_checkpoint(self, ctx: BuildContext) -> Path | None:
        """checkpoints/last/pretrained_model/train_config.json: what --config_path takes to resume (0.6.1 and main)."""
        config = ctx.output_path / RESUME_CONFIG
        return config if config.is_file() else None

    def build(self, ctx: BuildContext) -> LaunchSpec:
        preset, install = ctx.preset, self.install(ctx)
        env = device_env(ctx) | dict(preset.launch.env)
        unset = sorted(n for n in set(os.environ) | set(env) if n.startswith(ACCELERATE_PREFIXES))
        for name in unset:
            env.pop(name, None)
        prefix = torchrun_prefix(ctx, self.processes_per_node(preset))
        train = install.train_path or "lerobot-train"
        if ctx.resume:
            # the saved config holds the whole run; --resume=true alone raises "A config_path is expected when
            # resuming a run", and --policy.type/--policy.path must not be given (lerobot/configs/train.py)
            resume = [f"--config_path={ctx.output_path / RESUME_CONFIG}", "--resume=true"]
            return LaunchSpec(prefix + [train, *resume, *preset.launch.extra_args], env, unset, ctx.workdir)
        args, _ = without_unaccepted(self._own_args(ctx, install), self.accepts(ctx), ctx.policy.key)
        return LaunchSpec(prefix + [train, *args, *preset.launch.extra_args], env, unset, ctx.workdir)

    def accepts(self, ctx: BuildContext) -> Accepts | None:
        """What the installed LeRobot's config parses (accepts.py), asked only of a trusted preset's interpreter."""
        return installed_accepts(ctx.python, is_trusted(ctx.preset))

    def _own_args(self, ctx: BuildContext, install: LeRobotInstall) -> list[str]:
        """Every flag gpuwizard adds for a fresh run, before those the installed config lacks are left out."""
        preset, plan, policy, opts = ctx.preset, ctx.plan, ctx.policy, LeRobotOptions.of(ctx.preset)
        args = [f"--dataset.repo_id={preset.dataset.repo_id}"]
        if preset.dataset.root:
            args.append(f"--dataset.root={os.path.expanduser(preset.dataset.root)}")
        if opts.policy_path:
            args.append(f"--policy.path={opts.policy_path}")
        else:
            args.append(f"--policy.type={policy.key}")
        if opts.pretrained_path:
            args.append(f"--policy.pretrained_path={opts.pretrained_path}")
        args.append(f"--policy.device={'cpu' if plan.device == 'cpu' else 'cuda'}")
        args.append(f"--policy.repo_id={opts.repo_id}" if opts.repo_id else "--policy.push_to_hub=false")
        args += [f"--batch_size={plan.per_device_batch}", f"--steps={plan.trainer_steps}"]
        args += self._lr_args(ctx)
        args += self._precision_args(ctx, install)
        if install.api == "main":
            args.append(f"--accelerator.gradient_accumulation.steps={preset.batch.grad_accum}")
        if plan.strategy == "fsdp":
            args.append(f"--parallelism.dp_shard={plan.world_size}")
            wrap = preset.fsdp.wrap_modules or (None if preset.fsdp.min_num_params else policy.fsdp_wrap_units)
            if preset.fsdp.min_num_params:
                args.append(f"--accelerator.fsdp.min_num_params={preset.fsdp.min_num_params}")
            elif wrap and wrap != policy.fsdp_wrap_units:
                args.append(f"--accelerator.fsdp.wrap_modules={json.dumps(wrap)}")
            args.append("--env_eval_freq=0")
        args += [f"--output_dir={os.path.expanduser(ctx.output_dir)}", f"--job_name={preset.name}"]
        for flag, value in (
            ("num_workers", opts.num_workers),
            ("log_freq", opts.log_freq and opts.log_freq * plan.trainer_steps_per_update),
            ("save_freq", opts.save_freq and opts.save_freq * plan.trainer_steps_per_update),
            ("seed", opts.seed),
        ):
            if value is not None:
                args.append(f"--{flag}={value}")
        if preset.dataset.eval_split:  # left out, with a note, by without_unaccepted where the config lacks it
            every = period(ctx, "log_freq", LOG_FREQ)  # a held-out loss beside every training loss line
            args += [f"--dataset.eval_split={preset.dataset.eval_split!r}", f"--eval_steps={every}"]
        args.append(f"--wandb.enable={'true' if opts.wandb else 'false'}")
        return args

    def _lr_args(self, ctx: BuildContext) -> list[str]:
        """--optimizer.lr is silently overwritten by the policy preset, so pass --policy.optimizer_lr. Schedules
        count the trainer's loop steps (the scheduler steps once per micro-batch on main)."""
        plan, facts = ctx.plan, ctx.policy.lerobot
        scheduler = facts.scheduler if facts else "none"
        warmup = (plan.warmup_steps or 0) * plan.trainer_steps_per_update
        if presets_bypassed(ctx):
            opt = dict(facts.optimizer if facts else {})
            args = [
                "--use_policy_training_preset=false",
                f"--optimizer.type={opt.pop('type', 'adamw')}",
                f"--optimizer.lr={plan.lr:g}",
            ]
            args += [f"--optimizer.{k}={v:g}" for k, v in opt.items()]
            return args + ["--scheduler.type=constant_with_warmup", f"--scheduler.num_warmup_steps={warmup}"]
        args = [f"--policy.optimizer_lr={plan.lr:g}"]
        args += [f"--policy.{name}={value:g}" for name, value in group_lrs(ctx).items()]
        if scheduler == "none" or plan.warmup_steps is None:
            return args
        if ctx.policy.key == "groot":
            # GrootConfig.get_scheduler_preset takes ceil(max_steps * warmup_ratio): half a step short of the warmup
            # rounds up to exactly it, where warmup / steps can land a step above (lerobot/policies/groot)
            ratio = (warmup - 0.5) / plan.trainer_steps if warmup else 0.0
            return args + [f"--policy.max_steps={plan.trainer_steps}", f"--policy.warmup_ratio={ratio!r}"]
        if plan.warmup_source == "trainer default":
            return args  # lerobot-train computes the same warmup itself (shrunk to a short run's length)
        args.append(f"--policy.scheduler_warmup_steps={warmup}")
        if facts and facts.decay_steps and plan.trainer_steps < facts.decay_steps:
            args.append(
                f"--policy.scheduler_decay_steps={plan.trainer_steps}"
            )  # the run's length: no rescaling of our warmup
        return args

    def _precision_args(self, ctx: BuildContext, install: LeRobotInstall) -> list[str]:
        mp, facts = ctx.preset.mixed_precision, ctx.policy.lerobot
        if facts and facts.bf16_flag:
            # its own bf16 autocast, on by default; AMP (--policy.use_amp) would add fp16 autocast and a GradScaler
            return [f"--policy.{facts.bf16_flag}={'true' if mp == 'bf16' and ctx.plan.device != 'cpu' else 'false'}"]
        if ctx.plan.device == "cpu" or (install.api == "main" and mp == "no"):
            # main's default is already "no", and the flag cannot say it: draccus reads `no` as YAML false and
            # AcceleratorConfig.__post_init__ refuses False (lerobot/configs/accelerator.py, main at 7427f31)
            return []
        if install.api == "main":
            # main autocasts through accelerate; --policy.dtype only casts the parameters, and the dtype field of
            # pi0, pi05, pi0_fast and xvla refuses float16 ("Invalid dtype"): fp16 keeps float32 parameters
            args = [f"--accelerator.mixed_precision={mp}"]
            if facts and facts.dtype_field and mp != "no" and DTYPES[mp] in facts.dtype_choices:
                args.append(f"--policy.dtype={DTYPES[mp]}")
            return args
        if facts and facts.dtype_field:
            return [f"--policy.dtype={DTYPES[mp]}"]
        return ["--policy.use_amp=true"] if mp != "no" else []

    def logged_lr(self, ctx: BuildContext) -> float:
        """The lr of optimizer.param_groups[0], which lerobot-train logs (lerobot_train.update_policy, 0.6.1 and main
        at 7427f31): X-VLA's VLM group at a tenth; one group at the lr when the policy preset is bypassed."""
        facts, plan = ctx.policy.lerobot, ctx.plan
        if facts is None or presets_bypassed(ctx):
            return plan.lr
        return plan.lr * facts.logged_lr_scale

    def trainer_warmup_steps(self, ctx: BuildContext) -> int:
        """The warmup lerobot-train's schedule will have, in its own steps: what it computes itself for the policy
        preset's default, else what _lr_args passes (GR00T's always, as a ratio)."""
        plan = ctx.plan
        if plan.warmup_source == "trainer default" and ctx.policy.key != "groot":
            return default_loop_warmup(ctx.policy.lerobot, plan.trainer_steps) or 0
        return (plan.warmup_steps or 0) * plan.trainer_steps_per_update

    def accelerate_precision(self, ctx: BuildContext) -> str:
        """What --accelerator.mixed_precision resolves to on main for this command (see _precision_args)."""
        facts, mp = ctx.policy.lerobot, ctx.preset.mixed_precision
        return "no" if ctx.plan.device == "cpu" or (facts and facts.bf16_flag) else mp

    def trainer_query(self, ctx: BuildContext, spec: LaunchSpec) -> TrainerQuery | str:
        """lerobot-train's own parsing of the command (check_lerobot.py), in the interpreter that will train,
        with torchrun's WORLD_SIZE."""
        if missing := interpreter_missing(ctx.python):
            return missing
        install = self.install(ctx)
        entry = install.train_path or "lerobot-train"
        if entry not in spec.argv:
            return "the command runs no lerobot-train"
        plan, preset, facts = ctx.plan, ctx.preset, ctx.policy.lerobot
        decay = facts.decay_steps if facts is not None and facts.scheduler == "cosine_decay_with_warmup" else None
        expected: dict[str, Any] = {
            "per_device_batch": plan.per_device_batch,
            "lr": self.logged_lr(ctx),
            "steps": plan.trainer_steps,
            "warmup_steps": self.trainer_warmup_steps(ctx),
            "decay_steps": min(plan.trainer_steps, decay) if decay else None,
            "dataset": preset.dataset.repo_id,
            "policy": ctx.policy.key,
            "resume": True if ctx.resume else None,
        }
        if group_lrs(ctx) and not presets_bypassed(ctx):  # each group's lr as the command spells it (:g), in order
            expected["group_lrs"] = [float(f"{lr:g}") for lr in [plan.lr, *group_lrs(ctx).values()]]
        if install.api == "main":
            expected |= {
                "grad_accum": preset.batch.grad_accum,
                "dp_workers": plan.world_size,
                "dp_shard": plan.world_size if plan.strategy == "fsdp" else 1,
                "mixed_precision": self.accelerate_precision(ctx),
            }
        fixes = {
            "policy": f"trainer_options.policy_path holds another policy type: set policy to it, or point "
            f"policy_path at a {ctx.policy.key} checkpoint",
        }
        if ctx.resume:
            fixes |= dict.fromkeys(
                (
                    "per_device_batch",
                    "steps",
                    "lr",
                    "group_lrs",
                    "warmup_steps",
                    "decay_steps",
                    "grad_accum",
                    "dataset",
                ),
                "a resumed run keeps the settings in its checkpoint's train_config.json: put the preset back as it "
                "was for that run, or start a new run in another output_dir",
            )
        return TrainerQuery(
            argv=[ctx.python, check_script("check_lerobot.py"), *trainer_args(spec.argv, entry)],
            expected=expected,
            cwd=ctx.workdir,
            env={"WORLD_SIZE": str(plan.world_size)},
            labels={"lr": "on the logged group"},
            fixes=fixes,
        )

    def parse_line(self, line: str) -> LineInfo | None:
        return parse_lerobot(line)


TRAINER = LeRobotTrainer()
