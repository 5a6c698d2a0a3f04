"""LeRobot `lerobot-train` under torchrun, for the 0.6.1 release and main after PR #4010."""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from gpuwizard import envcache
from gpuwizard.contracts import BatchLayout, BuildContext, LaunchSpec
from gpuwizard.errors import Problem, note, problem, warning
from gpuwizard.logparse import LineInfo, parse_lerobot
from gpuwizard.runner.records import LrSchedule
from gpuwizard.trainers.base import (
    Trainer,
    TrainerOptions,
    device_env,
    per_worker_layout,
    sibling_tool,
    torchrun_prefix,
)

ACCELERATE_PREFIXES = ("ACCELERATE_", "FSDP_", "PARALLELISM_CONFIG_")
MAIN_REFUSED_ENV = (
    "ACCELERATE_USE_FSDP",
    "ACCELERATE_USE_PARALLELISM_CONFIG",
    "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
)
"""lerobot/distributed/factory.py (main at 7427f31), guard_against_env_interference: the variables it refuses."""
RESUME_CONFIG = Path("checkpoints", "last", "pretrained_model", "train_config.json")
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "no": "float32"}

_PROBE = r"""
import importlib.metadata as md, importlib.util as iu, json, os, sys
out = {"version": None, "parallelism": False, "watch": [p for p in sys.path if os.path.isdir(p)]}
try:
    out["version"] = md.version("lerobot")
except Exception:
    pass
spec = iu.find_spec("lerobot")
if spec and spec.submodule_search_locations:
    root = list(spec.submodule_search_locations)[0]
    out["parallelism"] = os.path.exists(os.path.join(root, "configs", "parallelism.py"))
    out["watch"] += [root, os.path.join(root, "configs")]
print(json.dumps(out))
"""


class LeRobotOptions(TrainerOptions):
    """lerobot-train's own settings beyond the preset's common fields."""

    api: Literal["auto", "v0.6", "main"] = Field(
        "auto", description="LeRobot's command-line form; auto probes the training environment (0.6.1 or main)."
    )
    policy_path: str | None = Field(
        None,
        description="--policy.path: fine-tune from a pretrained policy (hub id or folder) instead of --policy.type.",
    )
    pretrained_path: str | None = Field(
        None, description="--policy.pretrained_path for a policy type that starts from pretrained weights."
    )
    repo_id: str | None = Field(None, description="--policy.repo_id to push the trained policy to.")
    num_workers: int | None = Field(None, ge=0, description="--num_workers: dataloader workers per process.")
    log_freq: int | None = Field(
        None, gt=0, description="--log_freq: optimizer updates between log lines (x grad_accum on main)."
    )
    save_freq: int | None = Field(
        None, gt=0, description="--save_freq: optimizer updates between checkpoints (x grad_accum on main)."
    )
    seed: int | None = Field(None, description="--seed.")
    wandb: bool = Field(False, description="--wandb.enable.")


@dataclass(frozen=True)
class LeRobotInstall:
    """What probing the training environment found."""

    version: str | None
    api: Literal["v0.6", "main"]
    probed: bool
    train_path: str | None


@functools.lru_cache(maxsize=16)
def _probe(python: str) -> dict | None:
    """Ask the training interpreter which lerobot it has, without importing lerobot (remembered in EnvCache)."""
    exe = envcache.interpreter(python)
    key = f"{exe}|{os.environ.get('PYTHONPATH', '')}"
    cache = envcache.EnvCache("lerobot-probe")
    remembered = cache.get(key, exe)
    if remembered is None:
        try:
            out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=30, check=False)
            text = out.stdout.strip()
            remembered = json.loads(text.splitlines()[-1]) if out.returncode == 0 and text else None
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return None
        if not isinstance(remembered, dict):
            return None
        cache.put(key, exe, remembered, [str(p) for p in remembered.get("watch", [])])
    return {"version": remembered.get("version"), "parallelism": bool(remembered.get("parallelism"))}


def find_install(python: str, api: str) -> LeRobotInstall:
    train = sibling_tool(python, "lerobot-train") or shutil.which("lerobot-train")
    found = _probe(python) if os.path.exists(python) or shutil.which(python) else None
    version = found["version"] if found else None
    if api != "auto":
        return LeRobotInstall(version, api, version is not None, train)  # type: ignore[arg-type]
    if version is None:
        return LeRobotInstall(None, "v0.6", False, train)
    return LeRobotInstall(version, "main" if found and found["parallelism"] else "v0.6", True, train)


