"""NVIDIA Isaac-GR00T N1.6/N1.7 `launch_finetune.py`: a global batch divided over --num-gpus."""

from __future__ import annotations

import math
import os
from pathlib import Path

from pydantic import Field

from gpuwizard.contracts import BatchLayout, BuildContext, LaunchSpec
from gpuwizard.errors import Problem, note, problem, warning
from gpuwizard.logparse import LineInfo, parse_hf
from gpuwizard.trainers.base import (
    Trainer,
    TrainerOptions,
    device_env,
    global_layout,
    newest_step_dir,
    torchrun_prefix,
)


class GrootOptions(TrainerOptions):
    """launch_finetune.py's own settings beyond the preset's common fields."""

    base_model_path: str | None = Field(
        None, description="--base-model-path: the GR00T checkpoint to fine-tune (hub id or folder)."
    )
    embodiment_tag: str | None = Field(
        None, description="--embodiment-tag, e.g. NEW_EMBODIMENT (with modality_config_path) for a new robot."
    )
    modality_config_path: str | None = Field(
        None, description="--modality-config-path: the modality config of a new embodiment."
    )
    script: str = Field(
        "gr00t/experiment/launch_finetune.py", description="The fine-tuning script, relative to launch.workdir."
    )
    uv: bool = Field(False, description="Start it with `uv run`.")
    tune_llm: bool = Field(False, description="--tune-llm: also train the language model.")
    tune_visual: bool = Field(False, description="--tune-visual: also train the vision encoder.")
    save_steps: int | None = Field(None, gt=0, description="--save-steps: steps between checkpoints.")
    dataloader_num_workers: int | None = Field(None, ge=0, description="--dataloader-num-workers.")
    use_wandb: bool = Field(False, description="--use-wandb.")


