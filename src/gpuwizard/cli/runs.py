"""`gpuwizard runs`, `stop` and `compare`: history, stopping, comparing; what `run` and `attach` share of them."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.core.errors import UserError, problem
from gpuwizard.runner.follow import marked_runs, request_stop, run_leftovers, stop_all
from gpuwizard.runner.launches import clear_interrupted_launches
from gpuwizard.runner.procs import marker_value
from gpuwizard.runs.listing import listed_runs
from gpuwizard.runs.records import RecordError, Status
from gpuwizard.runs.rundir import (
    RunDir,
    RunEntry,
    alive_processes,
    find_run,
    green_baselines,
    history_entries,
    history_row,
    list_runs,
    run_processes,
    scaling_report,
    scaling_text,
)


def chosen_run(run_id: str | None) -> RunDir:
    """The run a command names (or the newest), as a UserError when there is none."""
    if run_id is not None and not run_id.strip():
        raise UserError(
            problem(
                "RUN_ID",
                "is empty",
                "give a run id from `gpuwizard runs`, or leave it out for the newest run",
                value=run_id,
            )
        )
    run = find_run(run_id)
    if run is None:
        raise UserError(
            problem(
                "RUN_ID", "no run found" if run_id else "there are no runs yet", "see `gpuwizard runs`", value=run_id
            )
        )
    return run


def readable_status(run: RunDir) -> Status:
    """The run's status, or one paragraph saying why its folder cannot be read."""
    try:
        return run.status()
    except RecordError as exc:
        raise cannot_be_shown(run, exc) from None


