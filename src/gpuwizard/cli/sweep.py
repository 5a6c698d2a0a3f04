"""`gpuwizard sweep`: several runs of one preset over a grid, started on this machine's free devices by a detached
scheduler; `sweep status|stop|resume ID` and `sweep schema`."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from gpuwizard.core.codes import ExitCode
from gpuwizard.core.errors import UserError, problem

ACTIONS = ("status", "stop", "resume")


def sweep_command(args: argparse.Namespace) -> int:
    words = list(args.words)
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
        folder = chosen_sweep(words[1] if len(words) == 2 else None)
        return {"status": status_command, "stop": stop_command, "resume": resume_command}[words[0]](folder, args)
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


def chosen_sweep(sweep_id: str | None) -> Path:
    """The folder of the sweep an id names (or the newest), one paragraph when there is none."""
    from gpuwizard.runs.sweeps import find_sweep, listed_sweeps, sweeps_dir

    if sweep_id is None:
        newest = listed_sweeps()
        if not newest:
            raise UserError(
                problem(
                    "SWEEP_ID", "there are no sweeps yet", "start one with `gpuwizard sweep PRESET --set FIELD=V1,V2`"
                )
            )
        return sweeps_dir() / newest[0]
    folder = find_sweep(sweep_id)
    if folder is None:
        raise UserError(
            problem(
                "SWEEP_ID",
                "no sweep (or more than one) has this id",
                f"see the sweeps in {sweeps_dir()}",
                value=sweep_id,
            )
        )
    return folder


def start_command(preset_arg: str | None, args: argparse.Namespace) -> int:
    from gpuwizard.cli.commands import load_given
    from gpuwizard.core.yamlio import load_file
    from gpuwizard.model.sweep import SweepFile, parse_sets, parse_sweep_file
    from gpuwizard.runner.sweep import create_sweep

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
    sweep = create_sweep(base, preset_arg, grid, seeds, args.metric or spec.metric, os.getcwd())
    print(f"sweep {sweep.sweep_id}: {len(sweep.runs)} runs of {sweep.preset}, started on this machine's free devices")
    print(
        f"`gpuwizard sweep status {sweep.sweep_id}` shows them, `gpuwizard sweep stop {sweep.sweep_id}` stops them all"
    )
    return ExitCode.OK


def cell(value: Any, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def status_command(folder: Path, args: argparse.Namespace) -> int:
    from gpuwizard.analysis.compare import compare_text
    from gpuwizard.runner.sweep import run_rows, sweep_comparison
    from gpuwizard.runner.sweep_scheduler import refresh, scheduler_alive
    from gpuwizard.runs.sweeps import read_sweep

    sweep = read_sweep(folder)
    refresh(sweep)  # as the runs' own folders say now, with or without a scheduler to record it
    rows, compared = run_rows(sweep), sweep_comparison(sweep)
    if args.json:
        best_id = compared[1].run_id if compared else None
        print(json.dumps({"sweep": sweep.model_dump(mode="json"), "rows": rows, "best": best_id}, indent=2))
        return ExitCode.OK
    live = "running" if scheduler_alive(sweep) else "ended" if sweep.ended else "not running (`sweep resume` goes on)"
    print(f"sweep {sweep.sweep_id} of {sweep.preset}: {len(rows)} runs; scheduler {live}")
    print(f"{'#':>3} {'values':<34} {'device':<9} {'state':<9} {'step':>6} {'loss':>9}  run id")
    for r in rows:
        values = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in r["values"].items())
        print(
            f"{r['index'] + 1:>3} {values[:34]:<34} {r['device']:<9} {r['state']:<9} {cell(r['step']):>6} "
            f"{cell(r['loss'], '.4f'):>9}  {r['run_id'] or '-'}"
        )
        if r["error"]:
            print(f"      {r['error']}")
    if compared is not None:
        result, best = compared
        print()
        print(compare_text(result))
        print()
        shown = {"final_loss": "final loss", "loss_at_equal_samples": "loss at equal samples", "duration_s": "time"}
        chosen = next(r for r in rows if r["run_id"] == best.run_id)
        value = getattr(best, sweep.metric)
        label = ", ".join(f"{k}={v}" for k, v in chosen["values"].items())
        print(f"best by {shown.get(sweep.metric, sweep.metric)}: run {best.run_id} ({label}): {value:.4g}")
    return ExitCode.OK


def stop_command(folder: Path, args: argparse.Namespace) -> int:
    """The scheduler first (nothing more starts), then each run through `gpuwizard stop`'s own machinery."""
    from gpuwizard.cli.runs import stop_command as stop_run
    from gpuwizard.runner.sweep import settle, stop_sweep

    code = 0
    for run_id in stop_sweep(folder):
        code = max(code, stop_run(argparse.Namespace(run_id=run_id)))
    settle(folder)
    print(f"sweep {folder.name} stopped" + ("" if code else "; nothing of it is left"))
    return code


def resume_command(folder: Path, args: argparse.Namespace) -> int:
    from gpuwizard.runner.sweep import resume_sweep

    again = resume_sweep(folder)
    if not again:
        print(f"sweep {folder.name}: every run has finished; nothing to resume")
        return ExitCode.OK
    continued = sum(1 for r in again if r.resume_from)
    print(
        f"sweep {folder.name}: {len(again)} runs queued again ({continued} continue from their checkpoints); "
        f"`gpuwizard sweep status {folder.name}` follows them"
    )
    return ExitCode.OK
