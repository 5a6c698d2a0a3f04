"""`gpuwizard probe`: the grid of short real runs, a line per configuration as it goes, then the table."""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from gpuwizard.core.codes import ExitCode
from gpuwizard.core.errors import Problem, UserError, problem

if TYPE_CHECKING:
    from gpuwizard.runner.probe.request import ProbeRequest


MAX_ROUNDS = 10
"""The most alternating rounds a probe takes (--repeat): each adds two runs of the compared configurations."""
MAX_BUDGET_S = 24 * 3600.0
"""The longest --budget a probe takes: a day of measuring is a mistyped unit, not a probe."""


def probe_request(args: argparse.Namespace) -> ProbeRequest:
    from gpuwizard.cli.commands import load_given
    from gpuwizard.runner.probe.request import (
        ProbeRequest,
        default_batches,
        default_gpus,
        parse_budget,
        parse_counts,
    )

    preset = load_given(args.preset, "probe", args.trust)
    if not 0 <= args.headroom < 1:
        raise UserError(
            problem("--headroom", "must be at least 0 and below 1", "e.g. 0.1 keeps 10% free", value=args.headroom)
        )
    gpus = parse_counts(args.gpus, "--gpus") if args.gpus else default_gpus(preset)
    if args.batch in (None, ""):
        batches: list[int] | None = default_batches(preset)
    elif args.batch == "auto":
        batches = None
    else:
        batches = parse_counts(args.batch, "--batch")
    budget = parse_budget(args.budget) if args.budget else None
    found: list[Problem] = []
    if args.repeat > MAX_ROUNDS:
        found.append(
            problem(
                "--repeat",
                f"{args.repeat:,} alternating rounds would start {2 * args.repeat:,} more runs",
                f"give {MAX_ROUNDS} or fewer: 3 already tell a changing load from a real difference",
                value=args.repeat,
            )
        )
    if budget is not None and budget > MAX_BUDGET_S:
        found.append(
            problem("--budget", "is longer than a probe is meant to take", "give 24h or less (30m)", value=args.budget)
        )
    if found:
        raise UserError(found, preset.name)
    request = ProbeRequest(preset, gpus, batches, budget, args.headroom, args.slurm, args.steps, bool(args.gpus))
    return replace(request, repeat=args.repeat, from_run=args.from_run)


def say(text: str, stream: TextIO) -> None:
    """Print, and once the terminal is gone (a dropped SSH session) print nowhere: the probe still stops cleanly."""
    try:
        print(text, file=stream, flush=True)
    except OSError:
        nowhere = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(nowhere, fd)
        os.close(nowhere)


def interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (`timeout`, kill) stops the probe as Ctrl-C does: its running configuration too."""
    raise KeyboardInterrupt


def hang_up(signum: int, frame: FrameType | None) -> None:
    """SIGHUP (the terminal went) becomes a SIGTERM to this thread: while a run's supervisor starts, SIGTERM waits
    (it is blocked there) until the supervisor is known and can be stopped."""
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)


@contextlib.contextmanager
def stopped_by_term_and_hangup() -> Iterator[None]:
    """SIGTERM and SIGHUP end the probe like Ctrl-C, unless they were ignored when it started (nohup)."""
    handlers = {signal.SIGTERM: interrupt, signal.SIGHUP: hang_up}
    previous = {}
    for signum, handler in handlers.items():
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def probe_command(args: argparse.Namespace) -> int:
    from gpuwizard.analysis.probe.verdict import result_text
    from gpuwizard.runner.probe.grid import Probe
    from gpuwizard.runner.probe.request import clock

    request = probe_request(args)
    with stopped_by_term_and_hangup(), full_disk_said("the probe"):
        probe = Probe(request, on_update=lambda result, text: say(f"  [{probe.pace()}] {text}", sys.stderr))
        shown = (
            "auto (the memory line's largest batch, confirmed by its neighbour; else double, then bisect)"
            if request.batches is None
            else ",".join(map(str, request.batches))
        )
        header = (
            f"probe {request.preset.name}: GPUs {','.join(map(str, request.gpus))} x batch per device {shown}"
            + f", then {request.repeat} alternating round(s) of the compared configurations: {probe.planned_runs()} "
            f"runs, about {clock(probe.result.expected_s or 0)} (a guess until the first run ends)"
            + (f", budget {request.budget_s:.0f} s" if request.budget_s else "")
            + (f"; each from {probe.start.stage}" if probe.start else "")
        )
        say("\n".join(textwrap.wrap(header, 80)), sys.stderr if args.json else sys.stdout)
        try:
            result = probe.run()
        except KeyboardInterrupt:
            kept = probe.path / "probe.json"
            say(f"probe stopped; nothing of it is left running. Partial result: {kept}", sys.stdout)
            return ExitCode.STOPPED
    measured = any(r.outcome == "measured" for r in result.rows)
    if args.json:
        say(json.dumps(result.model_dump(mode="json"), indent=2), sys.stdout)
    else:
        plan = f"`gpuwizard plan {request.preset.name}`"
        used = f"{plan} now uses it" if measured else f"nothing was measured, so {plan} does not use it"
        say(f"{result_text(result)}\n\nkept in {probe.path / 'probe.json'}; {used}", sys.stdout)
    return ExitCode.OK if measured else ExitCode.FAILED


@contextlib.contextmanager
def full_disk_said(what: str) -> Iterator[None]:
    """A data folder that is full or read-only ends the command in one paragraph, not a traceback (what already ran
    was stopped by the probe's own cleanup on the way out)."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        raise UserError(
            problem(None, f"cannot record {what}: {exc.strerror}", "free disk space or set GPUWIZARD_DATA_DIR")
        ) from None
