"""`gpuwizard probe` for real: short demo runs on 1 and 2 CPU processes (gloo) through the supervisor, a batch
search that ends at a memory limit (the demo's device_memory_mb makes the allocator itself refuse a larger batch,
with torch's own DefaultCPUAllocator message), and a cancel that leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest

from conftest import wait_for
from gpuwizard.probe import probes_dir
from gpuwizard.runner.rundir import alive_processes, list_runs

pytestmark = pytest.mark.slow

PRESET = """\
version: 1
name: {name}
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: {batch}}}
optim: {{lr: 1.0e-3, steps: 200}}
mixed_precision: "no"
output_dir: {root}/out-{name}
trainer_options: {{episodes: 4{options}}}
monitor: {{hang_timeout_s: 60}}
"""


def preset(tmp_path, name="probe-demo", options="", batch=4):
    path = tmp_path / f"{name}.yaml"
    path.write_text(PRESET.format(name=name, root=tmp_path, options=options, batch=batch))
    return path


def test_probe_measures_one_and_two_processes_at_two_batches_and_plan_uses_it(gw, tmp_path):
    path = preset(tmp_path)
    result = gw("probe", path, "--json")
    assert result.code == 0, result.err
    probe = result.json()
    assert probe["state"] == "finished"
    grid = sorted((r["gpus"], r["per_device_batch"], r["outcome"]) for r in probe["rows"])
    assert grid == [(1, 4, "measured"), (1, 8, "measured"), (2, 4, "measured"), (2, 8, "measured")]
    for row in probe["rows"]:
        assert row["samples_per_s"] > 0 and row["memory_mb"] > 50  # a rank of torch holds more than 50 MB
        assert row["window"].startswith("steps ") and row["first_step_s"] is not None
    two = [r for r in probe["rows"] if r["gpus"] == 2]
    assert all(r["speedup"] is not None and r["efficiency"] == pytest.approx(r["speedup"] / 2) for r in two)
    assert probe["recommended"] is not None
    assert any(line.startswith("2 processes: ") and "x the samples/s of 1" in line for line in probe["verdict"])
    folder = probes_dir() / probe["probe_id"]
    assert json.loads((folder / "probe.json").read_text())["rows"] == probe["rows"]
    assert not (folder / "scratch").exists()  # the measurement runs' outputs are gone with them
    assert not (tmp_path / "out-probe-demo").exists()  # never the preset's own output_dir
    runs = [e.status for e in list_runs("probe-demo")]
    assert len(runs) == 4 and all(s.probe == probe["probe_id"] for s in runs)

    plan = gw("plan", path, "--json").json()
    by_gpus = {e["gpus"]: e for e in plan["estimates"]}
    assert by_gpus[1]["basis"] == "probed" and by_gpus[2]["basis"] == "probed"
    assert by_gpus[1]["source"].startswith("probed on this machine") and "batch 4" in by_gpus[1]["source"]
    text = gw("plan", path).out
    assert "probed on this machine" in text


def test_batch_search_doubles_then_bisects_to_the_memory_limit(gw, tmp_path):
    # 2 MB per sample on a 40 MB device: batch 20 fits, 21 does not
    path = preset(tmp_path, name="probe-oom", options=", device_memory_mb: 40", batch=16)
    result = gw("probe", path, "--gpus", "1", "--batch", "auto", "--steps", "30", "--json")
    assert result.code == 0, result.err
    probe = result.json()
    tried = [(r["per_device_batch"], r["outcome"]) for r in probe["rows"]]
    assert tried[:2] == [(16, "measured"), (32, "does not fit")]  # from the plan's batch, doubled
    fits = max(b for b, outcome in tried if outcome == "measured")
    fails = min(b for b, outcome in tried if outcome == "does not fit")
    assert fits <= 20 < fails and fails - fits <= max(1, fits // 8)
    oom = next(r for r in probe["rows"] if r["outcome"] == "does not fit")
    assert oom["detail"] == "out of memory (CPU allocator)"
    assert probe["batch_limit"] == fits and probe["recommended"]["per_device_batch"] == fits
    assert f"Batch search: {fits} per device fits on 1 process, {fails} does not." in probe["verdict"]


def test_cancelling_a_probe_leaves_no_process_and_no_scratch(tmp_path):
    path = preset(tmp_path, name="probe-stop", options=", step_time_s: 0.05")
    env = {**os.environ}
    probe = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "probe", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert wait_for(lambda: any(e.status and e.status.state == "running" for e in list_runs("probe-stop")), 180)
        probe.send_signal(signal.SIGINT)
        out, err = probe.communicate(timeout=180)
    finally:
        if probe.poll() is None:
            probe.kill()
    assert probe.returncode == 4, err
    assert "Traceback" not in err and "nothing of it is left running" in out
    (folder,) = probes_dir().iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["probe.json"]
    assert json.loads((folder / "probe.json").read_text())["state"] == "stopped"
    for entry in list_runs("probe-stop"):
        assert entry.status.final and not alive_processes(entry.run, entry.status)
    demo_procs = [p for p in psutil.process_iter(["cmdline"]) if "probe-stop" in " ".join(p.info["cmdline"] or [])]
    assert demo_procs == []


def test_bad_probe_flags_get_one_paragraph_each(gw, tmp_path):
    path = preset(tmp_path)
    for flags, field in (
        (["--budget", "soon"], "--budget = 'soon'"),
        (["--gpus", "0,2"], "--gpus = '0,2'"),
        (["--batch", "big"], "--batch = 'big'"),
        (["--headroom", "1.5"], "--headroom = 1.5"),
    ):
        result = gw("probe", path, *flags)
        assert result.code == 2 and result.err.count("\n") == 1, result.err
        assert field in result.err and "Fix:" in result.err and "Traceback" not in result.err


@pytest.mark.slurm
def test_probe_on_slurm_submits_each_configuration_and_measures_it(tmp_path):
    from test_slurm import cluster_answers

    if not cluster_answers():
        reason = "no SLURM cluster answers: start one with scripts/slurm-local.sh and export its SLURM_CONF"
        if os.environ.get("GPUWIZARD_REQUIRE_SLURM"):
            pytest.fail(reason)
        pytest.skip(reason)
    from gpuwizard.demo.dataset import ensure_dataset

    ensure_dataset(tmp_path / "dataset", 4)  # the nodes share this disk: written once, up front
    path = preset(tmp_path, name="probe-slurm")
    done = subprocess.run(
        [sys.executable, "-m", "gpuwizard", "probe", str(path), "--slurm", "--gpus", "1", "--batch", "4,8", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    probe = json.loads(done.stdout)
    assert [(r["per_device_batch"], r["outcome"]) for r in probe["rows"]] == [(4, "measured"), (8, "measured")]
    runs = [e.status for e in list_runs("probe-slurm")]
    assert len(runs) == 2 and all(s.slurm_job_id and s.probe == probe["probe_id"] for s in runs)
