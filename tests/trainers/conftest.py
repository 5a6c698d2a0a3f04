"""Real LeRobot runs that several trainer tests read: each is made once per session (per worker under xdist, so the
tests that share one carry the same xdist_group and `make test` runs with --dist loadgroup)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuwizard.runs.rundir import RunDir, list_runs
from support.cli import gw_subprocess
from support.trainers import FINISHED_STEPS, real_preset


@dataclass
class FinishedRun:
    """`gpuwizard plan --json` of one real_preset and the folder of its run (`run --headless`, finished green)."""

    plan: dict
    run: RunDir
    out: Path


def finished_run(folder: Path, variable: str, accum: int, gauge: bool) -> FinishedRun:
    """Plan and run one preset in data and config folders of its own (a session fixture has no isolated_dirs)."""
    preset = real_preset(folder, variable, accum, steps=FINISHED_STEPS, save_freq=FINISHED_STEPS, gauge=gauge)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUWIZARD_DATA_DIR", str(folder / "data"))
        patch.setenv("GPUWIZARD_CONFIG_DIR", str(folder / "config"))
        plan = json.loads(gw_subprocess("plan", "--trust", preset, "--json").stdout)
        result = gw_subprocess("run", "--trust", preset, "--headless", timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        [entry] = list_runs()
    return FinishedRun(plan, entry.run, folder / "out")


@pytest.fixture(scope="session")
def lerobot_run(tmp_path_factory) -> Callable[..., FinishedRun]:
    """The finished run of LeRobot `variable` at accumulation `accum`, gauged or not, made on first use."""
    made: dict[tuple[str, int, bool], FinishedRun] = {}

    def get(variable: str, accum: int, gauge: bool = False) -> FinishedRun:
        key = (variable, accum, gauge)
        if key not in made:
            made[key] = finished_run(tmp_path_factory.mktemp("lerobot-run"), variable, accum, gauge)
        return made[key]

    return get
