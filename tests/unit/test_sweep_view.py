"""Issue 27: the sweep's ETA, from the pace of the runs seen so far (the Sweep screen and `sweep status` show it)."""

from __future__ import annotations

from pathlib import Path

from gpuwizard.runner.sweep.view import eta_text, sweep_eta
from gpuwizard.runs.sweeps import Sweep, SweepRun, sweeps_dir, write_sweep


def written_sweep(tmp_path: Path, paths: list[Path], states: list[str]) -> tuple[Path, Sweep]:
    """A sweep folder as its scheduler writes it, its runs in these run folders (one per path; queued past them)."""
    runs = [
        SweepRun(
            index=i,
            values={"optim.lr": 10.0**-i},
            preset_file=f"runs/{i:03d}.yaml",
            processes=1,
            device="cpu",
            state=state,  # type: ignore[arg-type]  # the states a test names are SweepRun's
            run_id=paths[i].name if i < len(paths) else None,
            run_path=str(paths[i]) if i < len(paths) else None,
        )
        for i, state in enumerate(states)
    ]
    folder = sweeps_dir() / "20261201-000000-demo-cmp-abcd"
    folder.mkdir(parents=True)
    record = Sweep(
        sweep_id=folder.name,
        preset="demo-cmp",
        source="demo-cmp",
        created=0.0,
        grid={},
        workdir=str(tmp_path),
        runs=runs,
    )
    write_sweep(folder, record)
    return folder, record


def test_the_sweep_eta_is_a_range_from_the_runs_seen_and_unknown_without_them():
    def row(state: str, elapsed: float | None = None, eta: float | None = None) -> dict:
        return {"state": state, "elapsed_s": elapsed, "eta_s": eta}

    running = [row("running", 10.0, 10.0), row("running", 10.0, 20.0)]
    assert sweep_eta([*running, row("queued"), row("queued")], 2) == (40.0, 50.0, 2)
    assert sweep_eta([row("finished", 30.0), row("running", 5.0, None), row("queued")], 1) == (55.0, 55.0, 1)
    assert sweep_eta([row("running", 3.0, None), row("queued")], 1) is None
    assert eta_text(None, 1) == "sweep ETA unknown (no run has gone far enough to judge)"
    assert eta_text((40.0, 50.0, 2), 2) == "sweep ETA 00:40-00:50 (2 runs' pace, 2 at a time)"


def test_one_look_at_a_sweep_reads_each_runs_status_once(tmp_path, monkeypatch, gw):
    """The Sweep screen's poll and `sweep status` each take a run's state and its steps and time from one read of
    its status.json (a running run was read twice: for its state, then for its row)."""
    from gpuwizard.runs import rundir
    from gpuwizard.tui.screens.sweep import polled
    from support.runs import CMP_RUNS, copy_runs

    data = tmp_path / "data"
    copy_runs(data, *CMP_RUNS, "20261129-120000-demo-cpu")
    damaged = data / "runs" / "20261201-010000-demo-cmp"
    damaged.mkdir()
    (damaged / "status.json").write_text("{")
    paths = [data / "runs" / name for name in (*CMP_RUNS, "20261129-120000-demo-cpu")] + [damaged]
    states = ["running", "running", "finished", "running", "queued"]  # as the sweep recorded them last
    folder, _ = written_sweep(tmp_path, paths, states)
    reads: list[str] = []
    real = rundir.read_record

    def counting(path, kind):
        if path.name == "status.json":
            reads.append(path.parent.name)
        return real(path, kind)

    monkeypatch.setattr(rundir, "read_record", counting)
    shown = polled(folder, {})
    assert sorted(reads) == sorted(p.name for p in paths), "each run folder's status read once"
    assert [r["state"] for r in shown.rows] == ["finished", "finished", "finished", "failed", "queued"]
    assert shown.rows[0]["total"] == 300 and shown.rows[0]["elapsed_s"] > 0
    assert "cannot be read" in shown.rows[3]["unreadable"]
    reads.clear()
    assert gw("sweep", "status", folder.name, "--json").code == 0
    assert sorted(reads) == sorted(p.name for p in paths), "and so does `sweep status`"


