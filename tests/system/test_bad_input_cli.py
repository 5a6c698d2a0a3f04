"""Bad input through the real command in a child process: a YAML alias bomb anywhere in a preset, in the preset
folder, in the settings, themes or catalog, and a broken dataset folder: one paragraph each, never a hang."""

from __future__ import annotations

import os
import sys

import pytest

from gpuwizard.core import paths
from support.bad_input import BOMBS, HEAD, tower
from support.cli import gw_subprocess

BOMB_TIMEOUT_S = 60
"""A refused bomb answers in well under a second (bench: yaml_bomb); this only bounds a regression that hangs."""


def one_refusal(result, source: str) -> str:
    """The command refused with exit 2 and exactly one paragraph on stderr, naming the file; no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "Error:" not in result.stderr, result.stderr[-2000:]
    paragraphs = result.stderr.strip().split("\n")
    assert len(paragraphs) == 1 and paragraphs[0].startswith(source), result.stderr[-2000:]
    return paragraphs[0]


@pytest.mark.parametrize("placement", list(BOMBS))
def test_an_alias_bomb_anywhere_in_a_preset_is_refused_in_one_paragraph(tmp_path, placement):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMBS[placement])
    paragraph = one_refusal(gw_subprocess("plan", path, timeout=BOMB_TIMEOUT_S), str(path))
    assert "expands to more than 100,000 values" in paragraph and "aliases" in paragraph, paragraph
    assert "line " in paragraph and "Fix:" in paragraph


def test_presets_list_names_a_bomb_as_invalid_and_lists_the_rest(tmp_path):
    folder = paths.user_presets_dir()
    folder.mkdir(parents=True)
    (folder / "bomb.yaml").write_text(BOMBS["launch.extra_args"])
    result = gw_subprocess("presets", "list", timeout=BOMB_TIMEOUT_S)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    (bomb_row,) = [line for line in result.stdout.splitlines() if line.startswith("bomb ")]
    assert "INVALID:" in bomb_row and "expands to more than 100,000 values" in bomb_row
    assert any(line.startswith("demo-cpu ") and "demo" in line for line in result.stdout.splitlines())


SNIPPETS = {  # each of the other YAML files read, through the command or call that reads it
    "settings.yaml": "from gpuwizard.model.settings import check_settings; print(check_settings())",
    "themes/bomb.yaml": "from gpuwizard.tui.base.themes import load_themes; print(load_themes()[1])",
    "policies.yaml": "from gpuwizard.model.catalog import load_catalog\n"
    "try:\n    load_catalog()\nexcept Exception as exc:\n    print(exc)",
}


@pytest.mark.parametrize("relative", list(SNIPPETS))
def test_a_bomb_in_settings_themes_or_the_user_catalog_is_reported_not_built(relative):
    import subprocess

    target = paths.config_dir() / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"name: {tower()}\n")
    result = subprocess.run(
        [sys.executable, "-c", SNIPPETS[relative]], capture_output=True, text=True, timeout=BOMB_TIMEOUT_S
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "expands to more than 100,000 values" in result.stdout, result.stdout[-2000:]


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda info: os.mkfifo(info), "info.json cannot be read: not a regular file"),
        (lambda info: info.write_text("[" * 100_000 + "]" * 100_000), "info.json is not readable JSON"),
        (
            lambda info: info.write_text('{"total_episodes": Infinity, "total_frames": 1, "fps": 30}'),
            "info.json holds an infinite total_episodes or total_frames",
        ),
    ],
)
def test_a_dataset_folder_with_a_bad_info_json_is_a_paragraph_not_a_hang(tmp_path, make, expected):
    root = tmp_path / "dataset"
    (root / "meta").mkdir(parents=True)
    make(root / "meta" / "info.json")
    preset = tmp_path / "ds.yaml"
    preset.write_text(HEAD.format(name="ds", trainer="lerobot").replace("me/pick}", f"me/pick, root: {root}}}"))
    result = gw_subprocess("plan", preset, timeout=BOMB_TIMEOUT_S)
    assert "Traceback" not in result.stderr and expected in result.stdout + result.stderr, result.stderr[-2000:]
