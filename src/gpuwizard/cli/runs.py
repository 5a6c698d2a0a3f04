"""`gpuwizard run`, `attach`, `runs` and `stop`: launch, follow headless, history, stopping."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TextIO

from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.core.errors import UserError, problem
from gpuwizard.runner.follow import (
    RunFollower,
    event_text,
    orphaned_runs,
    request_stop,
    run_leftovers,
    status_line,
    stop_all,
)
from gpuwizard.runs.records import RecordError, Status
from gpuwizard.runs.rundir import (
    RunDir,
    alive_processes,
    find_run,
    green_baselines,
    history_row,
    list_runs,
    run_processes,
    scaling_report,
    scaling_text,
    supervisor_lost,
)

STATUS_EVERY_S = 2.0


def run_command(args: argparse.Namespace) -> int:
    from gpuwizard.model.preset_files import load_preset
    from gpuwizard.runner.launch import start_run
    from gpuwizard.runner.prepare import prepare_run

    prepared = prepare_run(
        load_preset(args.preset),
        gpus=args.gpus,
        smoke=args.smoke,
        env=args.env,
        resume=args.resume is not None,
        resume_run=args.resume or None,
        node_rank=args.node_rank,
        slurm=args.slurm,
        check=not args.no_check,
    )
    if prepared.trainer_check is not None and prepared.trainer_check.status == "accepted":
        print(prepared.trainer_check.summary, flush=True)
    for warning in prepared.warnings:
        sys.stderr.write("warning: " + warning.paragraph() + "\n")
    if prepared.checkpoint is not None:
        linked = f", continuing run {prepared.resumed_from}" if prepared.resumed_from else ""
        print(f"resuming from {prepared.checkpoint}{linked}", flush=True)
    hw = prepared.preset.hardware
    if prepared.preset.launch.scheduler == "local" and hw.nodes > 1 and hw.node_rank > 0 and hw.rdzv_endpoint:
        wait_for_rendezvous(hw.rdzv_endpoint, prepared.preset.monitor.first_step_timeout_s or NODE0_WAIT_S)
    run = start_run(prepared, on_hang="stop" if args.headless else "report")
    if args.headless:
        print(
            f"run {run.run_id}: {prepared.plan.world_size} x {prepared.plan.device}, {prepared.plan.steps} steps; "
            f"folder {run.path}",
            flush=True,
        )
        return follow_headless(run, stream_log=args.log, stop_on_interrupt=True)
    from gpuwizard.tui.entry import run_app

    return run_app(attach=run.run_id)


NODE0_WAIT_S = 600.0


def wait_for_rendezvous(endpoint: str, timeout_s: float) -> None:
    """Node 1+ starts once node 0's rendezvous store answers, counting down instead of waiting silently."""
    from gpuwizard.core.network import wait_for_node0

    def countdown(left: float) -> None:
        print(f"waiting for node 0 at {endpoint}: {left:.0f} s left (start node 0 with --node-rank 0)", flush=True)

    if not wait_for_node0(endpoint, timeout_s, countdown):
        raise UserError(
            problem(
                "hardware.rdzv_endpoint",
                f"node 0 did not answer at {endpoint} within {timeout_s:.0f} s",
                "start node 0 first (`gpuwizard run PRESET --node-rank 0`), check that this node reaches that "
                "address and port (firewall), or raise monitor.first_step_timeout_s",
                value=endpoint,
            )
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
        raise UserError(
            problem(
                "RUN_ID",
                f"run {run.run_id} cannot be shown: {exc}",
                f"look inside {run.path}, or remove the folder",
                value=run.run_id,
            )
        ) from None


def attach_command(args: argparse.Namespace) -> int:
    run = chosen_run(args.run_id)
    status = readable_status(run)
    if args.headless:
        print(f"attached to {run.run_id} ({status.state}); Ctrl-C detaches, the job keeps running", flush=True)
        return follow_headless(run, stream_log=args.log, stop_on_interrupt=False)
    from gpuwizard.tui.entry import run_app

    return run_app(attach=run.run_id)


def follow_headless(run: RunDir, stream_log: bool, stop_on_interrupt: bool, out: TextIO | None = None) -> int:
    """Print status lines and events until the run ends; Ctrl-C stops the job (run) or detaches (attach), a second
    one (run) stops it without waiting for a checkpoint write. An end or a hang seen here rings the terminal when
    settings.notify asks for it."""
    from gpuwizard.model.settings import notify_settings
    from gpuwizard.runner.notify import final_notice, hang_notice, tell_terminal

    out = out or sys.stdout
    follower = RunFollower(run)
    last_line, last_status_t, stopping = "", 0.0, False
    progress = None
    notify, since = notify_settings(), time.time()
    ended_before: bool | None = None
    try:
        while True:
            try:
                update = follower.poll()
                if stream_log:
                    for line in update.lines:
                        out.write(line + "\n")
                for event in update.events:
                    out.write(event_text(event) + "\n")
                    if event.kind == "hang_suspected" and event.t >= since:
                        tell_terminal(hang_notice(run.run_id, event, str(run.path)), notify)
                for unreadable in update.unreadable:
                    out.write(f"warning: {unreadable}; following the rest of the run\n")
                progress = update.progress or progress
                status = update.status
                if status is None and not run.path.exists():
                    out.write(f"the run folder {run.path} was deleted; stopping every process of the run\n")
                    out.flush()
                    left = stop_all(run.path)
                    out.write(f"processes left: {left}\n" if left else "nothing of the run is left\n")
                    return ExitCode.FAILED
                if status is None:
                    out.write(f"the run folder can no longer be read: {update.problem}\n")
                    return ExitCode.FAILED
                if ended_before is None:
                    ended_before = status.final
                if update.lines and stream_log:
                    continue  # drain the whole log before the final summary
                now = time.monotonic()
                line = status_line(progress, status)
                if status.final:
                    out.write(line + "\n")
                    out.write(final_summary(run, status) + "\n")
                    out.flush()
                    if not ended_before:  # an end seen happening, not a run that had ended before
                        tell_terminal(final_notice(status, str(run.path)), notify)
                    wait_for_exit(run, status)
                    return status.exit_code if status.exit_code is not None else ExitCode.FAILED
                if supervisor_lost(status) and not readable_status(run).final:
                    # (read again: the supervisor writes the final status just before it exits)
                    out.write("the run's supervisor is gone; stopping every process of the run\n")
                    stop_recorded(run)
                    return ExitCode.FAILED
                if line != last_line and now - last_status_t >= STATUS_EVERY_S:
                    out.write(line + "\n")
                    last_line, last_status_t = line, now
                out.flush()
                time.sleep(0.2)
            except KeyboardInterrupt:
                if not stop_on_interrupt:
                    out.write(
                        f"\ndetached; the job keeps running. `gpuwizard attach {run.run_id}` to follow it again\n"
                    )
                    return ExitCode.OK
                out.write(
                    "\nstopping at once...\n"
                    if stopping
                    else "\nstopping the job (every rank, then a forced kill after 10 s; a checkpoint being written is "
                    "waited for, Ctrl-C again stops at once)...\n"
                )
                out.flush()
                stop_recorded(run)
                stopping = True
    finally:
        follower.close()


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


EXIT_WAIT_S = 10.0


def wait_for_exit(run: RunDir, status: Status) -> None:
    """The final status is written just before the supervisor exits: when `run` returns, nothing of the run is left
    (survivors the supervisor could not kill are already named in the summary)."""
    deadline = time.monotonic() + EXIT_WAIT_S
    while time.monotonic() < deadline and set(alive_processes(run, status)) - set(status.survivors):
        time.sleep(0.05)


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


def runs_command(args: argparse.Namespace) -> int:
    entries = list_runs()
    green = green_baselines(entries)
    now = time.time()
    rows = [history_row(entry, green, now) for entry in entries]
    if args.json:
        print(json.dumps(rows, indent=2))
        return ExitCode.OK
    if not rows:
        print("no runs yet: `gpuwizard run demo-cpu --headless` starts one")
        return ExitCode.OK
    print(f"{'run id':<36} {'state':<9} {'exit':>4} {'gpus':>4} {'step':>12} {'time':>8}  baseline")
    for r in rows:
        if r["state"] == "corrupt":
            print(f"{r['run_id'][:36]:<36} corrupt   {r['problem']}")
            continue
        step = f"{r['step'] if r['step'] is not None else '-'}/{r['steps']}"
        mark = "green" if r["baseline_green"] else "never"
        exit_code = r["exit_code"] if r["exit_code"] is not None else "-"
        minutes, seconds = divmod(int(r["duration_s"]), 60)
        print(
            f"{r['run_id'][:36]:<36} {r['state']:<9} {exit_code:>4} {r['world_size']:>4} {step:>12} "
            f"{minutes:>5}:{seconds:02d}  {mark}{' (smoke)' if r['smoke'] else ''}"
            + (" (probe)" if r.get("probe") else "")
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
    return ExitCode.OK


STOP_WAIT_S = 30.0


def stop_command(args: argparse.Namespace) -> int:
    """Stop a run with or without its supervisor, or with its folder deleted; exit 0 once a fresh look finds nothing
    of it left."""
    if args.run_id is None:
        active = [e.run for e in list_runs() if e.status is not None and e.status.claims_active]
        if not active:
            orphans = sorted(orphaned_runs())
            if orphans:
                return stop_deleted(orphans[-1])
            print("no active run to stop")
            return ExitCode.OK
        run = active[0]
    else:
        found = find_run(args.run_id) if args.run_id.strip() else None
        if found is None:
            orphans = sorted(p for p in orphaned_runs() if p.name.startswith(args.run_id.strip() or "\0"))
            if orphans:
                return stop_deleted(orphans[-1])
        run = found or chosen_run(args.run_id)
    status = readable_status(run)
    if status.final and not run_leftovers(run):
        print(f"run {run.run_id} already ended ({status.state})")
        return ExitCode.OK
    stop_recorded(run)
    deadline, told = time.monotonic() + STOP_WAIT_S, False
    while time.monotonic() < deadline:
        if not run.path.exists():
            return stop_deleted(run.path)
        status = readable_status(run)
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


def stop_deleted(path: Path) -> int:
    """A run whose folder was deleted while it ran: found by the marker its processes carry, and ended."""
    print(f"run {path.name}: its folder was deleted; stopping every process that carries its marker", flush=True)
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
