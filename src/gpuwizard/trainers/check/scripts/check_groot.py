"""Isaac-GR00T's launch_finetune.py: its tyro parser (FinetuneConfig) on the command, then the HF TrainingArguments
gr00t/experiment/experiment.py builds from it, as of Isaac-GR00T main 626af89 (the same in n1.7-release 23ace64 and
n1.6.1-release 5dc80c4). Runs in the checkout (the check's cwd) with the GR00T environment's interpreter.

Usage: check_groot.py SCRIPT ARGS... (the arguments after launch_finetune.py in the real command)
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from dataclasses import fields
from typing import Any, TypeVar

import gwcheck

FRESH = "none (a fresh start)"
ConfigT = TypeVar("ConfigT")


def parse_finetune_config(config_class: type[ConfigT], argv: list[str]) -> ConfigT:
    """tyro.cli as launch_finetune.py calls it; on a refusal, tyro's own message is the last line on stderr."""
    import tyro

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            config: ConfigT = tyro.cli(config_class, args=argv)
            return config
    except SystemExit:
        text = captured.getvalue()
        sys.stderr.write(text)
        sys.stderr.write(tyro_message(text) + "\n")
        raise


def tyro_message(text: str) -> str:
    """The first line inside tyro's error box (its last line is only 'For full helptext, run ... --help')."""
    frame = set("─│╭╮╰╯ ")
    for line in text.splitlines():
        inner = line.strip().strip("│").strip()
        if inner and not set(inner) <= frame and not line.strip().startswith("╭") and "helptext" not in inner:
            return inner
    return gwcheck.last_error_line(text)


def last_checkpoint(output_dir: str) -> str | None:
    """The folder Gr00tTrainer.train(resume_from_checkpoint=True) continues from (gr00t/experiment/trainer.py):
    transformers' get_last_checkpoint, on a folder experiment.py creates first when it is missing."""
    from transformers.trainer_utils import get_last_checkpoint

    if not os.path.isdir(output_dir):
        return None
    found: str | None = get_last_checkpoint(output_dir)
    return found


def parse(argv: list[str]) -> dict[str, Any]:
    sys.path.insert(0, os.getcwd())  # launch_finetune.py runs from the checkout, which is not installed
    try:
        import torch
        import transformers
        import tyro
        from gr00t.configs.base_config import get_default_config
        from gr00t.configs.finetune_config import FinetuneConfig
        from transformers import TrainingArguments
    except ImportError as exc:
        raise gwcheck.NoEnvironment(f"the Isaac-GR00T checkout or its environment is incomplete ({exc})") from None
    script, args = argv[0], argv[1:]
    ft = parse_finetune_config(FinetuneConfig, args)
    has_resume_flag = "resume_from_checkpoint" in {f.name for f in fields(FinetuneConfig)}

    # launch_finetune.py: the default Config, overwritten with the FinetuneConfig values
    training = get_default_config().training
    for name in (
        "experiment_name",
        "global_batch_size",
        "dataloader_num_workers",
        "learning_rate",
        "gradient_accumulation_steps",
        "output_dir",
        "save_steps",
        "save_total_limit",
        "num_gpus",
        "max_steps",
        "weight_decay",
        "warmup_ratio",
        "save_only_model",
    ):
        setattr(training, name, getattr(ft, name))

    # experiment.py warn_configs, then run(): the output folder, the per-device batch, TrainingArguments
    assert training.global_batch_size % training.num_gpus == 0, "global_batch_size must be divisible by num_gpus"
    output_dir = training.output_dir
    if training.experiment_name is not None:
        output_dir = os.path.join(output_dir, training.experiment_name)
    if training.batch_size is None:
        per_device = training.global_batch_size // training.num_gpus
    else:
        per_device = training.batch_size
    notes = []
    use_cpu = not torch.cuda.is_available()
    if use_cpu:
        notes.append("TrainingArguments built with use_cpu: this machine has no CUDA (bf16 needs it)")
    training_args = TrainingArguments(
        output_dir=output_dir,
        max_steps=training.max_steps,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=training.gradient_accumulation_steps,
        learning_rate=training.learning_rate,
        lr_scheduler_type=training.lr_scheduler_type,
        weight_decay=training.weight_decay,
        warmup_ratio=training.warmup_ratio,
        max_grad_norm=training.max_grad_norm,
        logging_steps=training.logging_steps,
        save_steps=training.save_steps,
        save_total_limit=training.save_total_limit,
        save_only_model=training.save_only_model,
        fp16=training.fp16,
        bf16=training.bf16,
        use_cpu=use_cpu,
        report_to="none",
    )
    if training.num_gpus > 1 and not training.use_ddp:
        notes.append("experiment.py adds its DeepSpeed ZeRO config here (left out: it sets no batch, lr or warmup)")

    # experiment.py always calls trainer.train(resume_from_checkpoint=True): the newest checkpoint-* continues
    checkpoint = last_checkpoint(output_dir)
    resumes = checkpoint is not None and (not has_resume_flag or bool(ft.resume_from_checkpoint))
    if not has_resume_flag:
        notes.append(
            "FinetuneConfig has no --resume-from-checkpoint: launch_finetune.py continues from the newest "
            "checkpoint-* in its output folder by itself (gr00t/experiment/experiment.py)"
        )
    return {
        "parser": f"Isaac-GR00T {os.path.basename(script)} (tyro {tyro.__version__}, transformers "
        f"{transformers.__version__})",
        "values": {
            "global_batch": ft.global_batch_size,
            "per_device_batch": training_args.per_device_train_batch_size,
            "grad_accum": training_args.gradient_accumulation_steps,
            "lr": training_args.learning_rate,
            "steps": training_args.max_steps,
            "warmup_steps": training_args.get_warmup_steps(training_args.max_steps),
            "lr_schedule": str(getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type)),
            "dataset": ft.dataset_path,
            "gpus": training.num_gpus,
            "output_dir": output_dir,
            "resume": f"from {os.path.basename(checkpoint)}" if resumes and checkpoint is not None else FRESH,
        },
        "notes": notes,
        "watch": [
            os.path.abspath(output_dir),
            *(sys.modules[c.__module__].__file__ for c in (FinetuneConfig, type(training))),
        ],
    }


if __name__ == "__main__":
    gwcheck.main(parse)
