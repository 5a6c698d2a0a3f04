"""Finding the user's training environments: real interpreters in the places users keep them, asked for their
trainers by package metadata, never by importing a trainer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuwizard.trainers.envs import envs_for, find_envs
from support.trainers import metadata_venv


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUWIZARD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("GPUWIZARD_ENV_CACHE", str(tmp_path / "no-cache"))
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX", "MAMBA_ROOT_PREFIX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def test_venvs_conda_envs_and_checkouts_are_found_with_their_trainers(home):
    lerobot = metadata_venv(home / ".venvs" / "lerobot", {"lerobot": "0.6.1", "torch": "2.7.1"})
    hf = metadata_venv(home / "miniconda3" / "envs" / "hf", {"transformers": "5.24.0"})
    checkout = home / "Isaac-GR00T"
    (checkout / "gr00t" / "configs").mkdir(parents=True)
    (checkout / "gr00t" / "configs" / "finetune_config.py").write_text("")
    groot = metadata_venv(checkout / ".venv", {"torch": "2.7.1"})
    metadata_venv(home / ".venvs" / "empty", {})

    envs = {e.python: e for e in find_envs(home)}
    assert envs[str(lerobot)].trainers == {"lerobot": "0.6.1"} and envs[str(lerobot)].torch == "2.7.1"
    assert envs[str(lerobot)].where == ".venvs/lerobot"
    assert envs[str(hf)].trainers == {"hf": "5.24.0"} and envs[str(hf)].where == "conda env hf"
    assert envs[str(groot)].trainers == {"groot": "checkout"} and envs[str(groot)].checkout == str(checkout)
    assert "groot checkout" in envs[str(groot)].where
    assert envs[str(home / ".venvs" / "empty" / "bin" / "python3")].trainers == {}
    found = list(envs.values())
    assert [e.python for e in envs_for("lerobot", found)] == [str(lerobot)]
    assert found.index(envs[str(lerobot)]) < found.index(envs[str(home / ".venvs" / "empty" / "bin" / "python3")])


def test_an_interpreter_that_cannot_answer_is_listed_with_why(home):
    broken = home / ".venvs" / "broken" / "bin"
    broken.mkdir(parents=True)
    (broken / "python3").write_text("#!/bin/sh\nexit 3\n")
    (broken / "python3").chmod(0o755)
    env = next(e for e in find_envs(home) if e.python == str(broken / "python3"))
    assert env.trainers == {} and env.error and "no answer" in env.error


@pytest.mark.lerobot
def test_the_real_lerobot_environment_is_found_with_its_version(home, monkeypatch):
    python = os.environ.get("GPUWIZARD_LEROBOT_PYTHON")
    if not python:
        if os.environ.get("GPUWIZARD_REQUIRE_TRAINERS") == "1":
            pytest.fail("GPUWIZARD_LEROBOT_PYTHON is required here")
        pytest.skip("needs GPUWIZARD_LEROBOT_PYTHON")
    monkeypatch.setenv("GPUWIZARD_ENV_CACHE", str(Path(python).parents[3]))  # the cache folder of the built envs
    env = next(e for e in find_envs(home) if Path(e.python).parent == Path(python).parent)
    assert env.trainers.get("lerobot") == "0.6.1" and env.torch and "(gpuwizard's tests)" in env.where