def cannot_be_shown(run: RunDir, exc: RecordError) -> UserError:
    return UserError(
        problem(
            "RUN_ID",
            f"run {run.run_id} cannot be shown: {exc}",
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
        left = alive_processes(run, readable_status(run))
        raise UserError(
            problem(
                "RUN_ID",
                f"its stop cannot be recorded in {run.path}: {exc.strerror or exc}; "
                + (f"processes {left} are still running" if left else "nothing of it is running any more"),
                "make the folder writable (and check the disk has space), then run `gpuwizard stop` again",
                value=run.run_id,
            )
        ) from None


def final_summary(run: RunDir, s: Status) -> str:
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
    scaling = scaling_text(s.preset) if s.state == RunState.FINISHED else None
    return summary + (f"\nscaling of {s.preset}: {scaling}" if scaling else "")


def tidy_interrupted_launches(ended: frozenset[str] = frozenset()) -> bool:
    """Before a command looks at the runs: what launches killed half way left is cleaned up, and said on stderr;
    whether there was any."""
    told = clear_interrupted_launches(ended)
    for line in told:
        sys.stderr.write(line + "\n")
    return bool(told)


def sweep_entries(entries: list[RunEntry], sweep_id: str) -> tuple[list[RunEntry], dict[str, str]]:
    """The runs of one sweep (by its record and by their own status), each with its combination's label."""
    from gpuwizard.runner.sweep import sweep_run_labels
    from gpuwizard.runs.sweeps import chosen_sweep

    folder = chosen_sweep(sweep_id)
    labels = sweep_run_labels(folder)
    mine = [e for e in entries if e.run.run_id in labels or (e.status is not None and e.status.sweep == folder.name)]
    return mine, labels


def runs_command(args: argparse.Namespace) -> int:
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
    print(f"{'run id':<36} {'state':<9} {'exit':>4} {'workers':>7} {'step':>12} {'time':>8}  baseline")
    for r in rows:
        if r["state"] == "corrupt":
            running = running_marked(Path(r["path"]))
            hint = f"; processes {running} of it still run: `gpuwizard stop {r['run_id']}` ends them" if running else ""
            print(f"{r['run_id'][:36]:<36} corrupt   {r['problem']}{hint}")
            continue
        step = f"{r['step'] if r['step'] is not None else '-'}/{r['steps']}"
        mark = "green" if r["baseline_green"] else "never"
        exit_code = r["exit_code"] if r["exit_code"] is not None else "-"
        minutes, seconds = divmod(int(r["duration_s"]), 60)
        workers = f"{r['world_size']} {'GPU' if r['device'] == 'cuda' else 'CPU'}"  # a CPU run counts processes
        print(
            f"{r['run_id'][:36]:<36} {r['state']:<9} {exit_code:>4} {workers:>7} {step:>12} "
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
                    f"{r['speedup']:.2f}x, efficiency {r['efficiency']:.0%}"
                    if r["efficiency"] is not None
                    else "no 1-process run to compare"
                )
                print(f"  {r['world_size']} process(es): {r['samples_per_s']:.0f} samples/s  {eff}")
    if hidden:
        print(f"\n{hidden} probe runs hidden: --probes lists them")
    return ExitCode.OK


STOP_WAIT_S = 30.0


def running_marked(path: Path) -> list[int]:
    """Pids of live processes that carry this run's marker."""
    return marked_runs().get(Path(marker_value(path)), [])


def stop_command(args: argparse.Namespace) -> int:
    """Stop a run with or without its supervisor, with its status or its whole folder gone: the processes that carry
    its marker (and its cgroup) are the truth, not status.json. Exit 0 once a fresh look finds nothing of it left."""
    tidy_interrupted_launches()
    marked = marked_runs()
    path = newest_stoppable(marked) if args.run_id is None else named_run(args.run_id, marked)
    if path is None:
        print("no active run to stop")
        return ExitCode.OK
    if not path.exists():
        return stop_marked(path, "its folder was deleted")
    run = RunDir(path)
    try:
        status = run.status()
    except RecordError as exc:
        if path in marked:
            return stop_marked(path, f"its status cannot be read ({exc})")
        raise cannot_be_shown(run, exc) from None
    if status.final and not run_leftovers(run):
        print(f"run {run.run_id} already ended ({status.state})")
        return ExitCode.OK
    stop_recorded(run)
    deadline, told = time.monotonic() + STOP_WAIT_S, False
    while time.monotonic() < deadline:
        if not run.path.exists():
            return stop_marked(run.path, "its folder was deleted")
        try:
            status = run.status()
        except RecordError as exc:
            return stop_marked(run.path, f"its status can no longer be read ({exc})")
        if status.final and not run_leftovers(run):
            print(f"run {run.run_id} stopped; nothing of it is left")
            return ExitCode.OK
        wait = None if told else next((e for e in run.events()[0] if e.kind == "stop_waits_for_checkpoint"), None)
        if wait is not None:  # the supervisor lets a checkpoint write finish first
            told = True
            left = float(wait.data.get("started_t", wait.t)) + float(wait.data.get("limit_s", 0.0)) - time.time()
            print(
                f"run {run.run_id}: the stop waits for the checkpoint being written (at most {max(left, 0):.0f} s "
                f"more); `gpuwizard stop {run.run_id}` again stops at once",
                flush=True,
            )
            deadline = max(deadline, time.monotonic() + left + 30)
        time.sleep(0.2)
    # the supervisor did not manage it (stuck, or stopped with SIGSTOP): end it all from here
    survivors = stop_all(run.path, run_processes(run, status))
    if not survivors:
        print(
            f"run {run.run_id} stopped (its supervisor did not answer, so every process was ended here); nothing of "
            "it is left"
        )
        return ExitCode.OK
    print(f"run {run.run_id}: processes {survivors} are still there after {STOP_WAIT_S:.0f} s", file=sys.stderr)
    return ExitCode.FAILED


def newest_stoppable(marked: dict[Path, list[int]]) -> Path | None:
    """The newest run that says it is active or has a live process carrying its marker (folder ids start with the
    time they were made)."""
    active = {Path(marker_value(e.run.path)) for e in list_runs() if e.status is not None and e.status.claims_active}
    return max(active | marked.keys(), key=lambda path: path.name, default=None)


def named_run(run_id: str, marked: dict[Path, list[int]]) -> Path:
    """The run `stop RUN_ID` means: a folder, or one deleted whose processes still carry its marker."""
    found = find_run(run_id) if run_id.strip() else None
    if found is not None:
        return Path(marker_value(found.path))
    deleted = sorted(p for p in marked if not p.exists() and p.name.startswith(run_id.strip() or "\0"))
    return deleted[-1] if deleted else chosen_run(run_id).path


def stop_marked(path: Path, why: str) -> int:
    """A run its folder cannot speak for (deleted, or its status unreadable): every process that carries its marker,
    and its cgroup, ended from here."""
    print(f"run {path.name}: {why}; stopping every process that carries its marker", flush=True)
    left = stop_all(path)
    if left:
        print(f"run {path.name}: processes {left} are still there", file=sys.stderr)
        return ExitCode.FAILED
    print(f"run {path.name} stopped; nothing of it is left")
    return ExitCode.OK


def compare_command(args: argparse.Namespace) -> int:
    """`gpuwizard compare RUN RUN...`: the table and the verdict, or --json."""
    from gpuwizard.analysis.compare import CompareError, compare, compare_text

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
