"""`gpuwizard runs`, `stop` and `compare`: history, stopping, comparing; what `run` and `attach` share of them."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.core.errors import UserError, problem
from gpuwizard.core.table import column_width
from gpuwizard.runner.control.launches import clear_interrupted_launches
from gpuwizard.runner.control.stopping import (
    STOP_WAIT_S,
    StopNote,
    StopResult,
    marked_runs,
    request_stop,
    stop_run,
    unrecorded,
)
from gpuwizard.runner.detect.overfit import lowest, nearest
from gpuwizard.runner.host.procs import marker_value
from gpuwizard.runs.listing import listed_runs
from gpuwizard.runs.records import RecordError, Status
from gpuwizard.runs.rundir import (
    RunDir,
    RunEntry,
    find_run,
    green_baselines,
    history_entries,
    history_row,
    scaling_report,
)


def chosen_run(run_id: str | None) -> RunDir:
    """The run a command names (or the newest), as a UserError when there is none."""
    run = find_run(run_id) if run_id is None or run_id.strip() else None
    if run is None:
        raise missing_run(run_id)
    return run


def missing_run(run_id: str | None) -> UserError:
    """The paragraph for a run id that names no run (or for no runs at all)."""
    if run_id is not None and not run_id.strip():
        return UserError(
            problem(
                "RUN_ID",
                "is empty",
                "give a run id from `gpuwizard runs`, or leave it out for the newest run",
                value=run_id,
            )
        )
    return UserError(
        problem("RUN_ID", "no run found" if run_id else "there are no runs yet", "see `gpuwizard runs`", value=run_id)
    )


def readable_status(run: RunDir) -> Status:
    """The run's status, or one paragraph saying why its folder cannot be read."""
    try:
        return run.status()
    except RecordError as exc:
        raise cannot_be_shown(run, exc) from None


def cannot_be_shown(run: RunDir, why: RecordError | str) -> UserError:
    return UserError(
        problem(
            "RUN_ID",
            f"run {run.run_id} cannot be shown: {why}",
            f"look inside {run.path}, or remove the folder",
            value=run.run_id,
        )
    )


def stop_recorded(run: RunDir) -> None:
    """request_stop, with a folder it cannot write (read-only, full, removed) one paragraph instead of a traceback."""
    try:
        request_stop(run)
    except RecordError as exc:
        raise UserError(
            problem("RUN_ID", f"it cannot be stopped: {exc}", f"look inside {run.path}", value=run.run_id)
        ) from None
    except OSError as exc:
        raise refused(unrecorded(run, exc)) from None


def refused(result: StopResult) -> UserError:
    """The paragraph for a stop the run's folder refused: its status unreadable, or the stop not recorded."""
    run = RunDir(result.path)
    if result.outcome == "unreadable":
        return cannot_be_shown(run, result.why)
    left = result.survivors
    return UserError(
        problem(
            "RUN_ID",
            f"its stop cannot be recorded in {run.path}: {result.why}; "
            + (f"processes {left} are still running" if left else "nothing of it is running any more"),
            "make the folder writable (and check the disk has space), then run `gpuwizard stop` again",
            value=run.run_id,
        )
    )


def final_summary(run: RunDir, s: Status) -> str:
    from gpuwizard.analysis.compare.runs import scaling_line

    text = {
        RunState.FINISHED: "finished green",
        RunState.FAILED: f"failed (job exit code {s.job_exit_code})" + (f": {s.error}" if s.error else ""),
        RunState.HUNG: "stopped after a suspected hang",
        RunState.STOPPED: "stopped by the user",
    }.get(s.state, str(s.state))
    extra = f"; processes left behind: {s.survivors}" if s.survivors else ""
    if s.gpu_memory_held_mb:
        extra += "; GPU memory still held: " + ", ".join(
            f"GPU {i} {mb:.0f} MB" for i, mb in s.gpu_memory_held_mb.items()
        )
    summary = f"run {run.run_id} {text}; exit code {s.exit_code}{extra}. Folder: {run.path}"
    if best := best_checkpoint(run):
        summary += f"\n{best_text(best)}"
    scaling = scaling_line(s.preset) if s.state == RunState.FINISHED else None
    return summary + (f"\n{scaling}" if scaling else "")


SAVED = re.compile(r"^(?:\d{6}|checkpoint-\d+)$")
"""A saved checkpoint's folder: checkpoints/014000 (the demo; LeRobot's lerobot_train.py) or checkpoint-14000 (HF)."""


