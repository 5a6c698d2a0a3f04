"""Run folders for tests: real finished runs copied from tests/data/runs, and folders made by hand for a supervisor."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gpuwizard.runs.records import Event, Expectations, Job, Status
from gpuwizard.runs.rundir import RunDir, list_runs
from support.data import DATA

CMP_RUNS = ("20261201-005642-demo-cmp", "20261201-005700-demo-cmp")
"""Two real finished demo runs of one preset: on 1 process and on 2."""


def copy_runs(data: Path, *names: str) -> None:
    """Real finished runs (tests/data/runs) into a data folder: a 1-process and a 2-process demo of one preset."""
    for name in names:
        shutil.copytree(DATA / "runs" / name, data / "runs" / name, dirs_exist_ok=True)


def status_record(**fields) -> Status:
    """A status.json record for a test: a running demo on one CPU process, with the fields the test sets."""
    base = dict(run_id="r", preset="p", trainer="demo", policy="demo", world_size=1, device="cpu", steps=1, created=1.0)
    return Status(**base | dict(state="running", command="x") | fields)


def events_of(run: RunDir) -> list[Event]:
    """The run's events, every line of events.jsonl readable."""
    events, bad = run.events()
    assert bad == 0
    return events


def start_supervisor(run_path: Path, args: Sequence[str] = (), **popen) -> subprocess.Popen:
    """The real supervisor of a run folder, started as start_run starts one: in its own session, the run's marker in
    its environment (`args` instead of `-m` the supervisor's module, `popen` where its output goes)."""
    from gpuwizard.runner.host.procs import MARKER, marker_value
    from gpuwizard.runner.host.targets import SUPERVISOR

    return subprocess.Popen(
        [sys.executable, *(args or ("-m", SUPERVISOR)), str(run_path)],
        env={**os.environ, MARKER: marker_value(run_path)},
        start_new_session=True,
        **popen,
    )


def newest_run() -> RunDir:
    """The newest run of the test's data folder."""
    runs = list_runs()
    assert runs, "a run folder was created"
    return runs[0].run


def copied_run(tmp_path, name: str = "20261129-120000-demo-cpu", **status) -> RunDir:
    """A real finished demo run (tests/data/runs) in this test's data folder, its status changed where asked."""
    target = tmp_path / "data" / "runs" / name
    shutil.copytree(DATA / "runs" / name, target)
    run = RunDir(target)
    if status:
        run.update_status(**status)
    return run


def hand_made_run(
    folder: Path, argv: list[str], device: str = "cpu", world_size: int = 1, hang_timeout_s: float = 30.0
) -> RunDir:
    """A run folder written the way start_run writes one, for a supervisor started directly on a chosen command."""
    run = RunDir(folder)
    run.path.mkdir(parents=True)
    expect = Expectations(
        steps=7, lr=1e-3, warmup_steps=0, effective_batch=None, world_size=world_size, hang_timeout_s=hang_timeout_s
    )
    job = Job(
        argv=argv,
        env={},
        unset=[],
        workdir=str(folder.parent),
        trainer="demo",
        device=device,
        on_hang="stop",
        stop_grace_s=2,
        expect=expect,
    )
    run.write("job.json", job)
    status = status_record(
        run_id=run.run_id,
        preset=folder.name,
        world_size=world_size,
        device=device,
        steps=7,
        created=time.time(),
        state="starting",
        command=" ".join(argv),
    )
    run.write("status.json", status)
    return run
