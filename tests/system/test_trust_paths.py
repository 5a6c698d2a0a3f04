"""Trust that cannot be walked around (issue 40, items 1, 2 and 12): a trusted preset is trusted for its own file
(real path and content) and for what it names as it is now, relative paths resolved first; another folder's copy,
an edited interpreter or a swapped link asks again; concurrent `presets trust` calls keep each other's entries."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from gpuwizard.core import paths
from gpuwizard.model import trust
from gpuwizard.model.preset_files import load_preset_file

MARKER_SCRIPT = """#!/bin/sh
echo ran >> {marker}
exec {python} "$@"
"""

RELATIVE_PRESET = """name: theirs
trainer: lerobot
policy: act
dataset: {repo_id: lerobot/pusht}
hardware: {gpus: 1, device: cpu}
optim: {steps: 20}
launch: {python: .venv/bin/python}
"""


def interpreter(path: Path, marker: Path) -> Path:
    """An executable script standing for an interpreter; it leaves a mark when run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(MARKER_SCRIPT.format(marker=marker, python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def project(root: Path) -> Path:
    """A folder with its own .venv/bin/python and a preset naming it by a relative path."""
    interpreter(root / ".venv" / "bin" / "python", root / "ran")
    (root / "preset.yaml").write_text(RELATIVE_PRESET)
    return root / "preset.yaml"


def test_the_same_text_in_another_folder_is_not_trusted(gw, tmp_path, monkeypatch):
    first, second = project(tmp_path / "a"), project(tmp_path / "b")
    monkeypatch.chdir(first.parent)
    assert gw("presets", "trust", first).code == 0
    assert trust.is_trusted(load_preset_file(first))
    monkeypatch.chdir(second.parent)
    assert not trust.is_trusted(load_preset_file(second)), "trusted in one folder, the same text is trusted in all"
    refused = gw("check", second)
    assert refused.code == 2 and "presets trust" in refused.err
    assert not (second.parent / "ran").exists()


def test_a_relative_interpreter_resolves_where_the_launch_is(gw, tmp_path, monkeypatch):
    path = project(tmp_path / "a")
    interpreter(tmp_path / "elsewhere" / ".venv" / "bin" / "python", tmp_path / "elsewhere-ran")
    monkeypatch.chdir(path.parent)
    assert gw("presets", "trust", path).code == 0
    monkeypatch.chdir(tmp_path / "elsewhere")  # .venv/bin/python here is another interpreter
    assert not trust.is_trusted(load_preset_file(path))


def test_editing_the_named_interpreter_untrusts_it(gw, tmp_path, monkeypatch):
    path = project(tmp_path / "a")
    monkeypatch.chdir(path.parent)
    assert gw("presets", "trust", path).code == 0
    python = path.parent / ".venv" / "bin" / "python"
    python.write_text(python.read_text() + "echo more >> /dev/null\n")
    assert not trust.is_trusted(load_preset_file(path)), "an edited interpreter is still trusted"


def test_swapping_a_symlink_untrusts_it(gw, tmp_path, monkeypatch):
    path = project(tmp_path / "a")
    monkeypatch.chdir(path.parent)
    theirs = interpreter(tmp_path / "other" / "python", tmp_path / "other-ran")
    link = path.parent / ".venv" / "bin" / "python"
    real = interpreter(path.parent / ".venv" / "bin" / "python3", path.parent / "ran")
    link.unlink()
    link.symlink_to(real)
    assert gw("presets", "trust", path).code == 0
    assert trust.is_trusted(load_preset_file(path))
    link.unlink()
    link.symlink_to(theirs)
    assert not trust.is_trusted(load_preset_file(path)), "a swapped link is still trusted"


def test_editing_the_preset_file_untrusts_it(gw, tmp_path, monkeypatch):
    path = project(tmp_path / "a")
    monkeypatch.chdir(path.parent)
    assert gw("presets", "trust", path).code == 0
    path.write_text(path.read_text().replace("steps: 20", "steps: 30"))
    assert not trust.is_trusted(load_preset_file(path))


def test_an_entry_of_the_first_version_asks_again(gw, tmp_path, monkeypatch):
    """Entries keyed by the items' text alone (before this version) match nothing: the user is asked once more."""
    path = project(tmp_path / "a")
    monkeypatch.chdir(path.parent)
    preset = load_preset_file(path)
    import hashlib

    old = json.dumps([preset.trainer, [(i.field, i.value) for i in trust.code_items(preset)]], separators=(",", ":"))
    store = paths.config_dir() / "trusted.json"
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps({hashlib.sha256(old.encode()).hexdigest(): {"preset": "theirs"}}))
    assert not trust.is_trusted(preset)


def test_concurrent_trusts_keep_every_entry(tmp_path):
    files = [project(tmp_path / f"p{i}") for i in range(8)]
    env = {**os.environ, "GPUWIZARD_CONFIG_DIR": str(paths.config_dir())}
    code = "import sys; from gpuwizard import cli; sys.exit(cli.main(['presets', 'trust', sys.argv[1]]))"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(f)], cwd=f.parent, env=env, stdout=subprocess.DEVNULL)
        for f in files
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * len(files)
    stored = json.loads((paths.config_dir() / "trusted.json").read_text())
    assert sorted(e["source"] for e in stored.values()) == sorted(str(f) for f in files)