def best_checkpoint(run: RunDir) -> tuple[Path, int, float, int] | None:
    """The saved checkpoint nearest the lowest held-out loss: its folder, its step, the lowest loss and its step;
    None where the run logged no held-out loss or saved no checkpoint (its job names no output folder)."""
    held = [(m.step, m.loss) for m in run.metrics() if m.kind == "held_out" and m.step is not None]
    best = lowest(held)
    try:
        output = run.job().output_dir
    except RecordError:
        return None
    if best is None or output is None:
        return None
    folders = [p for root in (Path(output), Path(output) / "checkpoints") if root.is_dir() for p in root.iterdir()]
    saved = {int(p.name.rpartition("-")[2]): p for p in folders if SAVED.match(p.name) and p.is_dir()}
    step = nearest(list(saved), best[0])
    return (saved[step], step, best[1], best[0]) if step is not None else None


def best_text(found: tuple[Path, int, float, int]) -> str:
    path, step, loss, at = found
    away = "at the lowest held-out loss" if step == at else f"{abs(step - at):,} steps from the lowest held-out loss"
    return f"best checkpoint: step {step:,} ({path}), {away} ({loss:.4g} at step {at:,})"


def best_command(run_id: str) -> int:
    """`runs --best RUN`: the path alone, for a script; one paragraph where there is none."""
    run = chosen_run(run_id)
    found = best_checkpoint(run)
    if found is None:
        raise UserError(
            problem(
                "RUN_ID",
                f"run {run.run_id} has no saved checkpoint with a held-out loss",
                "set dataset.eval_split in the preset (and checkpoints saved during the run) to have one",
                value=run.run_id,
            )
        )
    print(found[0])
    return ExitCode.OK


def tidy_interrupted_launches(ended: frozenset[str] = frozenset()) -> bool:
    """Before a command looks at the runs: what launches killed half way left is cleaned up, and said on stderr;
    whether there was any."""
    told = clear_interrupted_launches(ended)
    for line in told:
        sys.stderr.write(line + "\n")
    return bool(told)


def sweep_entries(entries: list[RunEntry], sweep_id: str) -> tuple[list[RunEntry], dict[str, str]]:
    """The runs of one sweep (by its record and by their own status), each with its combination's label."""
    from gpuwizard.runner.sweep.manage import sweep_run_labels
    from gpuwizard.runs.sweeps import chosen_sweep

    folder = chosen_sweep(sweep_id)
    labels = sweep_run_labels(folder)
    mine = [e for e in entries if e.run.run_id in labels or (e.status is not None and e.status.sweep == folder.name)]
    return mine, labels


def step_text(row: dict[str, Any]) -> str:
    """The step column: the header sizes it to the longest shown."""
    return f"{row['step'] if row['step'] is not None else '-'}/{row['steps']}"


def runs_command(args: argparse.Namespace) -> int:
    from gpuwizard.analysis.compare.runs import over_note

    if args.best is not None:
        return best_command(args.best)
    entries = listed_runs()
    ended = frozenset(e.run.run_id for e in entries if e.status is not None and e.status.final)
    if tidy_interrupted_launches(ended):  # a run it recorded as failed is listed as such
        entries = listed_runs()
    green = green_baselines(entries)
    now = time.time()
    shown, hidden = history_entries(entries, args.probes)
    labels: dict[str, str] = {}
    if args.sweep is not None:
        shown, labels = sweep_entries(entries, args.sweep)
        hidden = 0  # a sweep's runs are never probe runs
    rows = [history_row(entry, green, now) | {"sweep_run": labels.get(entry.run.run_id)} for entry in shown]
    if args.json:
        print(json.dumps(rows, indent=2))
        return ExitCode.OK
    if not rows:
        print(
            f"sweep {args.sweep}: no run of it has started yet"
            if args.sweep is not None
            else f"{hidden} probe runs, hidden: --probes lists them"
            if hidden
            else "no runs yet: `gpuwizard run demo-cpu --headless` starts one"
        )
        return ExitCode.OK
    wide = column_width("run id", (r["run_id"] for r in rows), most=36)  # id and step as wide as shown: a row fits 80
    tall = column_width("step", (step_text(r) for r in rows if r["state"] != "corrupt"))
    print(f"{'run id':<{wide}} {'state':<9} {'exit':>4} {'workers':>7} {'step':>{tall}} {'time':>8}  baseline")
    for r in rows:
        if r["state"] == "corrupt":
            running = running_marked(Path(r["path"]))
            hint = f"; processes {running} of it still run: `gpuwizard stop {r['run_id']}` ends them" if running else ""
            print(f"{r['run_id'][:wide]:<{wide}} corrupt   {r['problem']}{hint}")
            continue
        step = step_text(r)
        mark = "green" if r["baseline_green"] else "never"
        exit_code = r["exit_code"] if r["exit_code"] is not None else "-"
        minutes, seconds = divmod(int(r["duration_s"]), 60)
        workers = f"{r['world_size']} {'GPU' if r['device'] == 'cuda' else 'CPU'}"  # a CPU run counts processes
        print(
            f"{r['run_id'][:wide]:<{wide}} {r['state']:<9} {exit_code:>4} {workers:>7} {step:>{tall}} "
            f"{minutes:>5}:{seconds:02d}  {mark}{' (smoke)' if r['smoke'] else ''}"
            + (" (probe)" if r.get("probe") else "")
            + (f"  {r['sweep_run']}" if r["sweep_run"] else " (sweep)" if r.get("sweep") else "")
            + (f"  <- resumes {r['resumed_from']}" if r["resumed_from"] else "")
        )
    for preset in sorted({r["preset"] for r in rows if r["state"] != "corrupt"}):
        report = scaling_report(preset, entries)
        if len(report) > 1:
            print(f"\nscaling of {preset} (latest finished run per process count):")
            for r in report:
                eff = (
                    f"{r['speedup']:.2f}x, efficiency {r['efficiency']:.0%}{over_note(r['efficiency'])}"
                    if r["efficiency"] is not None
                    else "no 1-process run to compare"
                )
                print(f"  {r['world_size']} process(es): {r['samples_per_s']:.0f} samples/s  {eff}")
    if hidden:
        print(f"\n{hidden} probe runs hidden: --probes lists them")
    return ExitCode.OK


