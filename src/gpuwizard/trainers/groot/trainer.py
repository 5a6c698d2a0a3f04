"""NVIDIA Isaac-GR00T N1.6/N1.7 `launch_finetune.py`: a global batch divided over --num-gpus."""

from __future__ import annotations

import ast
import functools
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from gpuwizard.core.errors import Problem, note, problem, warning
from gpuwizard.core.yamlio import read_regular
from gpuwizard.model.job import BatchLayout, BuildContext, LaunchSpec, TrainerQuery
from gpuwizard.model.trainer_options import GrootOptions
from gpuwizard.runs.records import LrSchedule
from gpuwizard.trainers.base import (
    Trainer,
    ceil_ratio,
    device_env,
    global_layout,
    interpreter_missing,
    newest_step_dir,
    planned_values,
    torchrun_prefix,
    trainer_args,
)
from gpuwizard.trainers.check import check_script
from gpuwizard.trainers.groot.multi import data_yaml_findings
from gpuwizard.trainers.logparse import LineInfo, parse_hf

if TYPE_CHECKING:
    from gpuwizard.model.catalog import PolicyEntry
    from gpuwizard.model.preset import Preset

FINETUNE_CONFIG = GrootOptions.checkout.marker
RESUME_FIELD = "resume_from_checkpoint"
"""A FinetuneConfig field only on an upstream PR branch: main 626af89, n1.7-release 23ace64 and n1.6.1-release
5dc80c4 have none, and their gr00t/experiment/experiment.py always calls trainer.train(resume_from_checkpoint=True),
so re-running the same command into a folder with checkpoint-* resumes."""


MAX_CONFIG_BYTES = 1 << 20
"""finetune_config.py is ~10 KB upstream (626af89); a file past 1 MiB is not that file."""


@functools.lru_cache(maxsize=16)
def _config_fields(path: str, mtime_ns: int) -> tuple[frozenset[str], str | None]:
    """The FinetuneConfig fields in the file and why it could not be read (None: it was). Only a regular file is
    read, and at most MAX_CONFIG_BYTES: a FIFO in its place once hung plan, preview and check, a link to /dev/zero
    read until MemoryError."""
    try:
        tree = ast.parse(read_regular(Path(path), MAX_CONFIG_BYTES).decode("utf-8"))
    except OSError as exc:
        return frozenset(), exc.strerror or str(exc)
    except UnicodeDecodeError:
        return frozenset(), "it is not UTF-8 text"
    except SyntaxError as exc:
        return frozenset(), f"it is not valid Python (line {exc.lineno})"
    except (ValueError, RecursionError):  # NUL bytes; nesting the parser cannot hold
        return frozenset(), "it is not Python source this parser can read"
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "FinetuneConfig":
            return frozenset(
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            ), None
    return frozenset(), None


def read_finetune_config(workdir: str) -> tuple[frozenset[str], str | None]:
    """The checkout's FinetuneConfig fields, read from its source (empty: no checkout here), and why the file that
    is there could not be read."""
    path = Path(workdir, FINETUNE_CONFIG)
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return frozenset(), None
    return _config_fields(str(path), mtime)


