"""The built-in demo trainer (gpuwizard.demo.train) under torchrun: runs anywhere, gloo on CPU, NCCL on GPU."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwizard.core import paths
from gpuwizard.core.errors import Problem, problem
from gpuwizard.model.job import BatchLayout, BuildContext, LaunchSpec, TrainerQuery
from gpuwizard.model.preset import with_field
from gpuwizard.model.trainer_options import DemoOptions
from gpuwizard.runs.records import LrSchedule
from gpuwizard.trainers.base import (
    Trainer,
    current_python,
    device_env,
    interpreter_missing,
    per_worker_layout,
    planned_values,
    torchrun_prefix,
    trainer_args,
)
from gpuwizard.trainers.check import check_script
from gpuwizard.trainers.logparse import EVAL_LOSS, LineInfo, parse_tqdm, to_float

if TYPE_CHECKING:
    from gpuwizard.model.preset import Preset

DEMO_LINE = re.compile(
    r"\[demo\] step (?P<step>\d+)/(?P<total>\d+) loss=(?P<loss>\S+) lr=(?P<lr>\S+) samples/s=(?P<sps>\S+)"
)
DEMO_BANNER = re.compile(r"\[demo\] Effective batch size: .*= (?P<eff>\d+)")


def demo_dataset_root(repo_id: str) -> str:
    return str(paths.data_dir() / "datasets" / repo_id.replace("/", "__"))


class DemoTrainer(Trainer):
    name = "demo"
    title = "Built-in demo trainer"
    batch_flag = "--batch-size"
    progress_markers = ("[demo]", "%|")
    batch_meaning = (
        "--batch-size is per worker process: N workers train on N x batch x accumulation samples per update."
    )
    Options = DemoOptions
    writes_dataset = True
    probe_steps = 3000
    """Its steps take milliseconds: the probe stops a configuration once it has measured enough (probe.ENOUGH_S)."""
    checkpoint_parts = (("model.pt",),)
    continue_schedule = (
        "the demo's lr is flat after its warmup, so the extra steps train at the same lr, from the saved optimizer "
        "state"
    )

    def batch_layout(self, size: int, grad_accum: int, world: int) -> BatchLayout:
        return per_worker_layout(size, grad_accum, world)

    def default_python(self) -> str | None:
        return current_python()

    def managed_flags(self) -> tuple[str, ...]:
        return (
            "--steps",
            "--batch-size",
            "--grad-accum",
            "--lr",
            "--warmup-steps",
            "--output-dir",
            "--dataset-root",
            "--device",
            "--resume",
            "--eval-split",
            "--eval-every",
        )

    def check(self, ctx: BuildContext) -> list[Problem]:
        found = []
        opts, world = DemoOptions.of(ctx.preset), ctx.plan.world_size
        for field, injected in (("inject_hang", opts.inject_hang), ("inject_crash", opts.inject_crash)):
            if injected and injected.rank >= world:
                found.append(
                    problem(
                        f"trainer_options.{field}.rank",
                        f"there are only {world} ranks (0..{world - 1})",
                        f"use a rank below {world}",
                        value=injected.rank,
                    )
                )
        return found

    def build(self, ctx: BuildContext) -> LaunchSpec:
        preset, plan, opts = ctx.preset, ctx.plan, DemoOptions.of(ctx.preset)
        if preset.dataset.root:
            dataset_root = os.path.expanduser(preset.dataset.root)
        else:
            assert preset.dataset.repo_id is not None, "a dataset names a repo_id or a root"
            dataset_root = demo_dataset_root(preset.dataset.repo_id)
        args = [
            "-m",
            "gpuwizard.demo.train",
            f"--steps={plan.steps}",
            f"--batch-size={plan.per_device_batch}",
            f"--grad-accum={preset.batch.grad_accum}",
            f"--lr={plan.lr:g}",
            f"--warmup-steps={plan.warmup_steps or 0}",
            f"--output-dir={ctx.output_dir}",
            f"--dataset-root={dataset_root}",
            f"--episodes={opts.episodes}",
            f"--device={plan.device}",
            f"--log-every={opts.log_every}",
        ]
        if opts.save_every:
            args.append(f"--save-every={opts.save_every}")
        if preset.dataset.eval_split:  # a held-out loss at every log line, as LeRobot main's --eval_steps
            args += [f"--eval-split={preset.dataset.eval_split!r}", f"--eval-every={opts.log_every}"]
        if opts.seed:
            args.append(f"--seed={opts.seed}")
        if ctx.resume:
            args.append("--resume")
        if opts.step_time_s:
            args.append(f"--step-time={opts.step_time_s:g}")
        if opts.checkpoint_time_s:
            args.append(f"--checkpoint-time={opts.checkpoint_time_s:g}")
        if opts.inject_hang:
            args.append(f"--inject-hang={opts.inject_hang.rank}:{opts.inject_hang.step}")
        if opts.inject_nan:
            args.append(f"--inject-nan={opts.inject_nan}")
        if opts.inject_crash:
            args.append(f"--inject-crash={opts.inject_crash.rank}:{opts.inject_crash.step}")
        if opts.task == "noise":
            args += ["--task=noise", f"--noise-dim={opts.noise_dim}", f"--noise-sigma={opts.noise_sigma!r}"]
            args += [f"--noise-offset={opts.noise_offset!r}"] + (["--noise-hold"] if opts.noise_hold else [])
        if opts.ignore_lr_flag:
            args.append("--ignore-lr-flag")
        if opts.device_memory_mb:
            args.append(f"--device-memory-mb={opts.device_memory_mb:g}")
        argv = torchrun_prefix(ctx, plan.processes_per_node) + args + preset.launch.extra_args
        return LaunchSpec(argv, device_env(ctx) | dict(preset.launch.env), [], ctx.workdir)

    def trainer_query(self, ctx: BuildContext, spec: LaunchSpec) -> TrainerQuery | str:
        """The demo's own argparse parser, in the interpreter that will train."""
        if missing := interpreter_missing(ctx.python):
            return missing
        return TrainerQuery(
            argv=[ctx.python, check_script("check_demo.py"), *trainer_args(spec.argv, "gpuwizard.demo.train")],
            expected=planned_values(ctx),
            cwd=ctx.workdir,
        )

    def held_out(self, preset: Preset, python: str, dataset: dict[str, Any] | None) -> str | None:
        """The demo holds out episodes of its one task and logs their loss in LeRobot main's form (demo/heldout.py)."""
        split = preset.dataset.eval_split
        episodes = dataset["episodes"] if dataset else DemoOptions.of(preset).episodes
        held = math.ceil(episodes * split)
        return (
            f"{episodes - held} episodes train, {held} held out (the last ceil({episodes} x {split:g}) of each task, "
            "as LeRobot main's --dataset.eval_split); their loss is logged at every log line"
        )

    def probe_variant(self, preset: Preset, steps: int) -> Preset:
        """Thirty log lines, so the measured window holds many of the trainer's own samples/s; no periodic saves."""
        quiet = with_field(preset, "trainer_options.save_every", None)
        return with_field(super().probe_variant(quiet, steps), "trainer_options.log_every", max(1, steps // 30))

    def lr_schedule(self, ctx: BuildContext) -> LrSchedule:
        """gpuwizard/demo/train.py: LambdaLR(min(1, (s + 1) / warmup)), logged after `step` scheduler steps."""
        plan, warmup = ctx.plan, ctx.plan.warmup_steps or 0
        if warmup <= 1:
            return LrSchedule(peak=plan.lr)
        return LrSchedule(peak=plan.lr, warmup_steps=warmup - 1, warmup_start=1 / warmup)

    def last_checkpoint(self, ctx: BuildContext) -> Path | None:
        """checkpoints/last, once its weights are complete (they are written aside, then renamed)."""
        last = ctx.output_path / "checkpoints" / "last"
        return last.resolve() if (last / "model.pt").is_file() else None

    def parse_line(self, line: str) -> LineInfo | None:
        if match := DEMO_LINE.search(line):
            return LineInfo(
                step=int(match["step"]),
                total=int(match["total"]),
                loss=to_float(match["loss"]),
                lr=to_float(match["lr"]),
                samples_per_s=to_float(match["sps"]),
            )
        if match := EVAL_LOSS.search(line):  # gpuwizard/demo/heldout.py: LeRobot main's form
            return LineInfo(step=int(match["step"]), eval_loss=to_float(match["loss"]))
        if match := DEMO_BANNER.search(line):
            return LineInfo(effective_batch=int(match["eff"]))
        if "[demo] Saving checkpoint" in line:
            return LineInfo(checkpoint=True)
        if "[demo] Training finished" in line:
            return LineInfo(finished=True)
        return parse_tqdm(line, ("Training",))  # gpuwizard/demo/train.py ProgressBar


TRAINER = DemoTrainer()
