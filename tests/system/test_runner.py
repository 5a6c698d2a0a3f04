"""Real torchrun jobs (gloo on CPU) through the real `gpuwizard` entry point."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwizard.runner.host.procs import read_environ
from gpuwizard.runner.host.targets import SUPERVISOR
from gpuwizard.runner.launch.prepare import launcher_problems
from gpuwizard.runs.records import Event, GpuSample, RanksSample, parse_lines
from gpuwizard.runs.rundir import RunDir, alive_processes, list_runs, run_processes
from support.cli import gw_subprocess, poll_until
from support.data import DATA
from support.presets import DEMO
from support.runs import events_of, hand_made_run, status_record

pytestmark = pytest.mark.slow


@pytest.fixture
def demo_preset(tmp_path):
    def make(name="demo-test", gpus=2, steps=60, options="", hang=30, extra="", lr="1.0e-3"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            DEMO.format(name=name, gpus=gpus, steps=steps, root=tmp_path, options=options, hang=hang, lr=lr) + extra
        )
        return path

    return make


def all_runs() -> list[RunDir]:
    return [entry.run for entry in list_runs()]


def only_run() -> RunDir:
    runs = all_runs()
    assert runs, "a run folder was created"
    return runs[0]


def lines_of(path, kind):
    records, bad = parse_lines(path.read_text(), kind)
    assert bad == 0, f"{bad} unreadable lines in {path.name}"
    return records


def rank_pids(run: RunDir) -> set[int]:
    return {r.pid for sample in lines_of(run.ranks_file, RanksSample) for r in sample.ranks}


def current_step(run: RunDir) -> int:
    progress = run.progress()
    return progress.step or 0 if progress else 0


def assert_nothing_left(run: RunDir) -> None:
    """No process of the run remains; the supervisor may take a moment to exit after writing its final status."""
    status = run.status()
    assert status.survivors == []
    assert len(run_processes(run, status)) >= 2 + status.world_size, "supervisor, launcher and every rank are known"

    def alive() -> list[int]:
        return alive_processes(run, status)

    poll_until(lambda: not alive(), 5, lambda: f"processes of the run still alive: {alive()}", every=0.05)


def test_demo_completes_with_progress_and_checkpoint(demo_preset, tmp_path):
    path = demo_preset()
    path.write_text(path.read_text().replace(f"output_dir: {tmp_path}/out-demo-test\n", ""))  # a folder per run
    single = gw_subprocess("run", "--trust", path, "--headless", "--gpus", "1", timeout=180, cwd=tmp_path)
    assert single.returncode == 0, single.stdout + single.stderr
    result = gw_subprocess("run", "--trust", path, "--headless", timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "never finished green" not in result.stderr, "the one-GPU baseline above finished green"
    assert "step 60/60" in result.stdout and "finished green" in result.stdout
    run = only_run()
    status, progress = run.status(), run.progress()
    assert (status.state, status.exit_code, status.world_size) == ("finished", 0, 2)
    assert (progress.step, progress.total, progress.finished) == (60, 60, True)
    assert progress.loss is not None and progress.lr == pytest.approx(1e-3) and progress.samples_per_s > 0
    assert run.job().output_dir == str(tmp_path / "outputs" / "train" / "demo-test" / run.run_id)
    assert (Path(run.job().output_dir) / "checkpoints" / "000060" / "model.pt").is_file()
    assert run.events() == ([], 0)
    assert "Effective batch size: 4 x 2 workers x 1 grad accum = 8" in run.log.read_text()
    for name in ("preset.yaml", "command.json", "plan.json", "log.txt", "status.json", "ranks.jsonl"):
        assert (run.path / name).is_file()
    assert json.loads((run.path / "command.json").read_text())["argv"][0].endswith("torchrun")
    assert_nothing_left(run)
    history = json.loads(gw_subprocess("runs", "--json").stdout)
    assert [r["state"] for r in history] == ["finished", "finished"] and history[0]["baseline_green"] is True


def test_injected_hang_is_detected_and_the_job_stopped(demo_preset):
    timeout = 4
    path = demo_preset(name="demo-hang", steps=2000, options="  inject_hang: {rank: 1, step: 25}", hang=timeout)
    result = gw_subprocess("run", "--trust", path, "--headless", timeout=180)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "hang suspected" in result.stdout
    run = only_run()
    hang = [e for e in events_of(run) if e.kind == "hang_suspected"]
    assert len(hang) == 1
    assert hang[0].data["stale_s"] <= timeout + 3
    assert hang[0].rank == 1, hang[0].detail
    assert "rank 1" in hang[0].suggestion
    assert run.status().state == "hung"
    assert_nothing_left(run)


def test_injected_crash_reports_the_rank_and_error(demo_preset):
    path = demo_preset(name="demo-crash", steps=200, options="  inject_crash: {rank: 1, step: 12}")
    result = gw_subprocess("run", "--trust", path, "--headless", timeout=180)
    assert result.returncode == 1
    run = only_run()
    failed = [e for e in events_of(run) if e.kind == "rank_failed"]
    assert len(failed) == 1 and failed[0].rank == 1
    assert failed[0].data["error"] == "RuntimeError: injected crash at step 12 on rank 1"
    assert "rank 1 failed" in result.stdout
    assert_nothing_left(run)


def test_ctrl_c_stops_every_process(demo_preset):
    path = demo_preset(name="demo-stop", steps=5000, options="  step_time_s: 0.05")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", "--trust", str(path), "--headless"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    poll_until(lambda: all_runs() and current_step(all_runs()[0]), 90)
    run = only_run()
    assert rank_pids(run), "ranks were seen"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 4, out + err
    assert "stopped by the user" in out
    assert run.status().state == "stopped"
    assert_nothing_left(run)


def test_killed_wizard_leaves_the_job_running_and_attach_finds_it(demo_preset):
    path = demo_preset(name="demo-detach", steps=150, options="  step_time_s: 0.05")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", "--trust", str(path), "--headless"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    poll_until(lambda: all_runs() and all_runs()[0].status().state == "running", 60)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    run = only_run()
    assert run.is_active(), "the supervisor outlives the killed wizard"
    step_before = current_step(run)
    poll_until(lambda: current_step(run) > step_before, 60)
    listed = json.loads(gw_subprocess("runs", "--json").stdout)
    assert listed[0]["run_id"] == run.run_id and listed[0]["state"] == "running"
    attached = gw_subprocess("attach", "--headless", timeout=180)
    assert attached.returncode == 0, attached.stdout + attached.stderr
    assert f"attached to {run.run_id}" in attached.stdout and "finished green" in attached.stdout
    assert_nothing_left(run)


def test_lr_mismatch_is_reported(demo_preset):
    preset = demo_preset(name="demo-lr", steps=40, options="  ignore_lr_flag: true", lr="2.5e-4")
    result = gw_subprocess("run", "--trust", preset, "--headless", timeout=180)
    assert result.returncode == 1, result.stdout + result.stderr
    mismatch = [e for e in events_of(only_run()) if e.kind == "lr_mismatch"]
    assert len(mismatch) == 1
    assert mismatch[0].data["logged"] == pytest.approx(1e-3) and mismatch[0].data["expected"] == pytest.approx(2.5e-4)
    assert "lr mismatch" in result.stdout and "failed (job exit code 0): lr mismatch" in result.stdout
    assert only_run().status().state == "failed"


def test_smoke_run_is_short_and_small(demo_preset):
    result = gw_subprocess(
        "run", "--trust", demo_preset(name="demo-smoke", steps=5000), "--headless", "--smoke", timeout=180
    )
    assert result.returncode == 0
    run = only_run()
    assert run.status().smoke is True and run.progress().step == 50
    argv = json.loads((run.path / "command.json").read_text())["argv"]
    assert "--steps=50" in argv and "--batch-size=2" in argv
    assert (run.path / "output" / "checkpoints" / "000050" / "model.pt").is_file()


def test_the_rendezvous_store_is_the_jobs_own_and_a_taken_port_does_not_matter(demo_preset):
    """A process that binds the port gpuwizard would once have probed can no longer become the job's store."""
    import psutil

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        path = demo_preset(
            name="demo-port", steps=5000, options="  step_time_s: 0.05", extra=f"launch: {{master_port: {port}}}\n"
        )
        proc = start_headless(path)
        poll_until(lambda: all_runs() and current_step(all_runs()[0]) >= 3, 90)
        run = only_run()
        status = run.status()
        ranks = lines_of(run.ranks_file, RanksSample)[-1].ranks
        master_ports = {int(read_environ(r.pid)["MASTER_PORT"]) for r in ranks}
        listening = {
            c.laddr.port
            for c in psutil.Process(status.job.pid).net_connections("tcp")
            if c.status == psutil.CONN_LISTEN
        }
        assert len(master_ports) == 1 and master_ports <= listening and port not in master_ports
        assert gw_subprocess("stop", run.run_id, timeout=120).returncode == 0
    out, err = proc.communicate(timeout=60)
    assert "launch.master_port = " in err and "is not used" in err


