"""Themes from YAML files (shipped themes/ plus the user's), and the remembered choice."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from textual.theme import Theme

from gpuwizard.core import paths, yamlio
from gpuwizard.core.errors import UserError

DEFAULT_THEME = "gpuwizard-dark"
THEME_FIELDS = {f.name for f in dataclasses.fields(Theme)}


def theme_from_file(path: Path) -> Theme:
    data = yamlio.load_file(path)
    if not isinstance(data, dict) or "name" not in data or "primary" not in data:
        raise ValueError(f"{path.name} needs at least `name` and `primary`")
    unknown = set(data) - THEME_FIELDS
    if unknown:
        raise ValueError(f"{path}: unknown theme fields {sorted(unknown)}")
    return Theme(**data)


def load_themes() -> tuple[list[Theme], list[str]]:
    """Shipped themes, then the user's (same name overrides); returns themes and load problems."""
    themes: dict[str, Theme] = {}
    problems = []
    for folder in (paths.shipped_themes_dir(), paths.user_themes_dir()):
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.yaml")):
            try:
                theme = theme_from_file(path)
            except UserError as exc:
                problems.append(f"theme {path.name} skipped: {exc.paragraph()}")
                continue
            except (ValueError, TypeError) as exc:
                problems.append(f"theme {path.name} skipped: {exc}")
                continue
            themes[theme.name] = theme
    return list(themes.values()), problems
