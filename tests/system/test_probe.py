"""`gpuwizard probe` for real: short demo runs on 1 and 2 CPU processes (gloo) through the supervisor, a batch
search that ends at a memory limit (the demo's device_memory_mb makes the allocator itself refuse a run whose peak
memory passes it, with torch's own DefaultCPUAllocator message) after at most two runs past the memory line's fit,
and a cancel that leaves nothing behind. Its verdict's words:
tests/unit/test_probe_verdict.py."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys

import psutil
import pytest

from gpuwizard.analysis.probe.results import NO_SECOND_BATCH, ProbeResult, newest_probe, probes_dir
from gpuwizard.analysis.probe.verdict import result_text
from gpuwizard.planning.estimates import measured_runs
from gpuwizard.runs.rundir import alive_processes, baseline_green, list_runs, scaling_report
from support.cli import poll_until
from support.slurm import cluster_answers

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


@pytest.mark.slow
def test_probe_measures_one_and_two_processes_at_two_batches_and_plan_uses_it(gw, tmp_path):
    path = preset(tmp_path)
    result = gw("probe", "--trust", path, "--json")
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
    for row in probe["rows"]:  # the gauge on where two batch sizes meet: DDP of 2 processes, not 1 alone
        if row["gpus"] == 1:
            assert row["noise"] is None and row["noise_detail"] == NO_SECOND_BATCH
        else:
            assert row["noise"]["b_simple"] > 0 and row["noise"]["b_big"] == 2 * row["noise"]["b_small"], row
    if probe["noise"] is not None:  # the 2-process runs' figures pooled, or where they share no value, said so
        assert probe["noise"]["source"].startswith("3 runs pooled (2 processes at batch "), probe["noise"]
    else:
        assert probe["noise_detail"].startswith("the configurations' noise scales disagree"), probe["noise_detail"]
    # as test_probe_goodput.py: twice the largest batch where the fit tells a sample's cost, 4 processes where the
    # cores hold them and the fit tells the all-reduce's cost
    median = probe["throughput"]["median"]
    four = (os.cpu_count() or 1) >= 4 and median["comm_s"] is not None
    expected = [
        (g, b)
        for g in (1, 2, 4)
        for b in (4, 8, 16)
        if (g == 4 and four or g < 4 and b == 16) and (b < 16 or median["per_sample_s"] is not None)
    ]
    assert sorted((r["gpus"], r["per_device_batch"]) for r in probe["predicted"]) == expected, probe["throughput"]
    assert all(r["outcome"] == "predicted" for r in probe["predicted"])
    assert probe["throughput"]["rows"] == 4 and probe["goodput"].startswith("Time to the same loss (B_noise ~")
    # the job has 200 steps: the probe never runs more, and says "up to", since a steady rate ends a run sooner
    assert probe["steps"] == 200
    assert all(int(r["window"].split()[1].split("-")[1]) <= 200 for r in probe["rows"])
    said = " ".join(result_text(ProbeResult.model_validate(probe)).splitlines())
    assert "up to 200 steps per configuration (all of the job's), each stopped once its rate is steady" in said
    folder = probes_dir() / probe["probe_id"]
    assert json.loads((folder / "probe.json").read_text())["rows"] == probe["rows"]
    assert not (folder / "scratch").exists()  # the measurement runs' outputs are gone with them
    assert not (tmp_path / "out-probe-demo").exists()  # never the preset's own output_dir
    runs = [e.status for e in list_runs("probe-demo")]
    # the grid's 4, then the compared pair again in the other order: each window has a neighbour of the other
    assert len(runs) == 6 and all(s.probe == probe["probe_id"] for s in runs)
    assert sorted((r["gpus"], r["repeat"]) for r in probe["repeats"]) == [(1, 1), (2, 1)]

    plan = gw("plan", path, "--json").json()
    by_gpus = {e["gpus"]: e for e in plan["estimates"]}
    assert by_gpus[1]["basis"] == "probed" and by_gpus[2]["basis"] == "probed"
    assert by_gpus[1]["source"].startswith("probed on this machine") and "batch 4" in by_gpus[1]["source"]
    text = gw("plan", path).out
    assert "probed on this machine" in text


def memory_line(gw, tmp_path) -> tuple[float, float]:
    """The demo's peak memory line on this machine (MB, MB a sample), from a probe of batches 16 and 32: a
    simulated device sized from it puts the limit half a sample's memory away from the batch a test wants."""
    path = preset(tmp_path, name="probe-line", options=", device_memory_mb: 100000", batch=16)
    result = gw("probe", "--trust", path, "--gpus", "1", "--batch", "16,32", "--steps", "30", "--json")
    assert result.code == 0, result.err
    (a, low), (b, high) = sorted((r["per_device_batch"], r["memory_mb"]) for r in result.json()["rows"])
    per_sample = (high - low) / (b - a)
    assert 8 <= per_sample < 10, "the demo holds 8 MB a sample, and its step a little more"
    return low - per_sample * a, per_sample


def device_for(line: tuple[float, float], largest: int) -> float:
    fixed, per_sample = line
    return round(fixed + per_sample * (largest + 0.5), 1)


