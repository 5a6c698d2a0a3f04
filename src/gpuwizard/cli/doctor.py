"""`gpuwizard doctor [PRESET] [--json]`: the preflight of a job's environment, or of this machine alone."""

from __future__ import annotations

import argparse
import json
import shutil
import sys

from gpuwizard.core.codes import ExitCode


def progress(text: str) -> None:
    """What the preflight is doing, on stderr: stdout keeps the answer (and --json its one document)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def cmd_doctor(args: argparse.Namespace) -> int:
    from gpuwizard.cli.commands import load_given, report_problems
    from gpuwizard.gpus.inventory import read_inventory
    from gpuwizard.planning.plan import build_command, plan_here, with_gpus
    from gpuwizard.trainers.check.doctor import doctor
    from gpuwizard.trainers.registry import get_trainer

    inventory = read_inventory()
    if args.preset:
        preset = with_gpus(load_given(args.preset, "doctor", args.trust), args.gpus)
        plan, ctx = plan_here(preset, inventory)
        if plan.errors:
            return report_problems(plan, preset.name)
        name = preset.name
        spec = build_command(ctx)
        query = get_trainer(preset.trainer).trainer_query(ctx, spec)
        result = doctor(ctx, spec, query, inventory, ctx.python, not args.fresh, progress)
    else:
        name, python = "this machine", shutil.which("python3") or sys.executable
        result = doctor(None, None, None, inventory, python, not args.fresh, progress)
    if args.json:
        print(json.dumps(result.model_dump(), indent=2))
    else:
        print(f"{name}: {result.summary}")
        for finding in result.findings:
            print(("error: " if finding.level == "block" else "warning: ") + finding.text)
        for text in result.notes:
            print(f"  note: {text}")
    return ExitCode.INVALID if result.blocks else ExitCode.OK
