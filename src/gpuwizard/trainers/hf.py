"""Any Hugging Face Trainer script under torchrun: per-device batch, accumulation, lr, max steps, warmup."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field

from gpuwizard.contracts import BatchLayout, BuildContext, LaunchSpec
from gpuwizard.errors import Problem, problem
from gpuwizard.logparse import LineInfo, parse_hf
from gpuwizard.trainers.base import (
    Trainer,
    TrainerOptions,
    device_env,
    newest_step_dir,
    per_worker_layout,
    torchrun_prefix,
)


class HfOptions(TrainerOptions):
    """The training script and what it needs beyond TrainingArguments."""

    script: str | None = Field(None, description="The HF Trainer training script, relative to launch.workdir.")
    script_args: list[str] = Field(
        [], description="The script's own arguments (model, data), before gpuwizard's TrainingArguments."
    )
    report_to: str = Field("none", description="--report_to.")


class HfTrainer(Trainer):
    name = "hf"
    package = "transformers"
    title = "Hugging Face Trainer script"
    batch_flag = "--per_device_train_batch_size"
    progress_markers = ("{'loss'", "{'train_runtime'", "Saving model checkpoint", "%|")
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
            "--bf16",
            "--fp16",
            "--fsdp",
            "--fsdp_config",
            "--resume_from_checkpoint",
        )

    def check(self, ctx: BuildContext) -> list[Problem]:
        found = []
        if not ctx.preset.options.script:
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
        return found

    def preflight(self, ctx: BuildContext) -> list[Problem]:
        script = ctx.preset.options.script
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

    def build(self, ctx: BuildContext) -> LaunchSpec:
        preset, plan, opts = ctx.preset, ctx.plan, ctx.preset.options
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
            "--report_to",
            opts.report_to,
        ]
        if ctx.resume:
            args += ["--resume_from_checkpoint", str(self.last_checkpoint(ctx) or ctx.output_path)]
        if plan.device == "cpu":
            args.append("--use_cpu")
        elif preset.mixed_precision != "no":
            args.append(f"--{preset.mixed_precision}")
        if plan.strategy == "fsdp":
            # transformers v5 takes the wrap policy only inside --fsdp_config (a JSON string on the command line);
            # --fsdp_transformer_layer_cls_to_wrap and --fsdp_min_num_params are gone
            wrap = (
                {"transformer_layer_cls_to_wrap": list(preset.fsdp.wrap_modules)}
                if preset.fsdp.wrap_modules
                else {"min_num_params": preset.fsdp.min_num_params}
            )
            args += ["--fsdp", "full_shard auto_wrap", "--fsdp_config", json.dumps(wrap)]
        argv = torchrun_prefix(ctx, plan.processes_per_node) + args + preset.launch.extra_args
        return LaunchSpec(argv, device_env(ctx) | dict(preset.launch.env), [], ctx.workdir)

    def last_checkpoint(self, ctx: BuildContext) -> Path | None:
        """Trainer.save_model's checkpoint-<step> folders; the script must pass
        training_args.resume_from_checkpoint to trainer.train() (the HF examples do)."""
        return newest_step_dir(ctx.output_path, "checkpoint-")

    def parse_line(self, line: str) -> LineInfo | None:
        return parse_hf(line)


TRAINER = HfTrainer()