class GrootTrainer(Trainer):
    name = "groot"
    package = "gr00t"
    title = "Isaac-GR00T N1.7 (launch_finetune.py)"
    batch_flag = "--global-batch-size"
    progress_markers = ("{'loss'", "{'train_runtime'", "Saving model checkpoint", "%|")
    batch_meaning = (
        "--global-batch-size is global: N GPUs split it, each card gets batch / N; accumulation multiplies it."
    )
    Options = GrootOptions
    needs_cuda = True
    batch_is_global = True

    def batch_layout(self, size: int, grad_accum: int, world: int) -> BatchLayout:
        return global_layout(size, grad_accum, world, self.batch_flag)

    def default_warmup_steps(self, preset, policy, steps, per_update):  # type: ignore[no-untyped-def]
        return math.ceil(0.05 * steps)

    def managed_flags(self) -> tuple[str, ...]:
        return (
            "--num-gpus",
            "--num_gpus",
            "--global-batch-size",
            "--global_batch_size",
            "--gradient-accumulation-steps",
            "--learning-rate",
            "--max-steps",
            "--warmup-ratio",
            "--output-dir",
            "--base-model-path",
            "--dataset-path",
            "--embodiment-tag",
            "--resume-from-checkpoint",
            "--nproc-per-node",
            "--nproc_per_node",
        )

    def dataset_path(self, ctx: BuildContext) -> str | None:
        """dataset.root: launch_finetune.py takes a folder, relative to launch.workdir; no repo id is used."""
        root = ctx.preset.dataset.root
        return os.path.expanduser(root) if root else None

    def check(self, ctx: BuildContext) -> list[Problem]:
        preset, plan, opts = ctx.preset, ctx.plan, ctx.preset.options
        found: list[Problem] = []
        if not opts.base_model_path:
            found.append(
                problem(
                    "trainer_options.base_model_path",
                    "is required by launch_finetune.py",
                    f"set it to {ctx.policy.base_ids.get('groot', 'nvidia/GR00T-N1.7-3B')} or a local checkpoint",
                    value=None,
                )
            )
        if not opts.embodiment_tag:
            found.append(
                problem(
                    "trainer_options.embodiment_tag",
                    "is required by launch_finetune.py",
                    "set it, e.g. new_embodiment for an SO-100 arm (with trainer_options.modality_config_path)",
                    value=None,
                )
            )
        elif opts.embodiment_tag.lower() == "new_embodiment" and not opts.modality_config_path:
            found.append(
                problem(
                    "trainer_options.modality_config_path",
                    "is required with embodiment_tag new_embodiment (GR00T has no modality config registered for it)",
                    "point it at a .py that calls register_modality_config, e.g. examples/SO100/so100_config.py",
                    value=None,
                )
            )
        if not self.dataset_path(ctx):
            found.append(
                problem(
                    "dataset.root",
                    "GR00T reads a local dataset folder (LeRobot v2 layout with meta/modality.json), given as "
                    "--dataset-path",
                    "set dataset.root to it (relative to launch.workdir, or absolute); dataset.repo_id is not used",
                    value=None,
                )
            )
        if preset.hardware.nodes > 1:
            found.append(
                problem(
                    "hardware.nodes",
                    "launch_finetune.py is documented for one node only (Isaac-GR00T README, fine-tuning: "
                    "--num-gpus GPUs of one machine)",
                    "train on one node (hardware.nodes: 1) with up to 8 GPUs",
                    value=preset.hardware.nodes,
                )
            )
        if preset.mixed_precision != "bf16":
            found.append(
                warning(
                    "mixed_precision",
                    "launch_finetune.py always trains in bf16; this setting is not passed",
                    "set mixed_precision: bf16",
                    value=preset.mixed_precision,
                )
            )
        if plan.strategy == "ddp" and plan.world_size > 1:
            found.append(
                note(
                    "GR00T multi-GPU fine-tuning runs DeepSpeed ZeRO-2 (launch_finetune.py exposes no plain DDP); "
                    "DeepSpeed ships wheels for x86_64 Linux only"
                )
            )
        if (opts.tune_llm or opts.tune_visual) and (plan.fits.device_gb or 0) < 80:
            found.append(
                warning(
                    "trainer_options.tune_llm",
                    "tuning the LLM or vision tower needs 80 GB+ per GPU",
                    "leave tune_llm and tune_visual off on smaller cards",
                )
            )
        if plan.per_device_batch and plan.per_device_batch > 64:
            found.append(
                warning(
                    "batch.size",
                    f"{plan.per_device_batch} samples per card is above what GR00T's docs run on 40-80 GB cards "
                    "(global 32 on 1 GPU, 64-640 on 4-8)",
                    "lower the global batch and add gradient accumulation",
                    value=preset.batch.size,
                )
            )
        out = ctx.output_path
        if not ctx.resume and out.is_dir() and any(out.glob("checkpoint-*")):
            found.append(
                warning(
                    "output_dir",
                    "holds checkpoint-* folders and a fresh run starts over next to them (launch_finetune.py's "
                    "resume_from_checkpoint defaults to False)",
                    f"continue the last run with `gpuwizard run {preset.name} --resume`, or use a fresh output_dir",
                    value=ctx.output_dir,
                )
            )
        return found

    def last_checkpoint(self, ctx: BuildContext) -> Path | None:
        """The HF Trainer's newest checkpoint-<step> folder, which --resume-from-checkpoint continues from."""
        return newest_step_dir(ctx.output_path, "checkpoint-")

    def preflight(self, ctx: BuildContext) -> list[Problem]:
        found = []
        script = Path(ctx.workdir, ctx.preset.options.script)
        if not script.is_file():
            found.append(
                problem(
                    "launch.workdir",
                    f"{ctx.preset.options.script} is not in {ctx.workdir}",
                    "set launch.workdir to your Isaac-GR00T checkout",
                    value=ctx.preset.launch.workdir,
                )
            )
        dataset = self.dataset_path(ctx)
        if dataset and not Path(ctx.workdir, dataset).is_dir():
            found.append(
                problem(
                    "dataset.root",
                    f"is not a folder under {ctx.workdir}",
                    "point it at the GR00T dataset folder (LeRobot v2 layout with meta/modality.json)",
                    value=ctx.preset.dataset.root,
                )
            )
        return found

    def build(self, ctx: BuildContext) -> LaunchSpec:
        preset, plan, opts = ctx.preset, ctx.plan, ctx.preset.options
        prefix = ["uv", "run"] if opts.uv else []
        env = device_env(ctx)
        if plan.world_size == 1:
            python = "python" if opts.uv else ctx.python
            launcher = prefix + [python, opts.script]
            devices = preset.hardware.devices or [0]
            env["CUDA_VISIBLE_DEVICES"] = str(devices[0])
        else:
            launcher = torchrun_prefix(ctx, plan.processes_per_node, uv=opts.uv) + [opts.script]
        args = [
            "--base-model-path",
            opts.base_model_path or "<trainer_options.base_model_path>",
            "--dataset-path",
            self.dataset_path(ctx) or "<dataset.root>",
            "--embodiment-tag",
            opts.embodiment_tag or "<trainer_options.embodiment_tag>",
        ]
        if opts.modality_config_path:
            args += ["--modality-config-path", opts.modality_config_path]
        args += [
            "--num-gpus",
            str(plan.world_size),
            "--global-batch-size",
            str(preset.batch.size),
            "--gradient-accumulation-steps",
            str(preset.batch.grad_accum),
            "--learning-rate",
            f"{plan.lr:g}",
            "--max-steps",
            str(plan.steps),
            "--warmup-ratio",
            f"{(plan.warmup_steps or 0) / plan.steps:.6g}",
            "--output-dir",
            ctx.output_dir,
        ]
        if opts.tune_llm:
            args.append("--tune-llm")
        if opts.tune_visual:
            args.append("--tune-visual")
        if opts.save_steps:
            args += ["--save-steps", str(opts.save_steps)]
        if opts.dataloader_num_workers is not None:
            args += ["--dataloader-num-workers", str(opts.dataloader_num_workers)]
        if opts.use_wandb:
            args.append("--use-wandb")
        if ctx.resume:
            args.append("--resume-from-checkpoint")
        return LaunchSpec(launcher + args + preset.launch.extra_args, env | dict(preset.launch.env), [], ctx.workdir)

    def parse_line(self, line: str) -> LineInfo | None:
        return parse_hf(line)


TRAINER = GrootTrainer()
