"""`gpuwizard presets`: list, show, delete, trust and the schema."""

from __future__ import annotations

import argparse
import json

from gpuwizard.core.codes import ExitCode
from gpuwizard.core.errors import UserError, problem


def cmd_presets(args: argparse.Namespace) -> int:
    from gpuwizard.model.preset_files import delete_user_preset, preset_listing, preset_text

    if args.action in ("show", "delete", "trust") and not args.name:
        raise UserError(problem("NAME", f"`presets {args.action}` needs a preset name", "see `gpuwizard presets list`"))
    if args.action == "schema":
        from gpuwizard.model.preset import preset_schema

        print(json.dumps(preset_schema(), indent=2))
        return ExitCode.OK
    if args.action == "show":
        path, text = preset_text(args.name)
        print(f"# {path}")
        print(text, end="")
        return ExitCode.OK
    if args.action == "trust":
        return trust_command(args.name)
    if args.action == "delete":
        path = delete_user_preset(args.name)
        print(f"deleted {path}")
        return ExitCode.OK
    rows = [listed.columns() for listed in preset_listing()]
    width = max((len(r[0]) for r in rows), default=4)
    lines = [f"{'name':<{width}}  source   trainer  policy    gpus  description"]
    lines += [f"{r[0]:<{width}}  {r[1]:<7}  {r[2]:<7}  {r[3]:<8}  {r[4]:>4}  {r[5]}" for r in rows]
    print("\n".join(lines))  # one write: 10,000 rows
    return ExitCode.OK


def trust_command(name_or_file: str) -> int:
    """Say yes to what a preset runs, after showing it: later plans, checks and runs of it may run its code."""
    from gpuwizard.model import trust
    from gpuwizard.model.preset_files import find_preset, load_preset_file

    path = find_preset(name_or_file)
    preset = load_preset_file(path)
    items = trust.question_lines(preset)
    if not items:
        print(f"{path}: runs nothing of its own (no interpreter, working folder, environment or script named)")
        return ExitCode.OK
    trust.trust(preset, str(path))
    print(f"trusted {path}; from now on gpuwizard may run what it names:")
    for line in items:
        print(f"  {line}")
    print("a change to any of these makes it untrusted again")
    return ExitCode.OK
