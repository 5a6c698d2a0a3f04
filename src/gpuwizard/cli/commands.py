"""The commands that plan a preset (`plan`, `preview`, `check`) and `gpus`: each reads and prints, starts no job."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, TextIO

from gpuwizard.core.codes import ExitCode
from gpuwizard.core.errors import UserError, problem

if TYPE_CHECKING:
    from gpuwizard.model.job import BuildContext, Plan
    from gpuwizard.model.preset import Preset


def load_given(preset_arg: str, action: str | None = None, trust_given: bool = False) -> Preset:
    """The preset named on the command line; for `action` (check, run, probe) one whose code the user has not
    trusted is refused, unless --trust says yes to it now (plan and preview take --trust too: then the interpreter
    it names may be asked which trainer it has)."""
    from gpuwizard.model import trust
    from gpuwizard.model.preset_files import find_preset, load_preset_file

    path = find_preset(preset_arg)
    preset = load_preset_file(path)
    if trust_given:
        trust.trust(preset, str(path))
    elif action and not trust.is_trusted(preset):
        raise UserError(trust.untrusted_problem(preset, preset_arg, action))
    return preset


def resolve(
    preset: Preset, gpus: int | None, resume: bool = False, slurm: bool = False
) -> tuple[Preset, Plan, BuildContext]:
    """Plan a preset against the GPUs detected here."""
    from gpuwizard.gpus.inventory import read_inventory
    from gpuwizard.model.preset import with_field
    from gpuwizard.planning.plan import plan_here, with_gpus

    preset = with_gpus(preset, gpus)
    if slurm:
        preset = with_field(preset, "launch.scheduler", "slurm")
    plan, ctx = plan_here(preset, read_inventory(), resume=resume)
    return preset, plan, ctx


def report_problems(plan: Plan, source: str) -> int:
    """Errors on stderr, one paragraph each; exit 2 when there are any."""
    for p in plan.errors:
        sys.stderr.write(p.paragraph(source) + "\n")
    return ExitCode.INVALID if plan.errors else ExitCode.OK


def cmd_plan(args: argparse.Namespace) -> int:
    from gpuwizard.planning.report import plan_text

    preset, plan, _ = resolve(load_given(args.preset, trust_given=args.trust), args.gpus)
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    else:
        print(plan_text(plan, preset.name))
    return report_problems(plan, preset.name)


def cmd_preview(args: argparse.Namespace) -> int:
    from gpuwizard.core.errors import warning
    from gpuwizard.planning.plan import build_command
    from gpuwizard.trainers.registry import get_trainer

    given = load_given(args.preset, trust_given=args.trust)
    preset, plan, ctx = resolve(given, args.gpus, resume=args.resume, slurm=args.format == "sbatch")
    if plan.errors:
        return report_problems(plan, preset.name)
    if args.resume and get_trainer(preset.trainer).last_checkpoint(ctx) is None:
        plan.problems.append(
            warning(
                "--resume",
                f"there is no {preset.trainer} checkpoint in {ctx.output_path} yet; run will refuse to resume",
                "run it without --resume first",
            )
        )
    spec = build_command(ctx)
    if args.format == "json":
        print(json.dumps(spec.to_json() | {"warnings": [p.paragraph() for p in plan.warnings]}, indent=2))
    elif args.format == "script":
        print(spec.script(), end="")
    elif args.format == "sbatch":
        from gpuwizard.runner.host.slurm import batch_script

        for p in plan.warnings:
            sys.stderr.write("warning: " + p.paragraph() + "\n")
        print(batch_script(ctx, spec), end="")
    else:
        for p in plan.warnings:
            sys.stderr.write("warning: " + p.paragraph() + "\n")
        print(spec.shell())
    return ExitCode.OK


def cmd_check(args: argparse.Namespace) -> int:
    from gpuwizard.planning.plan import build_command
    from gpuwizard.trainers.registry import check_command

    given = load_given(args.preset, "check", args.trust)
    preset, plan, ctx = resolve(given, args.gpus, resume=args.resume)
    if plan.errors:
        return report_problems(plan, preset.name)
    with saying_asked(sys.stderr):
        result = check_command(ctx, build_command(ctx), use_cache=not args.fresh)
    if args.json:
        print(json.dumps(result.model_dump(), indent=2))
    else:
        if not result.blocks:  # a refusal is said once, in its paragraph on stderr
            print(f"{preset.name}: {result.summary}")
        for text in result.notes:
            print(f"  note: {text}")
    if result.blocks:
        for p in result.problems():
            sys.stderr.write(p.paragraph(preset.name) + "\n")
        return ExitCode.INVALID
    return ExitCode.OK


ASKING = "asking the installed trainer's own parser..."
QUIET_S = 0.5
"""A remembered answer comes within this; only a real ask is said."""


@contextlib.contextmanager
def saying_asked(stream: TextIO) -> Iterator[None]:
    """On a terminal, what `check` waits for, as the wizard says it: the trainer's parser takes 20 s and more
    (LeRobot's imports), and a silent prompt looks hung; nothing for a remembered answer, nothing in a log or a pipe."""
    done = threading.Event()
    started = time.monotonic()
    erase = getattr(stream, "write_control", stream.write)  # the command line's SafeStream shows CR as a glyph
    said: list[bool] = []

    def tick() -> None:
        if not stream.isatty() or done.wait(QUIET_S):
            return
        said.append(True)
        while True:
            erase("\r\x1b[K")
            stream.write(f"{ASKING} {time.monotonic() - started:.0f} s")
            stream.flush()
            if done.wait(1.0):
                return

    ticker = threading.Thread(target=tick, name="check-ticker", daemon=True)
    ticker.start()
    answered = False
    try:
        yield
        answered = True
    finally:
        done.set()
        ticker.join()
        if said:  # the counting line goes; an answer says how long it took
            erase("\r\x1b[K")
            if answered:
                stream.write(f"the installed trainer's own parser answered in {time.monotonic() - started:.0f} s\n")
            stream.flush()


def cmd_gpus(args: argparse.Namespace) -> int:
    from gpuwizard.gpus.inventory import read_inventory

    if args.bandwidth or args.device or args.processes or args.sizes:
        from gpuwizard.cli.bandwidth import bandwidth_command

        return bandwidth_command(args)
    if args.record:
        return record_gpus(args.record)
    inventory = read_inventory()
    if args.json:
        print(json.dumps(inventory.to_json(), indent=2))
        if inventory.message:
            sys.stderr.write(inventory.message + "\n")
    else:
        from gpuwizard.planning.report import inventory_text

        print(inventory_text(inventory))
    return ExitCode.OK


def record_gpus(path: str) -> int:
    from pathlib import Path

    from gpuwizard.core.yamlio import atomic_write
    from gpuwizard.gpus.nvml import NvmlUnavailable, open_nvml
    from gpuwizard.gpus.replay import record_machine, replay_module_from_env

    try:
        nv = open_nvml(replay_module_from_env())  # a replay records too: the round trip is how the recorder is tested
    except NvmlUnavailable as exc:
        raise UserError(
            problem("--record", f"cannot record: {exc}", "run it on a machine with an NVIDIA driver", value=path)
        ) from None
    try:
        recording = record_machine(nv)
    finally:
        nv.nvmlShutdown()
    atomic_write(Path(path), json.dumps(recording, indent=2))
    print(f"recorded {len(recording['devices'])} GPU(s) to {path}; replay with GPUWIZARD_NVML_REPLAY={path}")
    return ExitCode.OK
