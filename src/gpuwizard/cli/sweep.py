"""`gpuwizard sweep`: several runs of one preset over a grid, started on this machine's free devices by a detached
scheduler; `sweep status|stop|resume|watch ID` and `sweep schema`."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import textwrap
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwizard.core.codes import ExitCode
from gpuwizard.core.errors import Problem, UserError, problem
from gpuwizard.core.table import column_width

if TYPE_CHECKING:
    from gpuwizard.model.preset import Preset

ACTIONS = ("status", "stop", "resume", "watch")


def sweep_command(args: argparse.Namespace) -> int:
    words = list(args.words)
    if args.save_best and words[:1] != ["status"]:
        raise UserError(
            problem(
                "--save-best",
                "saves the best run of an ended sweep",
                "give it to `gpuwizard sweep status [ID] --save-best NAME`",
                value=args.save_best,
            )
        )
    if args.slurm and words[:1] and words[0] in (*ACTIONS, "schema"):
        raise UserError(
            problem("--slurm", "is for starting a sweep", "give it with the preset: `gpuwizard sweep PRESET --slurm`")
        )
    if words[:1] == ["schema"] and len(words) == 1:
        from gpuwizard.model.sweep import sweep_schema

        print(json.dumps(sweep_schema(), indent=2))
        return ExitCode.OK
    if words and words[0] in ACTIONS:
        if len(words) > 2:
            raise UserError(
                problem(
                    "SWEEP_ID",
                    f"`sweep {words[0]}` takes one sweep id",
                    "see `gpuwizard sweep --help`",
                    value=" ".join(words[1:]),
                )
            )
        from gpuwizard.runs.sweeps import chosen_sweep

        folder = chosen_sweep(words[1] if len(words) == 2 else None)
        actions = {"status": status_command, "stop": stop_command, "resume": resume_command, "watch": watch_command}
        return actions[words[0]](folder, args)
    if len(words) > 1:
        raise UserError(
            problem(
                "PRESET",
                "a sweep takes one preset",
                "give one preset and its grid with --set FIELD=V1,V2",
                value=" ".join(words),
            )
        )
    return start_command(words[0] if words else None, args)


def start_command(preset_arg: str | None, args: argparse.Namespace) -> int:
    from gpuwizard.cli.commands import load_given
    from gpuwizard.core.yamlio import load_file
    from gpuwizard.model.sweep import SweepFile, parse_sets, parse_sweep_file
    from gpuwizard.runner.sweep.manage import create_sweep

    spec = parse_sweep_file(load_file(Path(args.file)), args.file) if args.file else SweepFile()
    preset_arg = preset_arg or spec.preset
    if preset_arg is None:
        raise UserError(
            problem(
                "PRESET",
                "no preset to sweep",
                "name one: `gpuwizard sweep PRESET --set FIELD=V1,V2` (or preset: in the sweep file)",
            )
        )
    grid = {**spec.grid, **parse_sets(args.sets)}
    seeds = args.seeds if args.seeds is not None else spec.seeds
    base = load_given(preset_arg, "sweep", args.trust)
    if args.slurm:
        from gpuwizard.model.preset import with_field

        base = with_field(base, "launch.scheduler", "slurm")
    if inside_values := [p for p in (inside_a_value(base, field) for field in grid) if p is not None]:
        raise UserError(inside_values, base.name)
    try:
        sweep = create_sweep(base, preset_arg, grid, seeds, args.metric or spec.metric, os.getcwd())
    except OSError as exc:  # a full or read-only data folder
        raise UserError(
            problem(
                None, f"cannot record the sweep: {exc.strerror or exc}", "free disk space or set GPUWIZARD_DATA_DIR"
            )
        ) from None
    where = (
        "submitted to SLURM as job arrays (one per resource shape), each run on its own task"
        if sweep.slurm
        else "started on this machine's free devices"
    )
    print(f"sweep {sweep.sweep_id}: {len(sweep.runs)} runs of {sweep.preset}, {where}")
    print(
        f"`gpuwizard sweep status {sweep.sweep_id}` shows them, `gpuwizard sweep stop {sweep.sweep_id}` stops them all"
    )
    print(f"`gpuwizard sweep watch {sweep.sweep_id}` follows them live")
    return ExitCode.OK


def inside_a_value(base: Preset, field: str) -> Problem | None:
    """A grid field below one of the preset's values (optim.lr.x) or below a section it leaves unset: there is no
    section to set it in."""
    from gpuwizard.core.schema import to_data

    node: Any = to_data(base)
    *parents, _ = field.split(".")
    for depth, key in enumerate(parents, 1):
        if not isinstance(node, dict) or key not in node:
            return None  # a field the preset does not have: the grid's own check names it
        node = node[key]
        if not isinstance(node, dict):
            above = ".".join(parents[:depth])
            held = "is not set in the preset" if node is None else f"holds the value {node!r}, not a section"
            return problem(
                f"grid.{field}",
                f"{above} {held}, so there is nothing to set {field} in",
                f"sweep {above} itself" if node is not None else f"set {above} in the preset first",
                value=field,
            )
    return None


def watch_command(folder: Path, args: argparse.Namespace) -> int:
    """The app on the sweep's screen, where there is a terminal to draw it on."""
    from gpuwizard.tui import entry

    if not entry.has_terminal():
        raise entry.no_terminal("the Sweep screen", f"`gpuwizard sweep status {folder.name}` to see it without one")
    return entry.run_app(sweep=folder)


