"""The settings file's validated model (settings.yaml); gpuwizard.model.settings imports it on first use, so
pydantic stays off the path to the first frame."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpuwizard.core.schema import Strict


class NotifySettings(Strict):
    """How a run that finishes, fails or hangs is told (runner/supervise/notify.py); everything is off by default."""

    bell: bool = Field(False, description="Ring the terminal bell (tmux marks the window).")
    desktop: bool = Field(
        False,
        description="Send an OSC 9 and an OSC 777 desktop notification to your terminal; over SSH it reaches "
        "the terminal on your desk (inside tmux, set -g allow-passthrough on).",
    )
    command: list[str] | None = Field(
        None,
        min_length=1,
        description="A command to run, as a list (never a shell string); {kind}, {title}, {body}, {run_id} and "
        "{folder} in its arguments are replaced. It runs once per event, from the run's supervisor.",
    )
    on: list[Literal["finished", "failed", "hung", "stopped"]] = Field(
        ["finished", "failed", "hung"], description="Which endings (and hangs) are told."
    )


class Settings(Strict):
    """What gpuwizard remembers between sessions."""

    theme: str | None = Field(
        None, min_length=1, description="The theme the app starts with (ctrl+t switches; the choice is remembered)."
    )
    notify: NotifySettings = Field(default_factory=NotifySettings, description="Notifications of a run's end.")