@pytest.mark.slow
def test_batch_search_doubles_then_bisects_to_the_memory_limit(gw, tmp_path):
    # a device that holds the demo's peak at batch 20 and not at 21: one row fits before a line can be drawn
    limit = device_for(memory_line(gw, tmp_path), 20)
    path = preset(tmp_path, name="probe-oom", options=f", device_memory_mb: {limit}", batch=16)
    result = gw("probe", "--trust", path, "--gpus", "1", "--batch", "auto", "--steps", "30", "--json")
    assert result.code == 0, result.err
    probe = result.json()
    tried = [(r["per_device_batch"], r["outcome"]) for r in probe["rows"]]
    assert tried[:3] == [(16, "measured"), (32, "does not fit"), (24, "does not fit")]  # doubled, then bisected
    assert tried[3:] == [(20, "measured"), (21, "does not fit")], "the line through 16 and 20, confirmed"
    oom = next(r for r in probe["rows"] if r["outcome"] == "does not fit")
    assert oom["detail"] == "out of memory (CPU allocator)"
    assert all(r["memory_mb"] <= limit for r in probe["rows"] if r["outcome"] == "measured")
    assert probe["batch_limit"] == 20 and probe["recommended"]["per_device_batch"] == 20
    assert "Batch search: 20 per device fits on 1 process, 21 does not." in probe["verdict"]
    assert probe["memory"]["confirmed"] == "confirming: 20 fits, 21 does not" and not probe["memory"]["off"]
    # its 30-step runs that fit ran to the end with exit 0, and still are no green baseline and no full run
    runs = [e.status for e in list_runs("probe-oom")]
    assert any(s.state == "finished" and s.exit_code == 0 and s.world_size == 1 and s.probe for s in runs)
    assert not baseline_green("probe-oom") and scaling_report("probe-oom") == []
    assert {m.basis for m in measured_runs("probe-oom", 16, newest_probe("probe-oom"))} == {"probed"}
    history = gw("runs", "--json", "--probes").json()
    assert history and not any(r["baseline_green"] for r in history)


@pytest.mark.slow
def test_batch_auto_runs_the_memory_lines_batch_and_one_more_and_finds_the_largest(gw, tmp_path):
    limit = device_for(memory_line(gw, tmp_path), 60)  # the demo's peak at 60 fits, at 61 it does not
    path = preset(tmp_path, name="probe-fit", options=f", device_memory_mb: {limit}", batch=16)
    result = gw("probe", "--trust", path, "--gpus", "1", "--batch", "auto", "--steps", "30", "--json")
    assert result.code == 0, result.err
    probe = result.json()
    tried = [(r["per_device_batch"], r["outcome"]) for r in probe["rows"]]
    assert tried[:2] == [(16, "measured"), (32, "measured")], "the plan's batch and twice it give the line"
    after = tried[2:]
    assert len(after) <= 2 and probe["memory"]["runs_after_fit"] == len(after)
    assert after == [(60, "measured"), (61, "does not fit")], "the largest that fits, and one more that does not"
    assert probe["batch_limit"] == 60 and probe["memory"]["predicted_batch"] == 60
    said = result.err.replace("\n", " ")
    assert "fitted mem(b) = " in said and "from rows 16, 32 (an exact fit): predicted 60 within" in said
    assert "confirming: 60 fits, 61 does not" in said
    assert "peak resident memory of the largest rank (the gauge's)" in {r["memory_source"] for r in probe["rows"]}


@pytest.mark.slow
def test_a_probe_that_measured_nothing_exits_non_zero_and_is_not_used(gw, tmp_path):
    path = preset(tmp_path, name="probe-none", options=", device_memory_mb: 40")  # not even the interpreter fits
    result = gw("probe", "--trust", path, "--gpus", "1", "--batch", "64")
    assert result.code == 1, result.out + result.err
    assert "1    64" in result.out and "now uses it" not in result.out
    assert "nothing was measured, so `gpuwizard plan probe-none` does not use it" in result.out
    assert measured_runs("probe-none", 64, newest_probe("probe-none")) == []


def test_configurations_this_machine_cannot_start_are_refused_up_front(gw, tmp_path):
    path = preset(tmp_path, name="probe-big")
    cores = os.cpu_count() or 1
    for flags in (["--gpus", str(cores + 1), "--batch", "8"], ["--gpus", "1,64", "--json"]):
        result = gw("probe", "--trust", path, *flags)
        assert result.code == 2 and result.out == "" and result.err.count("\n") == 1, (flags, result.err)
        assert f"--gpus = '{flags[1]}': " in result.err and f"this machine has {cores} cores" in result.err
        assert f"Fix: probe at most {cores} processes" in result.err and "Traceback" not in result.err
    assert not probes_dir().exists() or list(probes_dir().iterdir()) == []
    assert list_runs("probe-big") == []


def a_configuration_runs(name: str) -> bool:
    return any(e.status and e.status.state == "running" for e in list_runs(name))


