"""Shared fixtures: every test gets its own config and data folders, and real NVML unless it asks for a replay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwizard import cli
from gpuwizard.model.catalog import load_catalog

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).parent.parent


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUWIZARD_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("GPUWIZARD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("GPUWIZARD_NVML_REPLAY", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    load_catalog.cache_clear()
    yield tmp_path
    load_catalog.cache_clear()


@pytest.fixture
def write_preset(tmp_path):
    """Write a preset YAML by hand, as a user would, and return its path."""

    def write(text: str, name: str = "preset.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


class CliResult:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def gw(capsys):
    """Run the gpuwizard command line in-process and capture its exit code and output."""

    def run(*args: str) -> CliResult:
        try:
            code = cli.main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def gw_subprocess(
    *args: str, env: dict | None = None, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run the real console entry point in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "gpuwizard", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def replay(monkeypatch, name: str) -> Path:
    path = DATA / "nvml" / f"{name}.json"
    monkeypatch.setenv("GPUWIZARD_NVML_REPLAY", str(path))
    return path


def probe_batch_driver(module: str) -> str:
    """A script that runs one probe's parse() on many argvs in one interpreter (argv[1]: the probes folder, the
    argvs as JSON on stdin), answering each like gwcheck.main does: one training interpreter start for them all."""
    return f"""
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[1])
import gwcheck, {module}
for argv in json.loads(sys.stdin.read()):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            found = {module}.parse(argv)
        print(json.dumps({{"status": "parsed", **found}}, default=str))
    except SystemExit:
        print(json.dumps({{"status": "refused", "error": gwcheck.last_error_line(err.getvalue())}}))
    except Exception as exc:
        print(json.dumps({{"status": "refused", "error": f"{{type(exc).__name__}}: {{exc}}"}}))
"""


def trainer_env(variable: str, what: str) -> str:
    """A real trainer environment named by `variable`; skipped without one, a failure where
    GPUWIZARD_REQUIRE_TRAINERS=1 (set by .ci/run, which builds them with scripts/trainer-envs.sh)."""
    value = os.environ.get(variable)
    if value and Path(value).exists():
        return value
    reason = f"set {variable} to {what} (scripts/trainer-envs.sh builds it and prints the variables)"
    if os.environ.get("GPUWIZARD_REQUIRE_TRAINERS"):
        pytest.fail(reason)
    pytest.skip(reason)


def wait_for(predicate, timeout: float = 60.0, every: float = 0.2) -> bool:
    """Poll a condition until it holds or the (generous) timeout passes: tests wait on conditions, never sleeps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False
