"""The `gpuwizard` command line: dispatch to each command's module and exit codes. Heavy modules are imported
inside each command."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from gpuwizard.cli.parser import build_parser
from gpuwizard.core.codes import ExitCode
from gpuwizard.core.errors import UserError
from gpuwizard.core.safetext import safe_text

__all__ = ["build_parser", "main"]


class SafeStream:
    """stdout or stderr of a command: what it prints passes safe_text, so a job's error line, a log line or a run
    folder's name reaches the terminal without its escape sequences (the TUI writes to the terminal itself)."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(safe_text(text))

    def write_control(self, sequence: str) -> int:
        """gpuwizard's own terminal sequences (notify's bell and desktop notices, their text already cleaned)."""
        return self.stream.write(sequence)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main(argv: list[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(out), SafeStream(err)
    try:
        return run_command_line(argv)
    finally:
        sys.stdout, sys.stderr = out, err


def run_command_line(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return dispatch(args)
    except UserError as exc:
        sys.stderr.write(exc.paragraph() + "\n")
        return ExitCode.INVALID
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return ExitCode.OK


def dispatch(args: argparse.Namespace) -> int:
    if args.command is None:
        from gpuwizard.tui.entry import run_wizard

        return run_wizard(args.preset)
    from gpuwizard.cli.commands import cmd_check, cmd_gpus, cmd_plan, cmd_preview
    from gpuwizard.cli.presets import cmd_presets

    handler = {
        "gpus": cmd_gpus,
        "plan": cmd_plan,
        "preview": cmd_preview,
        "check": cmd_check,
        "doctor": cmd_doctor,
        "probe": cmd_probe,
        "run": cmd_run,
        "attach": cmd_attach,
        "runs": cmd_runs,
        "envs": cmd_envs,
        "stop": cmd_stop,
        "compare": cmd_compare,
        "presets": cmd_presets,
        "sweep": cmd_sweep,
    }[args.command]
    return handler(args)


def cmd_doctor(args: argparse.Namespace) -> int:
    from gpuwizard.cli.doctor import cmd_doctor as doctor

    return doctor(args)


def cmd_probe(args: argparse.Namespace) -> int:
    from gpuwizard.cli.probe import probe_command

    return probe_command(args)


def cmd_run(args: argparse.Namespace) -> int:
    from gpuwizard.cli.signals import RunSignals
    from gpuwizard.runner.host.interrupt import StartCancelled

    signals = RunSignals()
    signals.install()  # before the heavy modules load: a stop signal may land while they do
    try:
        from gpuwizard.cli.headless import run_command

        return run_command(args, signals)
    except StartCancelled as exc:
        return signals.cut_short(exc)
    finally:
        signals.restore()


def cmd_attach(args: argparse.Namespace) -> int:
    from gpuwizard.cli.headless import attach_command

    return attach_command(args)


def cmd_runs(args: argparse.Namespace) -> int:
    from gpuwizard.cli.runs import runs_command

    return runs_command(args)


def cmd_envs(args: argparse.Namespace) -> int:
    from gpuwizard.cli.envs import envs_command

    return envs_command(args)


def cmd_stop(args: argparse.Namespace) -> int:
    from gpuwizard.cli.runs import stop_command

    return stop_command(args)


def cmd_compare(args: argparse.Namespace) -> int:
    from gpuwizard.cli.runs import compare_command

    return compare_command(args)


def cmd_sweep(args: argparse.Namespace) -> int:
    from gpuwizard.cli.sweep import sweep_command

    return sweep_command(args)
