"""Starts the app; loads the preset or run first so bad input is an error line, not a crash in the UI."""

from __future__ import annotations

import sys
from pathlib import Path

from gpuwizard.core.codes import ExitCode
from gpuwizard.core.errors import UserError, problem


def has_terminal() -> bool:
    """Whether the app can run here: it reads keys from stdin and draws on stderr, and what it says once it has ended
    goes to stdout. A pipe or a file in any of them (cron, `ssh host cmd | tee`) would get escape sequences."""
    try:
        return all(stream is not None and stream.isatty() for stream in (sys.stdin, sys.stdout, sys.stderr))
    except ValueError:  # a closed stream
        return False


def no_terminal(what: str, instead: str) -> UserError:
    """The refusal of the app where has_terminal() is false, naming the command that works without one."""
    return UserError(
        problem(None, f"{what} needs a terminal, and stdin, stdout or stderr here is not one", f"use {instead}")
    )


def run_wizard(preset: str | None) -> int:
    """`gpuwizard [--preset X]`: the wizard where there is a terminal to draw it on; without one, a preset's own
    mistakes first, then the refusal."""
    if not has_terminal():
        if preset is not None:
            from gpuwizard.model.preset_files import load_preset

            load_preset(preset)
        raise no_terminal("the wizard", "`gpuwizard run PRESET --headless` to run a preset without one")
    return run_app(preset=preset)


def run_app(preset: str | None = None, attach: str | None = None, sweep: Path | None = None) -> int:
    """The preset is loaded after the first frame; if it is invalid the app exits 2 with its paragraph."""
    run = None
    if attach:
        from gpuwizard.runs.rundir import find_run  # the wizard's first frame needs no run-folder records

        run = find_run(attach)
        if run is None:
            raise UserError(problem("RUN_ID", "no such run", "see `gpuwizard runs`", value=attach))
    from gpuwizard.tui.app import GpuWizardApp
    from gpuwizard.tui.wizard.actions import LAUNCHES

    app = GpuWizardApp(preset=preset, run=run, sweep=sweep, exit_on_error=True)
    app.run()  # returns once its workers are done: a launch the quit cancelled has been undone by then
    for line in LAUNCHES:
        sys.stdout.write(line + "\n")
    LAUNCHES.clear()
    if app.exit_error:
        sys.stderr.write(app.exit_error + "\n")
        return ExitCode.INVALID
    if app.return_code:  # an unhandled exception: Textual printed its traceback and returned
        return ExitCode.FAILED
    if app.last_run is not None and app.last_run.is_active():
        sys.stdout.write(f"the job keeps running; `gpuwizard attach {app.last_run.run_id}` to watch it again\n")
    return ExitCode.OK
