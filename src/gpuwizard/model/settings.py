"""The user's settings file (settings.yaml): a validated model, plus the one raw read the first frame needs."""

from __future__ import annotations

import functools
from typing import Any

from gpuwizard.core import paths, yamlio
from gpuwizard.core.errors import UserError


def raw_theme() -> str | None:
    """The remembered theme name, read without validation libraries so the first frame is not delayed."""
    try:
        data = yamlio.load_file(paths.settings_file())
    except UserError:
        return None
    if isinstance(data, dict) and isinstance(data.get("theme"), str):  # before validation, only a usable name counts
        return data["theme"]
    return None


@functools.cache
def settings_model() -> Any:
    """The Settings model, built on first use (pydantic stays off the path to the first frame)."""
    from typing import Literal

    from pydantic import Field

    from gpuwizard.core.schema import Strict

    class NotifySettings(Strict):
        """How a run that finishes, fails or hangs is told (gpuwizard.runner.notify); everything is off by default."""

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

    return Settings


def notify_settings() -> Any:
    """settings.yaml's notify section, or the defaults (all off) when the file has mistakes (check_settings says
    which, once, at start-up)."""
    from pydantic import ValidationError

    model = settings_model()
    path = paths.settings_file()
    try:
        data = yamlio.load_file(path) if path.exists() else None
        return model.model_validate(data if data is not None else {}).notify
    except (UserError, ValidationError):
        return model().notify


def check_settings() -> list[str]:
    """Every mistake in settings.yaml, one paragraph each (an absent file has none)."""
    from pydantic import ValidationError

    from gpuwizard.core.schema import problems_from

    path = paths.settings_file()
    if not path.exists():
        return []
    try:
        data = yamlio.load_file(path)
        settings_model().model_validate(data if data is not None else {})
    except UserError as exc:
        return exc.paragraphs()
    except ValidationError as exc:
        return UserError(problems_from(exc, settings_model()), str(path)).paragraphs()
    return []


def remember(**values: Any) -> list[str]:
    """Merge values into settings.yaml, validated; a file with mistakes is left as it is and its problems returned."""
    from pydantic import ValidationError

    from gpuwizard.core.schema import problems_from, to_data

    path = paths.settings_file()
    model = settings_model()
    try:
        current = yamlio.load_file(path) if path.exists() else {}
        merged = model.model_validate((current or {}) | values)
    except UserError as exc:
        return exc.paragraphs()
    except ValidationError as exc:
        return UserError(problems_from(exc, model), str(path)).paragraphs()
    yamlio.atomic_write(path, yamlio.dumps(to_data(merged, omit_defaults=True)))
    return []
