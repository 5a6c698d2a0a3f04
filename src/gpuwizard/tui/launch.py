"""Starts the app; loads the preset or run first so bad input is an error line, not a crash in the UI."""

from __future__ import annotations

import sys

from gpuwizard.errors import UserError, problem


def run_app(preset: str | None = None, attach: str | None = None) -> int:
    from gpuwizard.preset import load_preset
    from gpuwizard.runner.rundir import find_run

    start_preset = load_preset(preset) if preset else None
    run = None
    if attach:
        run = find_run(attach)
        if run is None:
            raise UserError(problem("RUN_ID", "no such run", "see `gpuwizard runs`", value=attach))
    from gpuwizard.tui.app import GpuWizardApp

    app = GpuWizardApp(preset=start_preset, run=run)
    app.run()
    last = getattr(app, "last_run", None) or run
    if last is not None and last.is_active():
        sys.stdout.write(f"the job keeps running; `gpuwizard attach {last.run_id}` to watch it again\n")
    return 0
