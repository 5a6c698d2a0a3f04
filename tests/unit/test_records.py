"""Run-folder records: typed and versioned; a damaged or foreign folder is one line in `runs`, one paragraph in
`attach`, and never stops any command working on the other runs."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from gpuwizard.runs.records import Event, Progress, RecordError, Status, parse_lines, read_record
from gpuwizard.runs.rundir import RunDir, baseline_green, list_runs
from support.data import DATA
from support.runs import status_record

GOOD_RUN = DATA / "runs" / "20261129-120000-demo-cpu"
DAMAGE = {
    "truncated": lambda text: text[: len(text) // 2],
    "empty": lambda text: "",
    "null": lambda text: "null",
    "a list": lambda text: "[1, 2]",
    "binary": lambda text: "\x00\xff\xfe garbage",
    "wrong type": lambda text: text.replace('"world_size": 2', '"world_size": "two"'),
    "created null": lambda text: text.replace('"created": 1796040000.0', '"created": null'),
    "other version": lambda text: text.replace('"format": 1', '"format": 7'),
    "no version": lambda text: text.replace('"format": 1,', ""),
    "unknown state": lambda text: text.replace('"state": "finished"', '"state": "exploded"'),
}


def copy_run(name: str) -> RunDir:
    from gpuwizard.core import paths

    target = paths.runs_dir() / name
    shutil.copytree(GOOD_RUN, target)
    text = (target / "status.json").read_text()
    (target / "status.json").write_text(text.replace(GOOD_RUN.name, name))
    return RunDir(target)


def damaged_run(kind: str) -> RunDir:
    """A copy of the good run whose status.json has this kind of damage."""
    run = copy_run(f"20261129-1300{list(DAMAGE).index(kind):02d}-damaged")
    path = run.path / "status.json"
    path.write_bytes(DAMAGE[kind](path.read_text()).encode("utf-8", errors="surrogateescape"))
    return run


@pytest.fixture
def runs_with_damage():
    """One healthy run and one run per kind of damage to status.json."""
    return copy_run("20261129-120000-healthy"), {kind: damaged_run(kind) for kind in DAMAGE}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_each_damaged_status_is_a_record_error_saying_why(kind):
    with pytest.raises(RecordError) as info:
        damaged_run(kind).status()
    text = str(info.value)
    assert text.startswith("status.json") and "\n" not in text
    if kind == "other version":
        assert "another gpuwizard version (record format 7" in text
    if kind == "wrong type":
        assert "world_size = 'two': must be a whole number" in text


def test_runs_lists_damaged_folders_as_corrupt_lines(gw, runs_with_damage):
    healthy, damaged = runs_with_damage
    result = gw("runs")
    assert result.code == 0 and "Traceback" not in result.err
    lines = result.out.splitlines()
    assert sum(" corrupt " in line for line in lines) == len(DAMAGE)
    assert any(line.startswith(healthy.run_id) and " finished " in line for line in lines)
    row = next(line for line in lines if line.startswith(healthy.run_id))
    assert len(row) <= 80, f"a run's row fits 80 columns (ids and steps as wide as the longest shown): {row!r}"
    rows = json.loads(gw("runs", "--json").out)
    assert {r["state"] for r in rows} == {"finished", "corrupt"}
    assert all(r["problem"].startswith("status.json") for r in rows if r["state"] == "corrupt")


def test_attach_on_a_damaged_run_is_one_paragraph(gw, runs_with_damage):
    _, damaged = runs_with_damage
    for kind, run in damaged.items():
        result = gw("attach", run.run_id, "--headless")
        assert result.code == 2, kind
        assert result.err.count("\n") == 1 and "cannot be shown" in result.err and "Traceback" not in result.err


def test_attach_without_an_id_skips_damaged_runs_and_an_empty_id_is_refused(gw, runs_with_damage):
    healthy, _ = runs_with_damage
    result = gw("attach", "--headless")
    assert result.code == 0 and f"attached to {healthy.run_id}" in result.out and "finished green" in result.out
    empty = gw("attach", "", "--headless")
    assert empty.code == 2 and "RUN_ID = '': is empty" in empty.err


def test_damaged_runs_do_not_affect_baselines_of_others(runs_with_damage):
    assert baseline_green("demo-cpu") is False  # the healthy run used 2 processes
    healthy, damaged = runs_with_damage
    status = healthy.status()
    healthy.update_status(world_size=1)
    assert status.preset == "demo-cpu" and baseline_green("demo-cpu") is True
    assert len(list_runs()) == 1 + len(damaged)


def test_a_fifo_named_status_json_never_blocks(gw, tmp_path):
    run = copy_run("20261129-140000-fifo")
    (run.path / "status.json").unlink()
    os.mkfifo(run.path / "status.json")
    started = time.monotonic()
    result = gw("runs")
    assert result.code == 0 and "not a regular file" in result.out
    assert time.monotonic() - started < 10


def test_events_lines_that_are_not_events_are_counted_not_fatal(tmp_path):
    good = Event(kind="rank_failed", severity="error", title="rank 1 failed").to_json_text()
    text = "\n".join([good, "[1, 2]", "null", "{truncated", '{"format": 1, "kind": "x"}', good]) + "\n"
    events, bad = parse_lines(text, Event)
    assert [e.kind for e in events] == ["rank_failed", "rank_failed"] and bad == 4


def test_nan_loss_round_trips_in_progress(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text(Progress(step=3, loss=float("nan"), lr=float("inf")).to_json_text())
    progress = read_record(path, Progress)
    assert progress.step == 3 and progress.loss != progress.loss and progress.lr == float("inf")


def test_a_status_from_this_version_reads_back_equal(tmp_path):
    status = status_record()
    path = tmp_path / "status.json"
    path.write_text(status.to_json_text())
    assert read_record(path, Status) == status
    assert json.loads(path.read_text())["format"] == 1


def test_a_run_of_a_new_preset_starts_despite_damaged_history(runs_with_damage):
    """A `created: null` in an old run once made every multi-GPU `run` crash (the baseline check read every status)."""
    from gpuwizard.model.preset import saved_as
    from gpuwizard.model.preset_files import load_preset, save_user_preset
    from gpuwizard.runner.launch.prepare import prepare_run

    shipped = load_preset("demo-cpu")
    save_user_preset(saved_as(shipped, "my-demo", shipped.description))
    prepared = prepare_run(load_preset("my-demo"), check=False)  # the baseline check, without the demo's own parser
    assert any("never finished green on 1 process" in w.paragraph() for w in prepared.warnings)
    assert prepared.baseline_green is False, "a user's copy: the monitor's advice names the baseline"
    # the shipped demo is ours: the README's first step draws no "Fix:" (issue 39 item 1), and its failure's advice
    # (runner/detect/detectors.py, from the run's expectations) names no baseline either
    prepared = prepare_run(shipped, check=False)
    assert not any("never finished green" in w.paragraph() for w in prepared.warnings)
    assert prepared.baseline_green is True


def test_runs_of_many_folders_reads_each_status_once(gw, monkeypatch):
    """`runs` used to re-read every status for every row; count the reads."""
    from gpuwizard.runs import rundir

    for n in range(30):
        copy_run(f"20261129-15{n:04d}-many")
    reads = []
    real = rundir.read_record

    def counting(path: Path, kind):
        reads.append(path)
        return real(path, kind)

    monkeypatch.setattr(rundir, "read_record", counting)
    assert gw("runs").code == 0
    status_reads = [p for p in reads if p.name == "status.json"]
    assert len(status_reads) == 30 and len(set(status_reads)) == 30


def test_a_reused_pid_is_never_taken_for_the_run_nor_signalled(gw):
    """A stale status whose supervisor and job pids now belong to an unrelated program: `runs` says lost, `attach`
    ends, and `stop` leaves the program alone (the start time and boot id do not match)."""
    import subprocess
    import sys

    from gpuwizard.runs.records import ProcessRef

    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        run = copy_run("20261129-160000-stale")
        real = ProcessRef.of(bystander.pid)
        impostor = real.model_copy(update={"start_ticks": real.start_ticks - 1000})  # same pid, an earlier process
        run.update_status(
            state="running", supervisor=impostor.model_dump(), job=impostor.model_dump(), ended=None, exit_code=None
        )
        assert not impostor.alive() and real.alive()
        rows = json.loads(gw("runs", "--json").out)
        assert next(r for r in rows if r["run_id"] == run.run_id)["state"] == "lost"
        result = gw("stop", run.run_id)
        assert result.code == 0 and "nothing of it is left" in result.out
        assert bystander.poll() is None, "the unrelated program was not signalled"
        assert run.status().state == "stopped"
        attached = gw("attach", run.run_id, "--headless")
        assert attached.code == 4
    finally:
        bystander.kill()
        bystander.wait()


def test_a_fifo_named_like_a_preset_never_blocks(gw, tmp_path):
    fifo = tmp_path / "trap.yaml"
    os.mkfifo(fifo)
    result = gw("plan", fifo)
    assert result.code == 2 and "not a regular file" in result.err


def test_a_presets_runs_are_found_by_their_folder_names(tmp_path, monkeypatch):
    """list_runs(preset) reads only that preset's folders, including a second run started in the same second
    (new_run_dir adds -1), and not another preset whose name ends the same way."""
    from gpuwizard.runs.rundir import list_runs, new_run_dir, publish

    monkeypatch.setenv("GPUWIZARD_DATA_DIR", str(tmp_path))
    made = []
    for preset in ("cpu", "cpu", "demo-cpu"):
        run, stage = new_run_dir(preset)
        status = status_record(run_id=run.run_id, preset=preset, created=float(len(made)), state="finished")
        stage.write("status.json", status)
        publish(stage, run)
        made.append(run.run_id)
    assert [e.run.run_id for e in list_runs("cpu")] == [made[1], made[0]]
    assert len(list_runs()) == 3
