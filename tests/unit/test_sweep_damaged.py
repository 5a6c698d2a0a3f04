"""A sweep folder whose sweep.json is damaged (truncated, not JSON, wrong types, missing keys, garbage runs, huge
numbers), an id no file name can be and a grid field below a value: `sweep status|stop|resume` and `sweep` answer with
one paragraph and exit 2, never a traceback."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from gpuwizard.runs.sweeps import sweeps_dir

GOOD: dict[str, Any] = {
    "format": 1,
    "sweep_id": "20261201-000000-demo-cpu-abcd",
    "preset": "demo-cpu",
    "source": "demo-cpu",
    "created": 1.0,
    "grid": {"optim.lr": [1e-3, 1e-4]},
    "workdir": "/",
    "runs": [
        {"index": 0, "values": {"optim.lr": 1e-3}, "preset_file": "runs/000.yaml", "processes": 1, "device": "cpu"},
        {"index": 1, "values": {"optim.lr": 1e-4}, "preset_file": "runs/001.yaml", "processes": 1, "device": "cpu"},
    ],
}


def changed(change: Callable[[dict[str, Any]], object]) -> str:
    data = copy.deepcopy(GOOD)
    change(data)
    return json.dumps(data)


def first_run(**fields: Any) -> Callable[[dict[str, Any]], object]:
    return lambda d: d["runs"][0].update(fields)


DAMAGED = {
    "empty": "",
    "truncated": json.dumps(GOOD)[:70],
    "not-json": "sweep: yes\n",
    "a-list": "[]",
    "null": "null",
    "another-format": changed(lambda d: d.update(format=99)),
    "too-deep": "[" * 100_000 + "]" * 100_000,
    "no-runs": changed(lambda d: d.pop("runs")),
    "no-sweep-id": changed(lambda d: d.pop("sweep_id")),
    "runs-null": changed(lambda d: d.update(runs=None)),
    "runs-of-garbage": changed(lambda d: d.update(runs=[1, "x", None])),
    "runs-of-empty-mappings": changed(lambda d: d.update(runs=[{}])),
    "grid-a-string": changed(lambda d: d.update(grid="x")),
    "values-a-list": changed(first_run(values=[1])),
    "huge-index": changed(first_run(index=10**30)),
    "index-not-its-place": changed(first_run(index=7)),
    "processes-negative": changed(first_run(processes=-1)),
    "processes-huge": changed(first_run(processes=10**20)),
    "unknown-state": changed(first_run(state="paused")),
    "scheduler-pid-text": changed(lambda d: d.update(scheduler={"pid": "x", "start_ticks": 1, "boot_id": "b"})),
    "scheduler-pid-huge": changed(lambda d: d.update(scheduler={"pid": 10**30, "start_ticks": 1, "boot_id": "b"})),
    "run-path-nul": changed(first_run(state="finished", run_id="r", run_path="/tmp/\x00x")),
    "preset-file-outside": changed(first_run(preset_file="../../../etc/passwd")),
    "devices-text": changed(first_run(devices=["a"])),
    "array-job-id-a-number": changed(lambda d: d.update(arrays=[{"job_id": 1, "runs": [0]}])),
}


@pytest.mark.parametrize("action", ["status", "stop", "resume"])
@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_sweep_json_gets_one_paragraph(gw, damage, action):
    folder = sweeps_dir() / GOOD["sweep_id"]
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text(DAMAGED[damage])
    result = gw("sweep", action, folder.name)
    assert result.code == 2, result.out + result.err
    assert "Traceback" not in result.out + result.err
    assert result.err.startswith(f"SWEEP_ID = '{folder.name}': sweep {folder.name} cannot be shown, stopped or resumed")
    assert "Fix: its runs are runs of their own" in result.err and result.err.count("\n") == 1, result.err
    assert (folder / "sweep.json").read_text() == DAMAGED[damage], "a damaged record is left as it was"


def test_the_good_record_reads(gw):
    """The variants above fail for their damage alone."""
    folder = sweeps_dir() / GOOD["sweep_id"]
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps(GOOD))
    result = gw("sweep", "status", folder.name)
    assert result.code == 0 and "2 runs" in result.out, result.out + result.err


@pytest.mark.parametrize("action", ["status", "stop", "resume", "watch"])
def test_a_sweep_id_longer_than_a_file_name_is_no_sweep(gw, action):
    sweeps_dir().mkdir(parents=True)
    result = gw("sweep", action, "a" * 5000)
    assert result.code == 2 and "Traceback" not in result.out + result.err
    assert "no sweep (or more than one) has this id" in result.err and len(result.err) < 400, result.err


def test_a_grid_field_below_a_value_is_refused_by_name(gw):
    result = gw("sweep", "demo-cpu", "--trust", "--set", "optim.lr.x=1,2")
    assert result.code == 2, result.out + result.err
    assert result.err == (
        "demo-cpu: grid.optim.lr.x = 'optim.lr.x': optim.lr holds the value 0.001, not a section, so there is "
        "nothing to set optim.lr.x in. Fix: sweep optim.lr itself.\n"
    )
