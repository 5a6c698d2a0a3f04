"""Any Hugging Face Trainer script under torchrun: per-device batch, accumulation, lr, max steps, warmup.

The flags follow transformers 5.24's TrainingArguments (src/transformers/training_args.py): FSDP is a bare `--fsdp`
with everything in `--fsdp_config` (the string form `--fsdp "full_shard auto_wrap"` is deprecated there), and
`min_num_params` is read only with `"auto_wrap_policy": "SIZE_BASED_WRAP"`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwizard.core.errors import Problem, problem, warning
from gpuwizard.model.job import BatchLayout, BuildContext, LaunchSpec, TrainerQuery
from gpuwizard.model.preset import with_field
from gpuwizard.model.trainer_options import HfOptions
from gpuwizard.runs.records import LrSchedule
from gpuwizard.trainers.base import (
    Trainer,
    device_env,
    interpreter_missing,
    newest_step_dir,
    per_worker_layout,
    planned_values,
    torchrun_prefix,
    trainer_args,
)
from gpuwizard.trainers.check import check_script
from gpuwizard.trainers.logparse import LineInfo, parse_hf

if TYPE_CHECKING:
    from gpuwizard.model.preset import Preset


LOGGING_STEPS = 500
"""TrainingArguments.logging_steps' default (transformers 5.x training_args.py): steps between loss lines."""


