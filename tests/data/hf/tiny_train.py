"""A tiny Hugging Face Trainer script, shaped like the HF example scripts: its own flags and TrainingArguments parsed
by HfArgumentParser, the Trainer's own logging, resume from --resume_from_checkpoint. The model (one linear layer
pair) and the data (a noisy linear map) are made here: nothing is downloaded. gpuwizard's real HF tests run it.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field

import torch
import transformers
from torch import nn
from transformers import HfArgumentParser, Trainer, TrainerCallback, TrainingArguments


@dataclass
class ScriptArguments:
    samples: int = field(default=256, metadata={"help": "Rows in the synthetic dataset."})
    hidden: int = field(default=32, metadata={"help": "Width of the hidden layer."})
    step_sleep: float = field(default=0.0, metadata={"help": "Seconds added to every step (a slow run to stop)."})
    eval_split: float = field(
        default=0.0, metadata={"help": "Fraction of the rows held out as the Trainer's eval_dataset (its last ones)."}
    )


class TinyRegressor(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 4))

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        out = self.body(x)
        return {"loss": nn.functional.mse_loss(out, labels), "logits": out}


class Synthetic(torch.utils.data.Dataset):
    def __init__(self, samples: int):
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(samples, 8, generator=generator)
        self.y = self.x @ torch.randn(8, 4, generator=generator) + 0.01 * torch.randn(samples, 4, generator=generator)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[index], "labels": self.y[index]}


class Report(TrainerCallback):
    """Says how the model was wrapped (DDP or FSDP), and slows the steps down when asked."""

    def __init__(self, step_sleep: float):
        self.step_sleep = step_sleep
        self.trainer: Trainer | None = None

    def on_train_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        if state.is_world_process_zero and self.trainer is not None:
            wrapped = type(self.trainer.model_wrapped).__name__
            kind = self.trainer.accelerator.distributed_type
            print(f"[hf_tiny] {args.world_size} processes, accelerate {kind}, model wrapped as {wrapped}", flush=True)

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        if self.step_sleep:
            time.sleep(self.step_sleep)


def main() -> None:
    script_args, training_args = HfArgumentParser((ScriptArguments, TrainingArguments)).parse_args_into_dataclasses()
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", handlers=[logging.StreamHandler(sys.stdout)]
    )
    if training_args.should_log:
        transformers.utils.logging.set_verbosity_info()  # as the HF examples do: the Trainer's banner shows
    torch.manual_seed(training_args.seed)
    report = Report(script_args.step_sleep)
    data = Synthetic(script_args.samples)
    held = math.ceil(len(data) * script_args.eval_split)  # gpuwizard's contract: the last rows, never trained on
    rows = list(range(len(data)))
    trainer = Trainer(
        model=TinyRegressor(script_args.hidden),
        args=training_args,
        train_dataset=torch.utils.data.Subset(data, rows[: len(data) - held]) if held else data,
        eval_dataset=torch.utils.data.Subset(data, rows[len(data) - held :]) if held else None,
        callbacks=[report],
    )
    report.trainer = trainer
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    # Leave without Python's exit: with torch 2.13's gloo, a worker thread can drop the last all_gather's tensor
    # after the interpreter began to shut down, and that rank aborts (terminate called without an active exception;
    # 2 of 12 plain torchrun runs here). gpuwizard explains that abort (tests/unit/test_monitor.py); the tests that
    # run this script are about what it trains, so they should not fail on it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
