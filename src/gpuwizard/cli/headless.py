"""`gpuwizard run` and `attach`: the TUI in a terminal, status lines without one, and what a signal means to a run.

SIGINT and SIGTERM stop the run (as torchrun itself would); the command exits once the stop is recorded. SIGHUP (the
SSH session dropped) and the reader of the output going away detach: the run goes on under its supervisor, and
`gpuwizard attach` finds it.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
import time
from typing import TYPE_CHECKING, TextIO

from gpuwizard.analysis.compare.runs import scaling_line
from gpuwizard.analysis.probe.noise_scale import summary as noise_summary
from gpuwizard.cli.runs import chosen_run, final_summary, readable_status, stop_recorded
from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.core.errors import UserError, problem
from gpuwizard.core.kinds import EventKind
from gpuwizard.runner.control.follow import RunFollower, event_text, status_line
from gpuwizard.runner.control.stopping import stop_all
from gpuwizard.runs.records import Status
from gpuwizard.runs.rundir import RunDir, alive_processes, supervisor_lost

if TYPE_CHECKING:
    from gpuwizard.cli.signals import RunSignals

STATUS_EVERY_S = 2.0


def run_command(args: argparse.Namespace, signals: RunSignals) -> int:
    """`gpuwizard run`, its signals handled (main.cmd_run installs them before this module loads)."""
    from gpuwizard.cli.commands import load_given
    from gpuwizard.runner.launch.prepare import prepare_run
    from gpuwizard.runner.launch.start import start_run
    from gpuwizard.tui import entry

    preset = load_given(args.preset, "run", args.trust)  # a preset's mistakes come first, whatever the terminal
    headless = args.headless or args.detach
    if not headless and not entry.has_terminal():
        sys.stderr.write("gpuwizard run: no terminal here (stdin, stdout or stderr is not one): running headless\n")
        headless = True
    info = sys.stderr if args.detach else sys.stdout  # --detach prints only the run id on stdout
    prepared = prepare_run(
        preset,
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
        print(prepared.trainer_check.summary, file=info, flush=True)
    for warning in prepared.warnings:
        sys.stderr.write("warning: " + warning.paragraph() + "\n")
    if prepared.checkpoint is not None:
        linked = f", continuing run {prepared.resumed_from}" if prepared.resumed_from else ""
        print(f"resuming from {prepared.checkpoint}{linked}", file=info, flush=True)
    hw = prepared.preset.hardware
    if prepared.preset.launch.scheduler == "local" and hw.nodes > 1 and hw.node_rank > 0 and hw.rdzv_endpoint:
        wait_for_rendezvous(hw.rdzv_endpoint, prepared.preset.monitor.first_step_timeout_s or NODE0_WAIT_S)
    run = start_run(prepared, on_hang="stop" if headless else "report", on_launched=signals.launched)
    if signals.stops:  # a stop signal just after the launch: sent already, seen through here
        return follow_headless(run, stream_log=args.log, signals=signals)
    if signals.hangup and not args.detach:
        return detached(run, "the terminal hung up (SIGHUP)")
    if headless and not args.detach:
        print(
            f"run {run.run_id}: {prepared.plan.world_size} x {prepared.plan.device}, {prepared.plan.steps} steps; "
            f"folder {run.path}",
            flush=True,
        )
        return follow_headless(run, stream_log=args.log, signals=signals)
    signals.restore()  # the run is under way; from here this command only shows it
    if args.detach:
        print(run.run_id, flush=True)
        sys.stderr.write(
            f"run {run.run_id} started and detached: `gpuwizard attach {run.run_id}` follows it, `gpuwizard stop "
            f"{run.run_id}` stops it\n"
        )
        return ExitCode.OK
    return entry.run_app(attach=run.run_id)


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


def attach_command(args: argparse.Namespace) -> int:
    run = chosen_run(args.run_id)
    status = readable_status(run)
    if args.headless:
        print(f"attached to {run.run_id} ({status.state}); Ctrl-C detaches, the job keeps running", flush=True)
        return follow_headless(run, stream_log=args.log)
    from gpuwizard.tui import entry

    if not entry.has_terminal():
        raise entry.no_terminal("the monitor", f"`gpuwizard attach {run.run_id} --headless` for status lines")
    return entry.run_app(attach=run.run_id)


def detached(run: RunDir, why: str) -> int:
    """The run goes on under its supervisor; said on stderr where that still reaches anyone."""
    with contextlib.suppress(OSError):
        sys.stderr.write(
            f"{why}: detached, the run goes on. `gpuwizard attach {run.run_id}` follows it, `gpuwizard stop "
            f"{run.run_id}` stops it\n"
        )
        sys.stderr.flush()
    return ExitCode.OK


def silence_stdout() -> None:
    """The reader of stdout is gone: what is still buffered goes nowhere (no error when the interpreter exits)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def follow_headless(run: RunDir, stream_log: bool, signals: RunSignals | None = None, out: TextIO | None = None) -> int:
    """Print status lines and events until the run ends. With `signals` (a `run`) a stop signal stops the job and a
    second one stops it without waiting for a checkpoint write; a hangup or the output's reader going away detaches.
    Without (`attach`) Ctrl-C detaches. An end or a hang seen here rings the terminal when settings.notify asks."""
    try:
        return follow_until_end(run, stream_log, signals, out or sys.stdout)
    except KeyboardInterrupt:  # attach: its own SIGINT
        with contextlib.suppress(OSError):
            (out or sys.stdout).write(
                f"\ndetached; the job keeps running. `gpuwizard attach {run.run_id}` to follow it again\n"
            )
        return ExitCode.OK
    except OSError as exc:
        if exc.errno not in (errno.EPIPE, errno.EIO):
            raise
        silence_stdout()
        return detached(run, "the output's reader went away")


def follow_until_end(run: RunDir, stream_log: bool, signals: RunSignals | None, out: TextIO) -> int:
    from gpuwizard.model.settings import notify_settings
    from gpuwizard.runner.supervise.notify import final_notice, hang_notice, tell_terminal

    follower = RunFollower(run)
    last_line, last_status_t, told_stops = "", 0.0, 0
    progress = None
    notify, since = notify_settings(), time.time()
    ended_before: bool | None = None
    try:
        while True:
            if signals is not None:
                if signals.hangup:
                    return detached(run, "the terminal hung up (SIGHUP)")
                if signals.failure is not None:
                    raise signals.failure
                if signals.stops > told_stops:
                    out.write(signals.stopping_text(first=told_stops == 0))
                    out.flush()
                    told_stops = signals.stops
            update = follower.poll()
            if stream_log:
                for line in update.lines:
                    out.write(line + "\n")
            for event in update.events:
                out.write(event_text(event) + "\n")
                if event.kind == EventKind.HANG_SUSPECTED and event.t >= since:
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
                summary, _, _ = final_summary(run, status).partition("\nscaling of ")  # its line unchecked
                scaling = scaling_line(status.preset) if status.state == RunState.FINISHED else None
                out.write(summary + "\n" + (scaling + "\n" if scaling else ""))
                if (noise := noise_summary(run.path)) is not None:  # a run with monitor.gauge on
                    out.write(noise + "\n")
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
    finally:
        follower.close()


EXIT_WAIT_S = 10.0


def wait_for_exit(run: RunDir, status: Status) -> None:
    """The final status is written just before the supervisor exits: when `run` returns, nothing of the run is left
    (survivors the supervisor could not kill are already named in the summary)."""
    deadline = time.monotonic() + EXIT_WAIT_S
    while time.monotonic() < deadline and set(alive_processes(run, status)) - set(status.survivors):
        time.sleep(0.05)
