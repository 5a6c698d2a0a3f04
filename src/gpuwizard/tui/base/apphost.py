"""What the screens use of gpuwizard's app beyond Textual's own App: opening a run's monitor or the wizard, and the
error a wizard that exits on error ends with.

GpuWizardApp (tui/app.py) is the one app; it imports the screens, so they never import it: a screen that needs more
than Textual's App types its `app` as this base class instead (`app = getters.app(AppHost)` for the type checker), and
the type checker holds GpuWizardApp to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.app import App

if TYPE_CHECKING:
    from textual.screen import Screen

    from gpuwizard.model.preset import Preset
    from gpuwizard.runs.rundir import RunDir


class AppHost(App[int]):
    """gpuwizard's app, as its screens see it."""

    exit_error: str | None
    """Why a wizard that exits on error ended; the command line prints it once the app is gone."""

    def open_monitor(self, run: RunDir, replace: bool = False) -> None:
        """Show a run in the monitor (screens reach each other through the app, never by importing one another)."""
        raise NotImplementedError

    def open_wizard(self, preset: Preset) -> None:
        """Back to the wizard: the one under the monitor, or a new one on the run's preset."""
        raise NotImplementedError

    def sweep_under(self, screen: Screen[Any]) -> bool:
        """Whether the screen right under `screen` is a Sweep screen (a monitor opened from it goes back in one key)."""
        raise NotImplementedError
