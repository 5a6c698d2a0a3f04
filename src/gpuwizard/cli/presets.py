"""`gpuwizard presets`: list, show, copy, delete, trust and the schema."""

from __future__ import annotations

import argparse
import json
import sys

from gpuwizard.core.codes import ExitCode
from gpuwizard.core.errors import UserError, problem
from gpuwizard.core.table import column_width


def cmd_presets(args: argparse.Namespace) -> int:
    from gpuwizard.model.preset_files import delete_user_preset, preset_listing, preset_text

    if args.action in ("show", "copy", "delete", "trust") and not args.name:
        raise UserError(problem("NAME", f"`presets {args.action}` needs a preset name", "see `gpuwizard presets list`"))
    if args.action == "schema":
        from gpuwizard.model.preset import preset_schema

        print(json.dumps(preset_schema(), indent=2))
        return ExitCode.OK
    if args.action == "show":
        path, text = preset_text(args.name)
        print(f"# {path}", file=sys.stderr)  # not into the file that `presets show NAME > FILE` writes
        print(text, end="")
        return ExitCode.OK
    if args.action == "copy":
        return copy_command(args.name, args.new)
    if args.action == "trust":
        return trust_command(args.name)
    if args.action == "delete":
        path = delete_user_preset(args.name)
        print(f"deleted {path}")
        return ExitCode.OK
    rows = [listed.columns() for listed in preset_listing()]
    width = column_width("name", (r[0] for r in rows))
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


def copy_command(name_or_file: str, new: str | None) -> int:
    """A preset saved as the user's own preset NEW, to edit and run by name; only one the user may already run."""
    from gpuwizard.model import trust
    from gpuwizard.model.preset import saved_as
    from gpuwizard.model.preset_files import find_preset, load_preset_file, save_user_preset

    if not new:
        raise UserError(problem("NEW", "`presets copy NAME NEW` needs the name of the copy", "e.g. my-act"))
    path = find_preset(name_or_file)
    preset = load_preset_file(path)
    if not trust.is_trusted(preset):  # a copy in the user's folder would run its code without a question
        listed = "; ".join(trust.question_lines(preset))
        raise UserError(
            problem(
                "NAME",
                f"this preset was not written by you and would run code it chooses: {listed}; a copy in your preset "
                "folder would run it without a question",
                f"read it (`gpuwizard presets show {path}`), trust it (`gpuwizard presets trust {path}`), then copy it",
                value=name_or_file,
            )
        )
    target = save_user_preset(saved_as(preset, new, preset.description), overwrite=False)
    print(f"copied {path} to {target}; edit it there, then `gpuwizard check {new}`")
    return ExitCode.OK
