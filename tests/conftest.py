"""Shared fixtures: every test gets its own config and data folders, and real NVML unless it asks for a replay.
The helpers the tests share live in tests/support/ (this folder is put on sys.path, so `from support.x import y`
works from every folder under tests/, whatever pytest's import mode)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))
pytest.register_assert_rewrite("support")  # the helpers' asserts report their values like a test's own

from gpuwizard import cli  # noqa: E402
from gpuwizard.model.catalog import load_catalog  # noqa: E402
from support.cli import CliResult  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path, monkeypatch):
    """The test's own config and data folders. The policy catalog stays read from one test to the next, as in one
    process (reading it again took about 15 ms, 5 s of the unit loop): a test that writes its own policies.yaml
    clears the cache to read it, as a new process would, and the cache is cleared after it."""
    monkeypatch.setenv("GPUWIZARD_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("GPUWIZARD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("GPUWIZARD_NVML_REPLAY", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield tmp_path
    if (tmp_path / "config" / "policies.yaml").exists():
        load_catalog.cache_clear()


SENT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals the tests send to the processes they start."""


def pytest_configure(config: pytest.Config) -> None:
    """A suite started under `nohup` (SIGHUP ignored) or by `&` in a script (SIGINT ignored) hands the ignored signal to
    every process it starts, which keeps it ignored, so a test's Ctrl-C or hang-up would go into the void and leave its
    run training. Where one is ignored, the suite catches it and does nothing instead: it is still not stopped by it,
    and a caught signal is reset to its default in each process it execs."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in SENT:
        if signal.getsignal(sig) is signal.SIG_IGN:
            signal.signal(sig, ignored)


def ignored(signum: int, frame: object) -> None:
    """The suite's own answer to a signal it was started ignoring."""


@pytest.fixture(autouse=True)
def nothing_left_running(isolated_dirs: Path) -> Iterator[None]:
    """Whatever a test does or fails to do, no process of a run or sweep it started outlives it (a sweep's scheduler
    stopped, each run stopped, then SIGKILL to what still carries a marker of its data folder): a job left training
    unseen would load the tests after it."""
    yield
    data = isolated_dirs / "data"
    if (data / "runs").is_dir() or (data / "sweeps").is_dir():
        from support.launches import stop_everything

        stop_everything(data)


@pytest.fixture
def write_preset(tmp_path):
    """Write a preset YAML by hand, as a user would, and return its path."""

    def write(text: str, name: str = "preset.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


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


@pytest.fixture
def cluster() -> None:
    """A SLURM cluster that answers (scripts/slurm-local.sh, SLURM_CONF); without one the test is skipped, or failed
    where GPUWIZARD_REQUIRE_SLURM=1 (CI)."""
    from support.slurm import cluster_answers

    if not cluster_answers():
        reason = "no SLURM cluster answers: start one with scripts/slurm-local.sh and export its SLURM_CONF"
        if os.environ.get("GPUWIZARD_REQUIRE_SLURM"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
def shown_folder(monkeypatch) -> Iterator[Callable[[str], Path]]:
    """Folders of this test's own for snapshots that show a fixed path (support/tui.py: folder_shown_as), removed
    after it."""
    from support.tui import folder_shown_as  # Textual only for the tests that ask

    made: list[Path] = []

    def make(shown: str) -> Path:
        made.append(folder_shown_as(shown, monkeypatch))
        return made[-1]

    yield make
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


LONGEST_FIRST = (("lerobot", "groot", "hf", "openpi"), ("slow", "slurm"))
"""Real trainers first, then real jobs and the cluster, then the rest, each kept in its collected order: under
`make test` (-n 2) the workers take tests in this order, so the last minutes are short tests on both workers
instead of one worker finishing a two-minute trainer run while the other waits."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        names = {mark.name for mark in item.iter_markers()}
        return next((i for i, group in enumerate(LONGEST_FIRST) if names & set(group)), len(LONGEST_FIRST))

    items.sort(key=rank)