def test_a_task_slurm_holds_pending_is_shown_pending_and_counted_with_the_queue(tmp_path):
    """An array's task waits for nodes with its run folder made (sweep_slurm.joining writes PENDING): the row says
    pending, not running, and the sweep's ETA lets it start only as a running run ends (it was counted as running
    since its submission, its ETA as short as its wait)."""
    from gpuwizard.runner.sweep.view import PENDING, run_rows
    from support.runs import copied_run

    waiting = copied_run(tmp_path, state="starting", slurm_job_id="41_1", slurm_state="PENDING")
    (waiting.path / "progress.json").unlink()
    started = copied_run(tmp_path, "20261201-005642-demo-cmp", state="starting", slurm_job_id="41_0")
    started.update_status(slurm_state="RUNNING")
    runs = [
        SweepRun(index=i, values={}, preset_file="", processes=1, device="cpu", state="running", array="41", task=i)
        for i in range(2)
    ]
    for run, folder in zip(runs, (started, waiting), strict=True):
        run.run_id, run.run_path = folder.run_id, str(folder.path)
    sweep = Sweep(sweep_id="s", preset="p", source="p", created=0.0, grid={}, workdir=str(tmp_path), runs=runs)
    rows = run_rows(sweep, {})
    assert [r["state"] for r in rows] == ["running", PENDING]
    running = {"state": "running", "elapsed_s": 10.0, "eta_s": 20.0}
    pending = {"state": PENDING, "elapsed_s": 50.0, "eta_s": None}
    assert sweep_eta([running, pending], 1) == (50.0, 50.0, 1), "it starts when the running one ends, 20 s + 30 s"


def test_an_ended_sweep_is_shown_within_80_columns_and_a_stop_leaves_it_as_it_ended(tmp_path, monkeypatch, gw):
    """`sweep status` at 80 columns: the table as wide as its values (it was 101 columns with a 34-column values
    field), the comparison's paragraph and the best's line wrapped at words (the terminal broke them mid-word).
    `sweep stop` of a sweep that had ended said 'stopped' and recorded it so; now it says it had ended."""
    from gpuwizard.runs.sweeps import read_sweep
    from support.runs import CMP_RUNS, copy_runs

    data = tmp_path / "data"
    copy_runs(data, *CMP_RUNS)
    folder, record = written_sweep(tmp_path, [data / "runs" / name for name in CMP_RUNS], ["finished", "finished"])
    assert read_sweep(folder).ended
    monkeypatch.setenv("COLUMNS", "80")
    shown = gw("sweep", "status", folder.name)
    assert shown.code == 0 and "best run: " in shown.out, shown.err
    long = [line for line in shown.out.splitlines() if len(line) > 80]
    assert long == [], long
    assert all(name in shown.out for name in CMP_RUNS)
    stop = gw("sweep", "stop", folder.name)
    assert (stop.code, stop.out.strip()) == (0, f"sweep {folder.name} had already ended (2 finished); nothing to stop")
    assert read_sweep(folder) == record and not read_sweep(folder).stopped, "the record as it was"


def test_a_row_shows_the_value_its_run_trained_with_and_the_best_line_says_its_loss_is_smoothed(tmp_path, gw):
    """Issue 39 item 4: a row "lr=0.001" had trained at 2e-3 (linear_lr doubled it on 2 processes), and the comparison
    under it said the runs "differ in lr 0.004 against 0.002". The runs here trained at lr 0.001 (their plan.json)
    where the sweep set 1.0 and 0.1: the table shows 0.001, marked, the sweep's value under it, as the comparison
    names them; the best line's final loss is the smoothed curve's, not the last logged loss of the table."""
    from gpuwizard.runner.sweep.view import run_rows
    from support.runs import CMP_RUNS, copy_runs

    data = tmp_path / "data"
    copy_runs(data, *CMP_RUNS)
    folder, record = written_sweep(tmp_path, [data / "runs" / name for name in CMP_RUNS], ["finished", "finished"])
    assert [r["trained"] for r in run_rows(record, {})] == [{"optim.lr": 0.001}, {"optim.lr": 0.001}]
    shown = gw("sweep", "status", folder.name)
    assert shown.code == 0, shown.err
    rows = [line.split() for line in shown.out.splitlines() if line.startswith(("  1 ", "  2 "))]
    assert [row[1] for row in rows] == ["lr=0.001*", "lr=0.001*"]
    assert "which was: #1 lr=1.0; #2 lr=0.1" in " ".join(shown.out.split())
    assert "best by final loss (smoothed): #" in shown.out and "(preset " in shown.out


def test_a_sweep_json_whose_run_ids_were_changed_by_hand_still_shows_its_best_line(tmp_path, gw):
    """Issue 40's campaign: sweep.json's run_id edited to another word while run_path still names the folder: the
    best line names the folder's run and says sweep.json does not list it (was a KeyError traceback)."""
    from support.runs import CMP_RUNS, copy_runs

    data = tmp_path / "data"
    copy_runs(data, *CMP_RUNS)
    folder, record = written_sweep(tmp_path, [data / "runs" / name for name in CMP_RUNS], ["finished", "finished"])
    for run in record.runs:
        run.run_id = "../../../etc"
    write_sweep(folder, record)
    shown = gw("sweep", "status", folder.name)
    assert shown.code == 0 and "Traceback" not in shown.out + shown.err, shown.err
    said = " ".join(shown.out.split())
    assert "best by final loss (smoothed): run 20261201-005700-demo-cmp: " in said, said
    assert "(sweep.json does not list it)" in said, said
