"""The user's settings file (settings.yaml): a validated model, plus the one raw read the first frame needs."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from gpuwizard.core import paths, yamlio
from gpuwizard.core.errors import UserError

if TYPE_CHECKING:
    from gpuwizard.model.settings_schema import NotifySettings, Settings


def raw_theme() -> str | None:
    """The remembered theme name, read without validation libraries so the first frame is not delayed."""
    try:
        data = yamlio.load_file(paths.settings_file())
    except UserError:
        return None
    theme = data.get("theme") if isinstance(data, dict) else None
    return theme if isinstance(theme, str) else None  # before validation, only a usable name counts


@functools.cache
def settings_model() -> type[Settings]:
    """The Settings model, imported on first use (pydantic stays off the path to the first frame)."""
    from gpuwizard.model.settings_schema import Settings

    return Settings


def notify_settings() -> NotifySettings:
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