def test_missing_interpreter_and_launcher_are_clear_errors(demo_preset, tmp_path):
    result = gw_subprocess(
        "run", "--trust", demo_preset(name="demo-py", extra="launch: {python: /nonexistent/bin/python}\n"), "--headless"
    )
    assert result.returncode == 2 and "launch.python = '/nonexistent/bin/python'" in result.stderr
    problems = launcher_problems(["uv", "run", "torchrun"], {"PATH": str(tmp_path)})
    assert problems and "`uv` is not on PATH" in problems[0].paragraph()
    assert launcher_problems([sys.executable], {"PATH": ""}) == []


def test_unwritable_run_folder_is_a_clear_error(demo_preset, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    result = gw_subprocess(
        "run", "--trust", demo_preset(name="demo-dir"), "--headless", env={"GPUWIZARD_DATA_DIR": str(blocker / "data")}
    )
    assert result.returncode == 2 and "run folder" in result.stderr and "GPUWIZARD_DATA_DIR" in result.stderr


GPU_JOB = """\
import time
from pathlib import Path
for step in range(1, 8):
    print(f"[demo] step {step}/7 loss=0.5 lr=1.000e-03 samples/s=10.0", flush=True)
    time.sleep(0.8)
"""


def test_supervisor_samples_gpus_off_its_loop_and_reports_a_lost_device_once(tmp_path):
    """The GPU path of the real supervisor over a recorded L40S that falls off the bus mid-run (NVML replay)."""

    run = hand_made_run(tmp_path / "20261129-000000-gpu-replay", [sys.executable, "-c", GPU_JOB], device="cuda")
    env = {**os.environ, "GPUWIZARD_NVML_REPLAY": str(DATA / "nvml" / "l40s_lost_midrun.json")}
    done = subprocess.run(
        [sys.executable, "-m", SUPERVISOR, str(run.path)],
        env=env,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    samples = lines_of(run.gpu_file, GpuSample)
    assert [s.lost for s in samples[:4]] == [False, False, False, True], (
        "the recording answers three times, then the device is lost"
    )
    assert samples[0].run_memory_mb == 0.0, "the job's pids hold nothing in the recording"
    lost = [e for e in events_of(run) if e.kind == "gpu_lost"]
    assert len(lost) == 1 and "GPU 0 fell off the bus" in lost[0].title
    status = run.status()
    assert status.state == "finished" and status.gpu_memory_held_mb == {}


def start_headless(path, *extra) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", "--trust", str(path), "--headless", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_env_flag_reaches_the_job_and_bad_ones_are_refused(demo_preset):
    path = demo_preset(name="demo-env", steps=10)
    bad = gw_subprocess("run", "--trust", path, "--headless", "--env", "1BAD=x")
    assert bad.returncode == 2 and "--env = '1BAD=x'" in bad.stderr and all_runs() == []
    result = gw_subprocess("run", "--trust", path, "--headless", "--env", "GPUWIZARD_TEST_MARK=on the job", timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    job = only_run().job()
    assert job.env["GPUWIZARD_TEST_MARK"] == "on the job"
    assert "GPUWIZARD_TEST_MARK" in only_run().status().command


def test_stop_works_after_the_supervisor_was_killed(demo_preset):
    proc = start_headless(demo_preset(name="demo-orphan", steps=5000, options="  step_time_s: 0.05"))
    poll_until(lambda: all_runs() and current_step(all_runs()[0]) >= 5, 90)
    os.killpg(proc.pid, signal.SIGKILL)  # the terminal is gone too: nobody watches the run
    proc.communicate(timeout=30)
    run = only_run()
    status = run.status()
    os.kill(status.supervisor.pid, signal.SIGKILL)
    poll_until(lambda: not status.supervisor.alive(), 10)
    assert run.status().state == "running", "nobody wrote the end: the status still claims a running job"
    stopped = gw_subprocess("stop", run.run_id, timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "nothing of it is left" in stopped.stdout
    assert run.status().state == "stopped" and alive_processes(run, run.status()) == []
    assert "lost" not in gw_subprocess("runs").stdout


def test_headless_run_stops_the_job_when_its_supervisor_dies(demo_preset):
    proc = start_headless(demo_preset(name="demo-lost", steps=5000, options="  step_time_s: 0.05"))
    poll_until(lambda: all_runs() and current_step(all_runs()[0]) >= 5, 90)
    run = only_run()
    status = run.status()
    os.kill(status.supervisor.pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "supervisor is gone; stopping every process of the run" in out, out + err
    assert run.status().state == "stopped" and alive_processes(run, status) == []


def test_sigusr1_dumps_every_ranks_stack(demo_preset):
    from shutil import which

    if which("py-spy", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")) is None:
        pytest.skip("py-spy is installed by the dev extra")
    proc = start_headless(demo_preset(name="demo-dump", steps=5000, options="  step_time_s: 0.05"))
    poll_until(lambda: all_runs() and current_step(all_runs()[0]) >= 5, 90)
    run = only_run()
    os.kill(run.status().supervisor.pid, signal.SIGUSR1)
    poll_until(lambda: any(e.kind == "stack_dump" for e in events_of(run)), 90)
    dump = next(e for e in events_of(run) if e.kind == "stack_dump")
    assert dump.data["ok"] and sorted(dump.data["per_rank"]) == ["0", "1"], dump.data
    assert sorted(p.name for p in run.stacks_dir.iterdir()) == ["rank0.json", "rank1.json"]
    assert gw_subprocess("stop", run.run_id, timeout=120).returncode == 0
    proc.communicate(timeout=60)


def test_a_job_that_fails_to_start_says_why(tmp_path, gw):
    run = hand_made_run(tmp_path / "data" / "runs" / "20261129-000000-nostart", [str(tmp_path / "no-such-launcher")])
    done = subprocess.run(
        [sys.executable, "-m", SUPERVISOR, str(run.path)],
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 127
    status = run.status()
    assert (status.state, status.exit_code) == ("failed", 127) and "could not start" in status.error
    assert "No such file" in status.error and "could not start" in run.log.read_text()
    attached = gw("attach", run.run_id, "--headless")
    assert attached.code == 127 and "failed (job exit code 127): could not start" in attached.out


def test_ranks_stop_on_their_own_when_the_supervisor_is_killed(demo_preset):
    """kill -9 of the supervisor (no headless follower, no `stop`): torchrun gets its parent-death signal and stops
    every rank, so nothing trains on unsupervised; `runs` then shows the run as lost."""
    proc = start_headless(demo_preset(name="demo-pdeath", steps=5000, options="  step_time_s: 0.05"))
    poll_until(lambda: all_runs() and current_step(all_runs()[0]) >= 5, 90)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    run = only_run()
    status = run.status()
    assert len(run_processes(run, status)) == 4, "supervisor, torchrun and two ranks are known"
    os.kill(status.supervisor.pid, signal.SIGKILL)
    poll_until(lambda: alive_processes(run, status) == [], 60, lambda: alive_processes(run, status))
    assert json.loads(gw_subprocess("runs", "--json").stdout)[0]["state"] == "lost"


def test_secrets_reach_the_job_by_environment_and_never_the_run_folder(demo_preset, tmp_path):
    token, key = "hf_s3cr3t_value_81f2", "sk-another-secret-77aa"
    path = demo_preset(
        name="demo-secret",
        steps=5000,
        options="  step_time_s: 0.05",
        extra=f"launch: {{env: {{HF_TOKEN: {token}, PLAIN_VAR: visible}}}}\n",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", "--trust", str(path), "--headless", "--env", "OPENAI_API_KEY"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "OPENAI_API_KEY": key},
    )
    poll_until(lambda: all_runs() and current_step(all_runs()[0]) >= 3, 90)
    run = only_run()
    rank = lines_of(run.ranks_file, RanksSample)[-1].ranks[0]
    environ = read_environ(rank.pid)
    assert (environ["HF_TOKEN"], environ["OPENAI_API_KEY"], environ["PLAIN_VAR"]) == (token, key, "visible")
    assert gw_subprocess("stop", run.run_id, timeout=120).returncode == 0
    out, err = proc.communicate(timeout=60)
    assert os.stat(run.path).st_mode & 0o777 == 0o700
    for file in run.path.rglob("*"):
        if file.is_file():
            text = file.read_bytes()
            assert token.encode() not in text and key.encode() not in text, file.name
            assert file.stat().st_mode & 0o077 == 0, f"{file.name} is readable by others"
    assert token not in out + err and key not in out + err
    assert run.job().env.get("PLAIN_VAR") == "visible" and "HF_TOKEN" not in run.job().env
    assert 'HF_TOKEN="$HF_TOKEN"' in run.status().command
    preview = gw_subprocess("preview", path)
    assert token not in preview.stdout and 'HF_TOKEN="$HF_TOKEN"' in preview.stdout
    script = gw_subprocess("preview", path, "--format", "script").stdout
    assert 'export HF_TOKEN="${HF_TOKEN:?set HF_TOKEN in your environment}"' in script and token not in script


def test_a_second_run_on_the_same_output_dir_is_refused(demo_preset):
    path = demo_preset(name="demo-shared", steps=5000, options="  step_time_s: 0.05")
    path.write_text(path.read_text().replace("  save_every: 30\n", ""))  # no checkpoint in the way of the last run
    proc = start_headless(path)
    poll_until(lambda: all_runs() and current_step(all_runs()[0]) >= 2, 90)
    first = only_run()
    second = gw_subprocess("run", "--trust", path, "--headless")
    assert second.returncode == 2 and "Traceback" not in second.stderr
    assert "output_dir = " in second.stderr and f"run {first.run_id} is still writing to this folder" in second.stderr
    assert len(all_runs()) == 1
    smoke = gw_subprocess("run", "--trust", path, "--headless", "--smoke", timeout=180)
    assert smoke.returncode == 0, "a smoke run writes into its own run folder"
    assert gw_subprocess("stop", first.run_id, timeout=120).returncode == 0
    proc.communicate(timeout=60)
    again = gw_subprocess("run", "--trust", demo_preset(name="demo-shared", steps=10), "--headless", timeout=180)
    assert again.returncode == 0, again.stdout + again.stderr


def test_the_loss_turning_nan_is_an_event_and_a_failed_run(demo_preset):
    result = gw_subprocess(
        "run",
        "--trust",
        demo_preset(name="demo-nan", steps=2000, options="  step_time_s: 0.02\n  inject_nan: 20"),
        "--headless",
        timeout=180,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    run = only_run()
    status = run.status()
    assert status.state == "failed" and status.error.startswith("loss became nan at step")
    events = [e for e in events_of(run) if e.kind == "loss_nonfinite"]
    assert len(events) == 1 and "lr" in events[0].suggestion
    assert run.progress().step < 2000 and alive_processes(run, status) == []


def test_a_stopped_rank_is_named_as_the_suspect(demo_preset):
    """One rank frozen with SIGSTOP: the hang event names it (its stack cannot be read, its process is stopped),
    not 'every rank is inside a collective'."""
    proc = start_headless(demo_preset(name="demo-sigstop", steps=5000, options="  step_time_s: 0.02", hang=4))
    poll_until(lambda: all_runs() and current_step(all_runs()[0]) >= 5, 90)
    run = only_run()
    rank1 = next(r for r in lines_of(run.ranks_file, RanksSample)[-1].ranks if r.rank == 1)
    os.kill(rank1.pid, signal.SIGSTOP)
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        if rank1.ref and rank1.ref.alive():
            os.kill(rank1.pid, signal.SIGCONT)
    assert proc.returncode == 3, out + err
    hang = next(e for e in events_of(run) if e.kind == "hang_suspected")
    assert hang.rank == 1, hang.detail
    assert "stopped" in hang.detail and "every rank is inside a collective" not in hang.detail
    assert alive_processes(run, run.status()) == []


def test_attach_log_prints_the_whole_log_of_a_finished_run(demo_preset, gw):
    from gpuwizard.core import paths

    run_dir = paths.runs_dir() / "20261129-120000-long"
    shutil.copytree(DATA / "runs" / "20261129-120000-demo-cpu", run_dir)
    status = json.loads((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(json.dumps(status | {"run_id": run_dir.name}))
    (run_dir / "log.txt").write_text("".join(f"line {i} of a long log\n" for i in range(100_075)))
    result = gw("attach", run_dir.name, "--headless", "--log")
    lines = result.out.splitlines()
    assert result.code == 0 and "line 0 of a long log" in lines and "line 100074 of a long log" in lines
    assert sum(line.endswith("of a long log") for line in lines) == 100_075


@pytest.mark.parametrize("delay", [0.4, 0.8, 1.2, 1.8])
def test_ctrl_c_during_start_up_leaves_nothing_running(demo_preset, delay):
    """SIGINT while `run` is still starting the job (planning, spawning the supervisor, waiting for the launch)."""
    proc = start_headless(demo_preset(name=f"demo-int-{int(delay * 10)}", steps=5000, options="  step_time_s: 0.05"))
    time.sleep(delay)  # the point of interruption is the variable under test, not a wait for a condition
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    before_python = proc.returncode == -signal.SIGINT and not out and not err
    # on a loaded machine the signal can land before the interpreter installs its handler: killed, nothing started
    assert proc.returncode in (4, 130) or (before_python and all_runs() == []), (proc.returncode, out + err)
    assert "Traceback" not in err
    for run in all_runs():
        poll_until(
            lambda run=run: alive_processes(run, run.status()) == [],
            30,
            lambda run=run: alive_processes(run, run.status()),
        )


def test_a_user_stop_is_not_overridden_by_a_hang_found_while_stopping(tmp_path, monkeypatch):
    from gpuwizard.runner.detect.detectors import JobMonitor
    from gpuwizard.runner.supervise import supervisor as supervisor_module
    from gpuwizard.runs.events import Stacks
    from gpuwizard.trainers.registry import get_trainer

    run = hand_made_run(tmp_path / "20261129-000000-stop-vs-hang", ["true"], world_size=2, hang_timeout_s=3.0)
    expect = run.job().expect
    monkeypatch.setattr(
        supervisor_module,
        "dump_stacks",
        lambda ranks, out: Stacks(ok=False, note="no ranks", per_rank={}, outside_collective=[], files=[]),
    )
    sup = supervisor_module.Supervisor(run)
    sup.request_stop(signal.SIGTERM, None)
    sup.handle_hang(
        JobMonitor(expect, get_trainer("demo")), Event(kind="hang_suspected", severity="error", title="hang")
    )
    assert sup.stop.reason == "user"
    fresh = supervisor_module.Supervisor(run)
    fresh.handle_hang(
        JobMonitor(expect, get_trainer("demo")), Event(kind="hang_suspected", severity="error", title="hang")
    )
    assert fresh.stop.reason == "hang", "without a user stop, on_hang: stop stops for the hang"


def test_a_full_disk_does_not_kill_the_supervisor_and_the_reason_is_kept(tmp_path, monkeypatch):
    """Writes to the run folder that fail (ENOSPC) leave the job watched to its end; the first failure is the reason."""
    import errno

    from gpuwizard.runner.supervise import supervisor as supervisor_module

    run = hand_made_run(tmp_path / "20261129-000000-full-disk", [sys.executable, "-c", GPU_JOB.replace("0.8", "0.05")])
    real_write = RunDir.write

    def full(self, name, record):
        if name == "progress.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, name, record)

    monkeypatch.setattr(RunDir, "write", full)
    umask = os.umask(0o022)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)}
    try:
        code = supervisor_module.Supervisor(run).run_forever()  # in this process, so the write can fail on cue
    finally:
        os.umask(umask)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    status = run.status()
    assert code == 0 and status.state == "finished"
    assert status.error == "disk full: could not write the run folder: No space left on device"


def test_process_counts_are_capped_before_anything_starts(gw, demo_preset):
    huge = gw("run", "--trust", demo_preset(name="demo-huge"), "--headless", "--gpus", "99999999999999999999")
    assert huge.code == 2 and "--gpus = 99999999999999999999: must be at most 1024" in huge.err
    cores = os.cpu_count() or 1
    many = gw("run", "--trust", demo_preset(name="demo-many"), "--headless", "--gpus", str(cores + 1))
    assert many.code == 2 and f"this machine has {cores} cores" in many.err
    assert all_runs() == []


def test_a_finished_runs_elapsed_time_stops_at_its_end():
    from gpuwizard.runner.control.follow import status_line

    status = status_record(steps=10, created=100.0, started=100.0, ended=160.0, state="finished")
    assert status_line(None, status, now=10_000.0).startswith("[01:00]  finished")
    running = status.model_copy(update={"state": "running", "ended": None})
    assert status_line(None, running, now=220.0).startswith("[02:00]  running")


def test_a_failed_run_resumes_from_its_checkpoint_and_ends_where_an_uninterrupted_one_does(demo_preset):
    """The demo trainer resumes weights, optimizer, schedule, step and each rank's sampler: a run that crashed at step
    45 (checkpoint at 40) and was resumed ends with the weights of a run that never stopped."""
    crashing = demo_preset(
        name="demo-resume", steps=80, options="  save_every: 20\n  inject_crash: {rank: 1, step: 45}"
    )
    crashing.write_text(crashing.read_text().replace("  save_every: 30\n", ""))
    first = gw_subprocess("run", "--trust", crashing, "--headless", timeout=240)
    assert first.returncode != 0 and "failed" in first.stdout, first.stdout + first.stderr
    crashed = only_run()
    fixed = demo_preset(name="demo-resume", steps=80, options="  save_every: 20")
    fixed.write_text(fixed.read_text().replace("  save_every: 30\n", ""))
    resumed = gw_subprocess("run", "--trust", fixed, "--headless", "--resume", timeout=240)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    out = Path(crashing.parent, "out-demo-resume")
    assert (
        f"resuming from {(out / 'checkpoints' / '000040').resolve()}, continuing run {crashed.run_id}" in resumed.stdout
    )
    second = all_runs()[0]
    assert second.status().resumed_from == crashed.run_id and second.status().state == "finished"
    log = second.log.read_text()
    assert "Resuming from step 40" in log and "step 45/80" in log and "step 5/80" not in log
    assert second.progress().step == 80, "progress continues from the checkpoint's step to the planned total"
    listing = gw_subprocess("runs").stdout
    assert f"<- resumes {crashed.run_id}" in listing

    straight = demo_preset(name="demo-straight", steps=80, options="  save_every: 20")
    straight.write_text(straight.read_text().replace("  save_every: 30\n", ""))
    assert gw_subprocess("run", "--trust", straight, "--headless", timeout=240).returncode == 0
    import torch

    resumed_state = torch.load(out / "checkpoints" / "last" / "model.pt", weights_only=True)
    straight_state = torch.load(
        Path(straight.parent, "out-demo-straight", "checkpoints", "last", "model.pt"), weights_only=True
    )
    assert resumed_state["step"] == straight_state["step"] == 80
    for name, tensor in straight_state["model"].items():
        assert torch.allclose(resumed_state["model"][name], tensor, atol=1e-6), name


def test_resume_without_a_checkpoint_is_refused_in_one_paragraph(demo_preset):
    path = demo_preset(name="demo-nothing", steps=10)
    result = gw_subprocess("run", "--trust", path, "--headless", "--resume")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "--resume: there is no demo checkpoint in" in result.stderr
    assert all_runs() == []
    smoke = gw_subprocess("run", "--trust", path, "--headless", "--resume", "--smoke")
    assert smoke.returncode == 2 and "a smoke run is a fresh 50-step repro and cannot resume" in smoke.stderr