class GrootTrainer(Trainer):
    name = "groot"
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

    def default_warmup_steps(self, preset: Preset, policy: PolicyEntry, steps: int, per_update: int) -> int | None:
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
            "--no-resume-from-checkpoint",
            "--nproc-per-node",
            "--nproc_per_node",
        )

    def dataset_path(self, ctx: BuildContext) -> str | None:
        """dataset.root: launch_finetune.py takes a folder, relative to launch.workdir; no repo id is used."""
        root = ctx.preset.dataset.root
        return os.path.expanduser(root) if root else None

    def check(self, ctx: BuildContext) -> list[Problem]:
        preset, plan, opts = ctx.preset, ctx.plan, GrootOptions.of(ctx.preset)
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
        found += data_yaml_findings(ctx, read_finetune_config(ctx.workdir)[0])
        return found + self.config_findings(ctx) + self.resume_findings(ctx)

    def config_findings(self, ctx: BuildContext) -> list[Problem]:
        """The checkout's finetune_config.py is there but cannot be read: what the plan assumes instead."""
        _, unreadable = read_finetune_config(ctx.workdir)
        if unreadable is None:
            return []
        return [
            warning(
                "launch.workdir",
                f"{FINETUNE_CONFIG} in {ctx.workdir} cannot be read: {unreadable}; so whether this GR00T takes "
                "--resume-from-checkpoint is unknown, and the command is built as for upstream main, which has no "
                "such flag",
                f"restore the checkout's own {FINETUNE_CONFIG} (e.g. `git checkout -- {FINETUNE_CONFIG}` there)",
                value=ctx.preset.launch.workdir,
            )
        ]

    def has_resume_flag(self, ctx: BuildContext) -> bool:
        """Whether the installed FinetuneConfig has --resume-from-checkpoint (off by default where it exists)."""
        return RESUME_FIELD in read_finetune_config(ctx.workdir)[0]

    def resume_findings(self, ctx: BuildContext) -> list[Problem]:
        """What a fresh run does to an output folder that holds checkpoints, and how a resume is started."""
        checkpoint = self.last_checkpoint(ctx)
        flag = self.has_resume_flag(ctx)
        name = ctx.preset.name
        if ctx.resume:
            if checkpoint is None or flag:
                return []
            return [
                note(
                    "launch_finetune.py resumes by itself: the command is the same as a fresh run's, and it "
                    f"continues from {checkpoint.name}, the newest checkpoint in {ctx.output_dir} "
                    "(gr00t/experiment/experiment.py: trainer.train(resume_from_checkpoint=True))"
                )
            ]
        if checkpoint is None:
            return []
        if flag:
            return [
                warning(
                    "output_dir",
                    f"holds {checkpoint.name}, and this GR00T's --resume-from-checkpoint is off by default: a fresh "
                    "run trains again from the base model and writes its checkpoints over these",
                    f"continue it with `gpuwizard run {name} --resume`, or set another output_dir",
                    value=ctx.output_dir,
                )
            ]
        return [
            warning(
                "output_dir",
                f"holds {checkpoint.name}, and launch_finetune.py always continues from the newest checkpoint-* in "
                "its output folder (gr00t/experiment/experiment.py: trainer.train(resume_from_checkpoint=True)): "
                "this run would resume, not start fresh",
                f"to continue it, use `gpuwizard run {name} --resume` (the same command); to start fresh, empty "
                f"{ctx.output_path} or set another output_dir",
                value=ctx.output_dir,
            )
        ]

    def last_checkpoint(self, ctx: BuildContext) -> Path | None:
        """The HF Trainer's newest checkpoint-<step> folder (transformers' get_last_checkpoint), which
        launch_finetune.py continues from."""
        return newest_step_dir(ctx.output_path, "checkpoint-")

    def preflight(self, ctx: BuildContext) -> list[Problem]:
        found = []
        script = Path(ctx.workdir, GrootOptions.of(ctx.preset).script)
        if not script.is_file():
            found.append(
                problem(
                    "launch.workdir",
                    f"{GrootOptions.of(ctx.preset).script} is not in {ctx.workdir}",
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
        preset, plan, opts = ctx.preset, ctx.plan, GrootOptions.of(ctx.preset)
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
            ceil_ratio(plan.warmup_steps or 0, plan.steps),  # TrainingArguments: ceil(max_steps * warmup_ratio)
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
        if ctx.resume and self.has_resume_flag(ctx):
            args.append("--resume-from-checkpoint")
        return LaunchSpec(launcher + args + preset.launch.extra_args, env | dict(preset.launch.env), [], ctx.workdir)

    def log_interval(self, ctx: BuildContext) -> int | None:
        """TrainingConfig.logging_steps (gr00t/configs/training/training_config.py, 626af89): launch_finetune.py
        has no flag for it."""
        return 10

    def lr_schedule(self, ctx: BuildContext) -> LrSchedule:
        """experiment.py's TrainingArguments take lr_scheduler_type "cosine" (gr00t/configs/training/
        training_config.py): transformers' cosine with warmup, 0 to the peak, then down to 0 at max_steps; the log at
        step N shows update N's lr, read before lr_scheduler.step() (transformers 4.57.3 trainer.py)."""
        plan, warmup = ctx.plan, ctx.plan.warmup_steps or 0
        return LrSchedule(
            peak=plan.lr, warmup_steps=warmup, decay="cosine", decay_start=warmup, decay_end=plan.trainer_steps, lag=1
        )

    def checking_python(self, ctx: BuildContext) -> str:
        """The interpreter that runs launch_finetune.py: launch.python, else uv's project environment."""
        if GrootOptions.of(ctx.preset).uv and not ctx.preset.launch.python:
            return str(Path(ctx.workdir, ".venv", "bin", "python"))
        return ctx.python

    def trainer_query(self, ctx: BuildContext, spec: LaunchSpec) -> TrainerQuery | str:
        """tyro's FinetuneConfig and the TrainingArguments experiment.py builds from it (check_groot.py)."""
        python = self.checking_python(ctx)
        if missing := interpreter_missing(python):
            return missing
        script = GrootOptions.of(ctx.preset).script
        if (unreadable := read_finetune_config(ctx.workdir)[1]) is not None:
            return f"{FINETUNE_CONFIG} in {ctx.workdir} cannot be read: {unreadable}"
        if not Path(ctx.workdir, FINETUNE_CONFIG).is_file():
            return f"no Isaac-GR00T checkout in {ctx.workdir} ({FINETUNE_CONFIG} is missing)"
        plan, checkpoint = ctx.plan, self.last_checkpoint(ctx)
        resume = f"from {checkpoint.name}" if ctx.resume and checkpoint else "none (a fresh start)"
        return TrainerQuery(
            argv=[python, check_script("check_groot.py"), script, *trainer_args(spec.argv, script)],
            expected={
                "global_batch": ctx.preset.batch.size,
                **planned_values(ctx),
                "lr_schedule": "cosine",
                "dataset": self.dataset_path(ctx),
                "gpus": plan.world_size,
                "output_dir": ctx.output_dir,
                "resume": resume,
            },
            cwd=ctx.workdir,
            fixes={
                "dataset": "set dataset.root to the dataset folder (launch_finetune.py's --dataset-path)",
                "resume": f"launch_finetune.py continues from the newest checkpoint-* in {ctx.output_dir} by itself: "
                f"to continue, `gpuwizard run {ctx.preset.name} --resume`; to start fresh, empty {ctx.output_path} or "
                "set another output_dir",
            },
        )

    def parse_line(self, line: str) -> LineInfo | None:
        return parse_hf(line)


TRAINER = GrootTrainer()