def cell(value: Any, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def say(text: str) -> None:
    """Print, each line longer than the terminal (80 columns where output is not one) wrapped at its words: a
    terminal wraps mid-word."""
    width = shutil.get_terminal_size((80, 24)).columns
    for line in text.splitlines() or [""]:
        indent = " " * (len(line) - len(line.lstrip(" ")))
        print(textwrap.fill(line, width, subsequent_indent=indent) if len(line) > width else line)


def status_command(folder: Path, args: argparse.Namespace) -> int:
    from gpuwizard.analysis.compare.runs import compare_text
    from gpuwizard.runner.sweep.manage import save_best, sweep_comparison
    from gpuwizard.runner.sweep.scheduler import scheduler_alive
    from gpuwizard.runner.sweep.view import ACTIVE, best_text, eta_text, looked, marked_label, sweep_eta, trained_note
    from gpuwizard.runs.sweeps import read_sweep

    sweep = read_sweep(folder)
    rows = looked(sweep)  # as the runs' own folders say now, with or without a scheduler to record it
    compared = sweep_comparison(sweep)
    if args.json and args.save_best:
        raise UserError(
            problem("--save-best", "is not taken with --json", "save it in a call of its own", value=args.save_best)
        )
    if args.json:
        best_id = compared[1].run_id if compared else None
        print(json.dumps({"sweep": sweep.model_dump(mode="json"), "rows": rows, "best": best_id}, indent=2))
        return ExitCode.OK
    alive = scheduler_alive(sweep)
    live = "running" if alive else "ended" if sweep.ended else "not running (`sweep resume` goes on)"
    print(f"sweep {sweep.sweep_id} of {sweep.preset}: {len(rows)} runs; scheduler {live}")
    for array in sweep.arrays:
        print(f"SLURM array {array.job_id}: {len(array.runs)} tasks, runs {', '.join(str(i + 1) for i in array.runs)}")
    labels = [marked_label(r) for r in rows]  # as each run trained: lr=0.002* where the plan scaled the preset's
    wide = column_width("values", labels, most=34)  # as wide as the longest, within 80 columns
    device = column_width("device", (r["device"] for r in rows))
    print(f"{'#':>3} {'values':<{wide}} {'device':<{device}} {'state':<9} {'step':>6} {'last loss':>9}  run id")
    for r, label in zip(rows, labels, strict=True):
        print(
            f"{r['index'] + 1:>3} {label[:wide]:<{wide}} {r['device']:<{device}} {r['state']:<9} "
            f"{cell(r['step']):>6} {cell(r['loss'], '.4f'):>9}  {r['run_id'] or '-'}"
        )
        if r["error"] or r["unreadable"]:
            say(f"      {r['error'] or r['unreadable']}")
        if own := sweep.runs[r["index"]].own_job:
            say(f"      {own}")
    if note := trained_note(rows):
        say(note)
    if not sweep.ended and alive:
        slots = max(1, sum(r["state"] in ACTIVE for r in rows))
        print(eta_text(sweep_eta(rows, slots), slots))
    if compared is not None:
        result, best = compared
        print()
        say(compare_text(result))
        print()
        say(best_text(sweep, best, result.runs))
        print(f"best run: {best.run_id}")
    if args.save_best:
        say(save_best(folder, args.save_best))
    elif compared is not None:
        say(f"`gpuwizard sweep status {sweep.sweep_id} --save-best NAME` saves its preset as yours")
    return ExitCode.OK


def stop_command(folder: Path, args: argparse.Namespace) -> int:
    """The scheduler first (nothing more starts), then each run as `gpuwizard stop` ends it; a sweep that has ended
    is left as it is (recorded stopped, it would read as one a user cut short)."""
    from gpuwizard.runner.sweep.manage import stop_whole
    from gpuwizard.runner.sweep.view import ACTIVE, looked, stop_text
    from gpuwizard.runs.sweeps import read_sweep

    sweep = read_sweep(folder)
    rows = looked(sweep)
    if sweep.ended and not any(r["state"] in ACTIVE for r in rows):
        states = Counter(r["state"] for r in rows)
        said = ", ".join(f"{n} {state}" for state, n in states.items())
        print(f"sweep {folder.name} had already ended ({said}); nothing to stop")
        return ExitCode.OK
    left = stop_whole(folder)
    print(stop_text(folder.name, left))
    return ExitCode.FAILED if left else ExitCode.OK


def resume_command(folder: Path, args: argparse.Namespace) -> int:
    from gpuwizard.runner.sweep.manage import resume_sweep
    from gpuwizard.runner.sweep.view import resume_text

    again = resume_sweep(folder)
    follow = f"; `gpuwizard sweep status {folder.name}` follows them" if again else ""
    print(resume_text(folder.name, again) + follow)
    return ExitCode.OK
