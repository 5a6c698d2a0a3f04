"""Where gpuwizard keeps user presets, settings, runs and the demo dataset."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent


def config_dir() -> Path:
    """User config folder; GPUWIZARD_CONFIG_DIR overrides it (tests, shared machines)."""
    override = os.environ.get("GPUWIZARD_CONFIG_DIR")
    if override:
        return Path(override)
    import platformdirs

    return platformdirs.user_config_path("gpuwizard")


def data_dir() -> Path:
    """User data folder for runs and datasets; GPUWIZARD_DATA_DIR overrides it."""
    override = os.environ.get("GPUWIZARD_DATA_DIR")
    if override:
        return Path(override)
    import platformdirs

    return platformdirs.user_data_path("gpuwizard")


def user_presets_dir() -> Path:
    return config_dir() / "presets"


def user_themes_dir() -> Path:
    return config_dir() / "themes"


def shipped_dir(kind: str) -> Path:
    """A shipped data folder (presets, themes): inside the installed package, or at the top of a checkout
    (a plain checkout and `pip install -e .` both run the package from src/)."""
    installed = PACKAGE_DIR / kind
    return installed if installed.is_dir() else PACKAGE_DIR.parent.parent / kind


def shipped_presets_dir() -> Path:
    return shipped_dir("presets")


def shipped_themes_dir() -> Path:
    return shipped_dir("themes")


def runs_dir() -> Path:
    return data_dir() / "runs"


def settings_file() -> Path:
    return config_dir() / "settings.yaml"