class HfTrainer(Trainer):
    name = "hf"
    title = "Hugging Face Trainer script"
    batch_flag = "--per_device_train_batch_size"
    progress_markers = (
        "{'loss'",
        "{'eval_loss'",
        "{'train_runtime'",
        "Saving model checkpoint",
        "Total train batch size",
        "Total optimization steps",
        "%|",
    )
    batch_meaning = (
        "--per_device_train_batch_size is per GPU: N GPUs train on N x batch x accumulation samples per update."
    )
    Options = HfOptions
    supports_fsdp = True
    any_policy = True

    def batch_layout(self, size: int, grad_accum: int, world: int) -> BatchLayout:
        return per_worker_layout(size, grad_accum, world)

    def managed_flags(self) -> tuple[str, ...]:
        return (
            "--per_device_train_batch_size",
            "--gradient_accumulation_steps",
            "--learning_rate",
            "--max_steps",
            "--warmup_steps",
            "--warmup_ratio",
            "--output_dir",
            "--lr_scheduler_type",
            "--logging_steps",
            "--use_cpu",
            "--bf16",
            "--fp16",
            "--fsdp",
            "--fsdp_config",
            "--resume_from_checkpoint",
        )

    def check(self, ctx: BuildContext) -> list[Problem]:
        found = []
        if not HfOptions.of(ctx.preset).script:
            found.append(
                problem(
                    "trainer_options.script",
                    "is required: the path of the HF Trainer training script",
                    "set it, e.g. train.py (relative to launch.workdir)",
                    value=None,
                )
            )
        if ctx.plan.strategy == "fsdp" and not (ctx.preset.fsdp.wrap_modules or ctx.preset.fsdp.min_num_params):
            found.append(
                problem(
                    "fsdp.wrap_modules",
                    "HF Trainer FSDP needs layer classes to wrap or a size threshold",
                    "set fsdp.wrap_modules or fsdp.min_num_params",
                    value=None,
                )
            )
        if ctx.plan.strategy == "fsdp" and ctx.plan.device == "cpu":
            found.append(
                warning(
                    "strategy",
                    "on CPU processes accelerate runs DDP, not FSDP (accelerate 1.15 state.py enables FSDP for GPU "
                    "backends only): this run trains an unsharded copy per process; TrainingArguments still checks "
                    "the FSDP settings",
                    "run on GPUs to shard the model, or use strategy: ddp for a CPU run",
                    value="fsdp",
                )
            )
        if ctx.plan.steps < LOGGING_STEPS and HfOptions.of(ctx.preset).logging_steps is None:
            found.append(
                warning(
                    "trainer_options.logging_steps",
                    f"the Trainer logs the loss and lr every {LOGGING_STEPS} steps by default, and this run has "
                    f"{ctx.plan.steps}: no curve, no lr check, no NaN stop",
                    f"set trainer_options.logging_steps, e.g. {max(1, ctx.plan.steps // 20)}",
                    value=None,
                )
            )
        return found

    def preflight(self, ctx: BuildContext) -> list[Problem]:
        script = HfOptions.of(ctx.preset).script
        if script and not Path(ctx.workdir, script).is_file():
            return [
                problem(
                    "trainer_options.script",
                    f"is not a file under {ctx.workdir}",
                    "check the path or launch.workdir",
                    value=script,
                )
            ]
        return []

    def held_out(self, preset: Preset, python: str, dataset: dict[str, Any] | None) -> str | None:
        """The script's own flag takes the split (its eval_dataset, the contract trainer_options.eval_split_flag
        states); the Trainer logs {'eval_loss': ...} every --eval_steps under --eval_strategy steps."""
        flag = HfOptions.of(preset).eval_split_flag
        if flag is None:
            return None
        every = HfOptions.of(preset).logging_steps or LOGGING_STEPS
        return (
            f"{flag} {preset.dataset.eval_split:g}: the script holds out that fraction as the Trainer's "
            f"eval_dataset, whose loss the Trainer logs every {every} steps (--eval_strategy steps --eval_steps)"
        )

    def build(self, ctx: BuildContext) -> LaunchSpec:
        preset, plan, opts = ctx.preset, ctx.plan, HfOptions.of(ctx.preset)
        args = [
            opts.script or "<trainer_options.script>",
            *opts.script_args,
            "--per_device_train_batch_size",
            str(plan.per_device_batch),
            "--gradient_accumulation_steps",
            str(preset.batch.grad_accum),
            "--learning_rate",
            f"{plan.lr:g}",
            "--max_steps",
            str(plan.steps),
            "--warmup_steps",
            str(plan.warmup_steps or 0),
            "--output_dir",
            ctx.output_dir,
            "--lr_scheduler_type",
            opts.lr_scheduler_type,
            "--report_to",
            opts.report_to,
        ]
        if ctx.resume:
            args += ["--resume_from_checkpoint", str(self.last_checkpoint(ctx) or ctx.output_path)]
        if plan.device == "cpu":
            args.append("--use_cpu")
        elif preset.mixed_precision != "no":
            args.append(f"--{preset.mixed_precision}")
        if opts.logging_steps:
            args += ["--logging_steps", str(opts.logging_steps)]
        if preset.dataset.eval_split and opts.eval_split_flag:  # an eval_loss dict beside each loss line
            every = str(opts.logging_steps or LOGGING_STEPS)
            args += [opts.eval_split_flag, f"{preset.dataset.eval_split!r}", "--eval_strategy", "steps"]
            args += ["--eval_steps", every]
        if plan.strategy == "fsdp":
            args += ["--fsdp", "--fsdp_config", json.dumps(self.fsdp_config(ctx))]
        argv = torchrun_prefix(ctx, plan.processes_per_node) + args + preset.launch.extra_args
        return LaunchSpec(argv, device_env(ctx) | dict(preset.launch.env), [], ctx.workdir)

    def fsdp_config(self, ctx: BuildContext) -> dict[str, Any]:
        """--fsdp_config: layer classes (TRANSFORMER_BASED_WRAP, the default policy) or a size threshold, which
        TrainingArguments._process_fsdp_args reads only with auto_wrap_policy SIZE_BASED_WRAP."""
        fsdp = ctx.preset.fsdp
        if fsdp.wrap_modules:
            return {"transformer_layer_cls_to_wrap": list(fsdp.wrap_modules)}
        return {"auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": fsdp.min_num_params}

    def planned_fsdp(self, ctx: BuildContext) -> dict[str, Any] | str:
        """The FSDP plugin settings TrainingArguments should resolve from fsdp_config (its fsdp_plugin_args)."""
        if ctx.plan.strategy != "fsdp":
            return "off"
        fsdp = ctx.preset.fsdp
        if fsdp.wrap_modules:
            return {
                "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                "transformer_cls_names_to_wrap": list(fsdp.wrap_modules),
            }
        return {"auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": fsdp.min_num_params}

    def trainer_query(self, ctx: BuildContext, spec: LaunchSpec) -> TrainerQuery | str:
        """TrainingArguments from the command's flags by HfArgumentParser (check/scripts/check_hf.py); the script's own
        flags are left to it, and the answer names them."""
        if missing := interpreter_missing(ctx.python):
            return missing
        plan, opts = ctx.plan, HfOptions.of(ctx.preset)
        script = opts.script or "<trainer_options.script>"
        resume = f"from {self.last_checkpoint(ctx) or ctx.output_path}" if ctx.resume else "none (a fresh start)"
        return TrainerQuery(
            argv=[ctx.python, check_script("check_hf.py"), *trainer_args(spec.argv, script)],
            expected={
                **planned_values(ctx),
                "lr_schedule": opts.lr_scheduler_type,
                "fsdp": self.planned_fsdp(ctx),
                "sharded": plan.strategy == "fsdp" and plan.device == "cuda",
                "resume": resume,
            },
            cwd=ctx.workdir,
            labels={"fsdp": "(FSDP plugin settings)"},
            fixes={
                "sharded": "on CPU processes accelerate wraps the model in DDP; run on GPUs to shard it",
                "fsdp": "set fsdp.wrap_modules or fsdp.min_num_params and leave --fsdp* out of launch.extra_args",
            },
        )

    def log_interval(self, ctx: BuildContext) -> int | None:
        """--logging_steps (TrainingArguments' default 500): DefaultFlowCallback logs at its multiples."""
        return HfOptions.of(ctx.preset).logging_steps or LOGGING_STEPS

    def probe_variant(self, preset: Preset, steps: int) -> Preset:
        """A loss dict every few steps, so the measured window holds many points (the Trainer logs samples/s only in
        its final dict: the monitor reads the rate from its bar, trainer.py _maybe_log_save_evaluate)."""
        every = with_field(preset, "trainer_options.logging_steps", max(1, steps // 30))
        return super().probe_variant(every, steps)

    def lr_schedule(self, ctx: BuildContext) -> LrSchedule:
        """transformers' get_scheduler for --lr_scheduler_type (src/transformers/optimization.py, 5.24): a linear
        warmup from 0, then linear or cosine down to 0 at max_steps; "constant" has no warmup at all. Its log at
        step N shows the lr of update N, read before lr_scheduler.step() (trainer.py _inner_training_loop)."""
        plan, kind = ctx.plan, HfOptions.of(ctx.preset).lr_scheduler_type
        warmup = plan.warmup_steps or 0
        if kind == "constant":
            return LrSchedule(peak=plan.lr)
        if kind == "constant_with_warmup":
            return LrSchedule(peak=plan.lr, warmup_steps=warmup, lag=1)
        return LrSchedule(
            peak=plan.lr, warmup_steps=warmup, decay=kind, decay_start=warmup, decay_end=plan.trainer_steps, lag=1
        )

    def last_checkpoint(self, ctx: BuildContext) -> Path | None:
        """Trainer.save_model's checkpoint-<step> folders; the script must pass
        training_args.resume_from_checkpoint to trainer.train() (the HF examples do)."""
        return newest_step_dir(ctx.output_path, "checkpoint-")

    def parse_line(self, line: str) -> LineInfo | None:
        return parse_hf(line)


TRAINER = HfTrainer()
