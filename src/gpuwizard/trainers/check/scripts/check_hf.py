"""A Hugging Face Trainer script's TrainingArguments, parsed from the command's flags by transformers' own
HfArgumentParser (as the HF example scripts do); the flags it does not know are the script's own, left to it and
named in the answer. Written against transformers 5.24.0 (src/transformers/training_args.py, hf_argparser.py).
The checkpoint it reports is --resume_from_checkpoint: the script must hand it to trainer.train(), as the HF
examples do.

Usage: check_hf.py ARGS... (the arguments after the script in the real command)
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any

import gwcheck

if TYPE_CHECKING:
    from transformers import TrainingArguments

FRESH = "none (a fresh start)"


class Collected(logging.Handler):
    """transformers' own warnings while it parses (a deprecated flag form says so here)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def fsdp_settings(args: TrainingArguments) -> dict[str, Any] | str:
    """What TrainingArguments._process_fsdp_args resolved for accelerate's FSDP plugin (its fsdp_plugin_args)."""
    plugin = getattr(args, "fsdp_plugin_args", None)
    if not args.fsdp or not plugin:
        return "off"
    found = {"auto_wrap_policy": plugin.get("auto_wrap_policy")}
    if "min_num_params" in plugin:
        found["min_num_params"] = plugin["min_num_params"]
    if plugin.get("transformer_cls_names_to_wrap"):
        found["transformer_cls_names_to_wrap"] = plugin["transformer_cls_names_to_wrap"].split(",")
    return found


def parse(argv: list[str]) -> dict[str, Any]:
    try:
        import torch
        import transformers
        from transformers import HfArgumentParser, TrainingArguments
    except ImportError as exc:
        raise gwcheck.NoEnvironment(f"transformers is not installed in this interpreter ({exc})") from None
    notes = []
    on_cpu = "--use_cpu" in argv
    if not on_cpu and not torch.cuda.is_available():
        argv = [*argv, "--use_cpu"]  # bf16/fp16 refuse to parse without a GPU; nothing else read here changes
        notes.append("parsed with --use_cpu: this machine has no CUDA")
    collected = Collected()
    logging.getLogger("transformers").addHandler(collected)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args, left = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(
            args=argv, return_remaining_strings=True, look_for_args_file=False
        )
    logging.getLogger("transformers").removeHandler(collected)
    if left:
        notes.append(f"left to the script (not TrainingArguments flags): {' '.join(left)}")
    said = collected.messages + [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    notes += [f"transformers says: {text}" for text in said if "deprecat" in text.lower()]
    schedule = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    return {
        "parser": f"transformers {transformers.__version__} HfArgumentParser(TrainingArguments)",
        "values": {
            "per_device_batch": args.per_device_train_batch_size,
            "grad_accum": args.gradient_accumulation_steps,
            "lr": args.learning_rate,
            "steps": args.max_steps,
            "warmup_steps": args.get_warmup_steps(args.max_steps),
            "lr_schedule": str(schedule),
            "fsdp": fsdp_settings(args),
            # accelerate's AcceleratorState turns FSDP on only for GPU-type backends: CPU processes run DDP
            "sharded": bool(args.fsdp) and not on_cpu,
            "resume": f"from {args.resume_from_checkpoint}" if args.resume_from_checkpoint else FRESH,
        },
        "notes": notes,
        "watch": [transformers.__file__],
    }


if __name__ == "__main__":
    gwcheck.main(parse)