class LeRobotTrainer(Trainer):
    name = "lerobot"
    package = "lerobot"
    title = "LeRobot (lerobot-train)"
    batch_flag = "--batch_size"
    progress_markers = ("step:", "Effective batch size", "cfg.steps=", "Checkpoint policy", "End of training", "%|")
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

    def default_warmup_steps(self, preset, policy, steps, per_update):  # type: ignore[no-untyped-def]
        """The policy preset's warmup; a cosine schedule longer than the run is shrunk to fit it, warmup included
        (CosineDecayWithWarmupSchedulerConfig.build, lerobot/optim/schedulers.py, 0.6.1 and main at 7427f31). The
        schedule counts lerobot-train's loop steps, `per_update` of them to an optimizer update on main."""
        facts = policy.lerobot
        if facts is None or facts.scheduler == "none" or not facts.warmup_steps:
            return None
        loop_steps, warmup = steps * per_update, facts.warmup_steps
        if facts.scheduler == "cosine_decay_with_warmup" and facts.decay_steps and loop_steps < facts.decay_steps:
            warmup = int(warmup * loop_steps / facts.decay_steps)
        return math.ceil(warmup / per_update)

    def trainer_steps_per_update(self, preset, python):  # type: ignore[no-untyped-def]
        """Main counts loop steps, one micro-batch per worker each (lerobot_train.py at 7427f31: `step = 0  # number
        of loop steps (= micro-batches consumed per data-parallel worker)`); 0.6.1 has no accumulation."""
        return preset.batch.grad_accum if find_install(python, preset.options.api).api == "main" else 1

    def install(self, ctx: BuildContext) -> LeRobotInstall:
        return find_install(ctx.python, ctx.preset.options.api)

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
        preset, plan, policy = ctx.preset, ctx.plan, ctx.policy
        install = self.install(ctx)
        found: list[Problem] = []
        if not install.probed and preset.options.api == "auto":
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
                    f"no lerobot-train next to {ctx.python} or on PATH; run will refuse until LeRobot is installed "
                    "there",
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
            found += self._check_fsdp(ctx, install)
        if plan.device == "cpu" and preset.mixed_precision != "no":
            found.append(
                warning(
                    "mixed_precision",
                    "mixed precision is not applied on CPU runs; the job trains in float32",
                    "set mixed_precision: no for CPU dry runs",
                    value=preset.mixed_precision,
                )
            )
        elif policy.lerobot and policy.lerobot.bf16_flag and preset.mixed_precision == "fp16":
            found.append(
                problem(
                    "mixed_precision",
                    f"{policy.key} in LeRobot autocasts only to bf16 (--policy.{policy.lerobot.bf16_flag}); there is "
                    "no fp16 path",
                    "use mixed_precision: bf16, or no for float32",
                    value="fp16",
                )
            )
        elif (
            install.api == "v0.6"
            and preset.mixed_precision != "no"
            and policy.lerobot
            and not policy.lerobot.dtype_field
            and not policy.lerobot.bf16_flag
        ):
            if preset.mixed_precision == "bf16":
                found.append(
                    warning(
                        "mixed_precision",
                        f"LeRobot 0.6.1 turns on AMP for {policy.key} with --policy.use_amp, which autocasts to "
                        "float16 on CUDA, not bf16",
                        "accept fp16 autocast, or set mixed_precision: no",
                        value="bf16",
                    )
                )
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
        found += self._group_lr_notes(ctx)
        if preset.dataset.repo_id is None:
            found.append(
                problem(
                    "dataset.repo_id",
                    "lerobot-train needs a dataset repo id (--dataset.repo_id), even for a local dataset.root",
                    "set dataset.repo_id, e.g. local/my_dataset next to dataset.root",
                    value=None,
                )
            )
        if not preset.options.repo_id:
            found.append(
                problem(
                    None,
                    "the policy is not pushed to the Hub (--policy.push_to_hub=false)",
                    "set trainer_options.repo_id to push",
                    level="note",
                )
            )
        out = ctx.output_path
        if out.exists() and not ctx.resume:
            found.append(
                warning(
                    "output_dir",
                    "already exists; lerobot-train refuses to start in an existing output dir unless resuming",
                    f"continue it with `gpuwizard run {preset.name} --resume`, choose a new output_dir, or delete the "
                    "folder",
                    value=ctx.output_dir,
                )
            )
        return found

    def _group_lr_notes(self, ctx: BuildContext) -> list[Problem]:
        """What bypassing the policy preset (needed for a warmup on a policy without a scheduler) does to the
        parameter groups with an lr of their own: make_optimizer_and_scheduler then trains policy.parameters(), one
        group (lerobot/optim/factory.py, 0.6.1 and main at 7427f31)."""
        plan, facts = ctx.plan, ctx.policy.lerobot
        if not facts or facts.scheduler != "none" or not plan.warmup_steps or not facts.group_lrs:
            return []
        groups = ", ".join(f"{name} {value * plan.lr / plan.base_lr:.3g}" for name, value in facts.group_lrs.items())
        return [
            note(
                f"the warmup needs --use_policy_training_preset=false, and then lerobot-train puts every parameter in "
                f"one group at lr {plan.lr:.3g}: the policy's own group lrs ({groups} after scaling) are not applied"
            )
        ]

    def _check_fsdp(self, ctx: BuildContext, install: LeRobotInstall) -> list[Problem]:
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
                    "mixed_precision",
                    "LeRobot rejects fp16 under FSDP sharding",
                    "use mixed_precision: bf16",
                    value="fp16",
                )
            )
        return found

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
        """What _lr_args makes lerobot-train's scheduler do, in its loop steps (lerobot/optim/schedulers.py, 0.6.1
        and main at 7427f31; it logs group 0's lr after `step` scheduler steps): constant_with_warmup from 0;
        cosine_decay_with_warmup from peak / (warmup + 1), the cosine counted from step 0 down to decay_lr, warmup and
        decay shrunk by steps / decay_steps for a shorter run; diffuser (diffusers' cosine) from 0, down to 0. The
        line shows the mean lr since the last one (an AverageMeter reset every log_freq loop steps, default 200)."""
        plan, facts = ctx.plan, ctx.policy.lerobot
        scheduler = facts.scheduler if facts else "none"
        steps, warmup = plan.trainer_steps, (plan.warmup_steps or 0) * plan.trainer_steps_per_update
        log_freq = ctx.preset.options.log_freq
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

    def last_checkpoint(self, ctx: BuildContext) -> Path | None:
        """checkpoints/last/pretrained_model/train_config.json: what --config_path takes to resume (0.6.1 and main)."""
        config = ctx.output_path / RESUME_CONFIG
        return config if config.is_file() else None

    def build(self, ctx: BuildContext) -> LaunchSpec:
        preset, plan, policy, opts = ctx.preset, ctx.plan, ctx.policy, ctx.preset.options
        install = self.install(ctx)
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
        args = [train, f"--dataset.repo_id={preset.dataset.repo_id}"]
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
        args.append(f"--wandb.enable={'true' if opts.wandb else 'false'}")
        args += preset.launch.extra_args
        return LaunchSpec(prefix + args, env, unset, ctx.workdir)

    def _lr_args(self, ctx: BuildContext) -> list[str]:
        """--optimizer.lr is silently overwritten by the policy preset, so pass --policy.optimizer_lr. Schedules
        count the trainer's loop steps (the scheduler steps once per micro-batch on main)."""
        plan, facts = ctx.plan, ctx.policy.lerobot
        scheduler = facts.scheduler if facts else "none"
        warmup = (plan.warmup_steps or 0) * plan.trainer_steps_per_update
        if scheduler == "none" and plan.warmup_steps:
            opt = dict(facts.optimizer if facts else {})
            args = [
                "--use_policy_training_preset=false",
                f"--optimizer.type={opt.pop('type', 'adamw')}",
                f"--optimizer.lr={plan.lr:g}",
            ]
            args += [f"--optimizer.{k}={v:g}" for k, v in opt.items()]
            return args + ["--scheduler.type=constant_with_warmup", f"--scheduler.num_warmup_steps={warmup}"]
        args = [f"--policy.optimizer_lr={plan.lr:g}"]
        if facts and plan.lr != plan.base_lr:
            args += [f"--policy.{name}={value * plan.lr / plan.base_lr:g}" for name, value in facts.group_lrs.items()]
        if scheduler == "none" or plan.warmup_steps is None:
            return args
        if ctx.policy.key == "groot":
            return args + [
                f"--policy.max_steps={plan.trainer_steps}",
                f"--policy.warmup_ratio={plan.warmup_steps / plan.steps:.6g}",
            ]
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
            args = [f"--accelerator.mixed_precision={mp}"]
            if facts and facts.dtype_field and mp != "no":
                args.append(f"--policy.dtype={DTYPES[mp]}")
            return args
        if facts and facts.dtype_field:
            return [f"--policy.dtype={DTYPES[mp]}"]
        return ["--policy.use_amp=true"] if mp != "no" else []

    def parse_line(self, line: str) -> LineInfo | None:
        return parse_lerobot(line)


TRAINER = LeRobotTrainer()