def stop_what_is_left(name: str) -> None:
    """A failed test leaves no job training behind it (the orphans these tests look for)."""
    from gpuwizard.runner.control.stopping import request_stop

    for entry in list_runs(name):
        if entry.status is not None and not entry.status.final:
            request_stop(entry.run)


def assert_stopped_with_nothing_left(name: str) -> None:
    """probe.json says stopped and when, the scratch output is gone, and no process of the probe's runs is left."""
    (folder,) = probes_dir().iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["probe.json"]
    record = json.loads((folder / "probe.json").read_text())
    assert record["state"] == "stopped" and record["ended"] is not None
    entries = list_runs(name)
    assert entries
    for entry in entries:
        assert entry.status.final and not alive_processes(entry.run, entry.status)
        assert entry.status.state == "stopped"
    demo_procs = [p for p in psutil.process_iter(["cmdline"]) if name in " ".join(p.info["cmdline"] or [])]
    assert demo_procs == []


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_ctrl_c_sigterm_and_sighup_stop_a_probe_with_no_process_and_no_scratch_left(tmp_path, stop):
    """Ctrl-C, `timeout`/kill (SIGTERM) and a hang-up all stop the running configuration and exit 4."""
    name = f"probe-{stop.name.lower()}"
    path = preset(tmp_path, name=name, options=", step_time_s: 0.05")
    probe = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "probe", "--trust", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        poll_until(lambda: a_configuration_runs(name), 180)
        probe.send_signal(stop)
        out, err = probe.communicate(timeout=180)
        assert probe.returncode == 4, err
        assert "Traceback" not in err and "nothing of it is left running" in out
        assert_stopped_with_nothing_left(name)
    except BaseException:
        stop_what_is_left(name)
        raise
    finally:
        if probe.poll() is None:
            probe.kill()


@pytest.mark.slow
def test_a_dropped_terminal_stops_the_probe_like_ctrl_c(tmp_path):
    """The probe in a terminal of its own (an SSH login, a tmux pane) that goes away: the kernel hangs it up (SIGHUP)
    and every later write fails; the probe still stops its configuration, keeps probe.json and exits 4."""
    name = "probe-hangup"
    path = preset(tmp_path, name=name, options=", step_time_s: 0.05")
    terminal, pane = pty.openpty()
    probe = subprocess.Popen(
        ["setsid", "--ctty", "--wait", sys.executable, "-m", "gpuwizard", "probe", "--trust", str(path)],
        stdin=pane,
        stdout=pane,
        stderr=pane,
    )
    os.close(pane)
    os.set_blocking(terminal, False)
    shown = bytearray()

    def read_and_check() -> bool:
        try:
            shown.extend(os.read(terminal, 65536))
        except (BlockingIOError, OSError):
            pass
        return a_configuration_runs(name)

    try:
        poll_until(read_and_check, 180, lambda: shown.decode(errors="replace"))
        assert b"running 1 x batch 4" in shown
        os.close(terminal)  # the terminal goes: SIGHUP to the probe, and its stdout and stderr fail from now on
        assert probe.wait(timeout=180) == 4
        assert_stopped_with_nothing_left(name)
    except BaseException:
        stop_what_is_left(name)
        raise
    finally:
        if probe.poll() is None:
            probe.kill()


def test_bad_probe_flags_get_one_paragraph_each(gw, tmp_path):
    path = preset(tmp_path)
    for flags, field in (
        (["--budget", "soon"], "--budget = 'soon'"),
        (["--budget", "-5m"], "--budget = '-5m'"),
        (["--budget=-5m"], "--budget = '-5m': must be more than zero"),
        (["--gpus", "0,2"], "--gpus = '0,2'"),
        (["--batch", "big"], "--batch = 'big'"),
        (["--headroom", "1.5"], "--headroom = 1.5"),
    ):
        result = gw("probe", "--trust", path, *flags)
        assert result.code == 2 and result.err.count("\n") == 1, result.err
        assert field in result.err and "Fix:" in result.err and "Traceback" not in result.err


@pytest.mark.slow
@pytest.mark.slurm
def test_probe_on_slurm_submits_each_configuration_and_measures_it(tmp_path):

    if not cluster_answers():
        reason = "no SLURM cluster answers: start one with scripts/slurm-local.sh and export its SLURM_CONF"
        if os.environ.get("GPUWIZARD_REQUIRE_SLURM"):
            pytest.fail(reason)
        pytest.skip(reason)
    from gpuwizard.demo.dataset import ensure_dataset

    ensure_dataset(tmp_path / "dataset", 4)  # the nodes share this disk: written once, up front
    path = preset(tmp_path, name="probe-slurm")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwizard",
            "probe",
            "--trust",
            str(path),
            "--slurm",
            "--gpus",
            "1",
            "--batch",
            "4,8",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    probe = json.loads(done.stdout)
    assert [(r["per_device_batch"], r["outcome"]) for r in probe["rows"]] == [(4, "measured"), (8, "measured")]
    runs = [e.status for e in list_runs("probe-slurm")]
    assert len(runs) == 2 and all(s.slurm_job_id and s.probe == probe["probe_id"] for s in runs)