def running_marked(path: Path) -> list[int]:
    """Pids of live processes that carry this run's marker."""
    return marked_runs().get(Path(marker_value(path)), [])


def stop_command(args: argparse.Namespace) -> int:
    """`gpuwizard stop [RUN_ID]`: runner/stopping.stop_run, said. Exit 0 once a fresh look finds nothing of it left."""
    tidy_interrupted_launches()
    result = stop_run(args.run_id, on_note=say_note)
    if result is None:
        if args.run_id is not None:
            raise missing_run(args.run_id)
        print("no active run to stop")
        return ExitCode.OK
    return said(result)


def say_note(note: StopNote) -> None:
    """What a stop under way tells at once: the checkpoint it waits for, or that it ends the run by its marker."""
    if note.checkpoint_s is not None:
        print(
            f"run {note.run_id}: the stop waits for the checkpoint being written (at most {note.checkpoint_s:.0f} s "
            f"more); `gpuwizard stop {note.run_id}` again stops at once",
            flush=True,
        )
    if note.by_marker is not None:
        print(f"run {note.run_id}: {note.by_marker}; stopping every process that carries its marker", flush=True)


def said(result: StopResult) -> int:
    """A stop's end in one line, its exit code; one paragraph where the run's folder refused it."""
    name, left = result.run_id, result.survivors
    if result.outcome in ("unreadable", "unrecorded"):
        raise refused(result)
    if result.outcome == "already_ended":
        print(f"run {name} already ended ({result.state})")
        return ExitCode.OK
    if left:
        after = f" after {STOP_WAIT_S:.0f} s" if result.outcome == "ended_here" else ""
        print(f"run {name}: processes {left} are still there{after}", file=sys.stderr)
        return ExitCode.FAILED
    how = " (its supervisor did not answer, so every process was ended here)" if result.outcome == "ended_here" else ""
    print(f"run {name} stopped{how}; nothing of it is left")
    return ExitCode.OK


def compare_command(args: argparse.Namespace) -> int:
    """`gpuwizard compare RUN RUN...`: the table and the verdict, or --json."""
    from gpuwizard.analysis.compare.runs import CompareError, compare, compare_text

    runs = [chosen_run(run_id) for run_id in args.run_ids]
    if len({run.run_id for run in runs}) < 2:
        raise UserError(
            problem(
                "RUN_ID",
                "compare needs at least two different runs",
                "give two or more run ids from `gpuwizard runs` (e.g. the 1-GPU and the 2-GPU run of a preset)",
                value=" ".join(args.run_ids),
            )
        )
    if args.gpu_hour is not None and not 0 < args.gpu_hour < 100_000:
        raise UserError(problem("--gpu-hour", "must be a positive price", "e.g. --gpu-hour 2.5", value=args.gpu_hour))
    try:
        result = compare(runs, gpu_hour=args.gpu_hour)
    except CompareError as exc:
        raise UserError(problem("RUN_ID", str(exc), "pick runs `gpuwizard runs` lists as readable")) from None
    print(json.dumps(result.to_json(), indent=2) if args.json else compare_text(result))
    return ExitCode.OK
