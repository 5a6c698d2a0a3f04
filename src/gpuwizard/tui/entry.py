"""Starts the app; loads the preset or run first so bad input is an error line, not a crash in the UI."""

from __future__ import annotations

import sys

from gpuwizard.core.codes import ExitCode
from gpuwizard.core.errors import UserError, problem


def run_app(preset: str | None = None, attach: str | None = None) -> int:
    """The preset is loaded after the first frame; if it is invalid the app exits 2 with its paragraph."""
    run = None
    if attach:
        from gpuwizard.runs.rundir import find_run  # the wizard's first frame needs no run-folder records

        run = find_run(attach)
        if run is None:
            raise UserError(problem("RUN_ID", "no such run", "see `gpuwizard runs`", value=attach))
    from gpuwizard.tui.app import GpuWizardApp

    app = GpuWizardApp(preset=preset, run=run, exit_on_error=True)
    app.run()
    if app.exit_error:
        sys.stderr.write(app.exit_error + "\n")
        return ExitCode.INVALID
    if app.last_run is not None and app.last_run.is_active():
        sys.stdout.write(f"the job keeps running; `gpuwizard attach {app.last_run.run_id}` to watch it again\n")
    return ExitCode.OK
