"""SLURM: the batch script, and real jobs on the two-node local cluster (scripts/slurm-local.sh,
shared/reference/slurm.md). Tests marked `slurm` run when a cluster answers (`sinfo` with $SLURM_CONF) and are
skipped otherwise; GPUWIZARD_REQUIRE_SLURM=1 (set by .ci/run) turns the skip into a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwizard.runs.rundir import RunDir, list_runs
from support.cli import gw_subprocess, poll_until
from support.data import DATA
from support.runs import newest_run
from support.slurm import GPU_2NODE

DEMO = """\
version: 1
name: {name}
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 1, device: cpu, nodes: {nodes}}}
batch: {{size: 4}}
optim: {{steps: {steps}}}
mixed_precision: "no"
output_dir: {root}/out-{name}
trainer_options: {{log_every: 5, step_time_s: 0.05}}
monitor: {{hang_timeout_s: 120}}
{extra}"""


def test_the_sbatch_preview_is_a_script_a_cluster_user_recognises(gw, write_preset):
    result = gw("preview", write_preset(GPU_2NODE), "--format", "sbatch")
    assert result.code == 0, result.err
    script = result.out
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=act-2node",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --cpus-per-task=32",
        "#SBATCH --time=04:00:00",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=robotics",
        "#SBATCH --output=%x-%j.out",
        "#SBATCH --constraint=h100",
        "#SBATCH --qos=high",
    ]
    lines = script.splitlines()
    setup = lines.index("module load cuda/12.4")
    assert lines[setup + 1] == "source ~/venvs/lerobot/bin/activate"
    head = lines.index('head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)')
    srun = next(i for i, line in enumerate(lines) if line.startswith("srun "))
    assert setup < head < srun, "setup, then the head node, then the launcher"
    launch = " ".join(line.rstrip("\\").strip() for line in lines[srun:])
    for word in ('"--nnodes=$SLURM_NNODES"', '"--rdzv-id=$SLURM_JOB_ID"', '"--rdzv-endpoint=$head_addr:29500"'):
        assert word in launch
    assert "--nproc-per-node=4" in launch and "--rdzv-backend=c10d" in launch and "--node-rank" not in launch
    assert "export NCCL_DEBUG=WARN" in lines and "# export NCCL_SOCKET_IFNAME=..." in lines
    assert 'export HF_TOKEN="${HF_TOKEN:?set HF_TOKEN in the environment you submit from}"' in lines
    assert "hf_secret_value_123" not in script
    check = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_slurm_bad_input_is_one_paragraph(gw, write_preset, tmp_path):
    text = DEMO.format(name="demo-bad", root=tmp_path, nodes=2, steps=10, extra="")
    no_slurm = {"PATH": str(Path(sys.executable).parent)}  # the venv's tools only: no SLURM client
    missing = gw_subprocess("run", "--trust", write_preset(text), "--slurm", "--headless", env=no_slurm)
    assert missing.returncode == 2 and "--slurm: sbatch is not installed on this machine" in missing.stderr
    assert missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
    local = gw("plan", write_preset(text))
    assert local.code == 2 and "hardware.rdzv_endpoint" in local.err and "run --slurm" in local.err, (
        "a local multi-node run needs node 0's endpoint; SLURM finds the head itself"
    )
    groot = (
        GPU_2NODE.replace("trainer: lerobot", "trainer: groot")
        .replace("policy: act", "policy: groot")
        .replace("dataset: {repo_id: me/so100_pick}", "dataset: {root: /data/so100}")
        .replace(
            "trainer_options: {api: main}",
            "trainer_options: {base_model_path: nvidia/GR00T-N1.7-3B, embodiment_tag: NEW_EMBODIMENT, "
            "modality_config_path: so100_config.py}",
        )
    )
    assert (
        "launch_finetune.py is documented for one node only"
        in gw("preview", write_preset(groot), "--format", "sbatch").err
    )


@pytest.fixture
def demo_on_slurm(tmp_path, cluster):
    from gpuwizard.demo.dataset import ensure_dataset

    ensure_dataset(tmp_path / "dataset", 20)  # the nodes share this disk: written once, up front

    def make(name: str, nodes: int = 2, steps: int = 60, extra: str = "") -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(DEMO.format(name=name, root=tmp_path, nodes=nodes, steps=steps, extra=extra))
        return path

    return make


def queued(job_id: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True, timeout=30)
    return bool(out.stdout.strip())


@pytest.mark.slurm
def test_the_demo_on_two_slurm_nodes_finishes_green(demo_on_slurm):
    result = gw_subprocess("run", "--trust", demo_on_slurm("demo-slurm"), "--slurm", "--headless", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    run = newest_run()
    status = run.status()
    assert (status.state, status.exit_code, status.slurm_state) == ("finished", 0, "COMPLETED")
    assert "Effective batch size: 4 x 2 workers x 1 grad accum = 8" in run.log.read_text(), "world size 2"
    assert run.progress().step == 60 and not queued(status.slurm_job_id)
    assert status.command.startswith("sbatch ") and (run.path / "job.sbatch").is_file()
    rows = json.loads(gw_subprocess("runs", "--json").stdout)
    assert rows[0]["state"] == "finished" and rows[0]["world_size"] == 2


@pytest.mark.slurm
def test_a_slurm_run_stopped_midway_leaves_nothing_behind(demo_on_slurm, tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuwizard",
            "run",
            "--trust",
            str(demo_on_slurm("demo-long", steps=20000)),
            "--slurm",
            "--headless",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    poll_until(
        lambda: list_runs() and (newest_run().progress() or None) and (newest_run().progress().step or 0) >= 5, 300
    )
    run = newest_run()
    job_id = run.status().slurm_job_id
    stop = gw_subprocess("stop", run.run_id, timeout=180)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 4, out
    assert run.status().state == "stopped" and run.status().exit_code == 4
    assert not queued(job_id), "scancel left nothing in the queue"
    out_dir = str(tmp_path / "out-demo-long")
    poll_until(
        lambda: not subprocess.run(["pgrep", "-f", out_dir], capture_output=True).stdout.strip(),
        60,
        "no process of the job is left",
    )


@pytest.mark.slurm
def test_a_job_that_cannot_start_shows_its_pending_reason_and_is_cancelled(demo_on_slurm):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuwizard",
            "run",
            "--trust",
            str(demo_on_slurm("demo-three", nodes=3)),
            "--slurm",
            "--headless",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    poll_until(lambda: list_runs() and newest_run().status().slurm_reason is not None, 120)
    run = newest_run()
    status = run.status()
    assert status.slurm_state == "PENDING" and status.slurm_reason == "PartitionConfig"
    poll_until(lambda: any(e.kind == "slurm_pending" for e in run.events()[0]), 30)
    event = next(e for e in run.events()[0] if e.kind == "slurm_pending")
    assert "PartitionConfig: the partition can never run it as asked" in event.detail
    assert gw_subprocess("stop", run.run_id, timeout=120).returncode == 0
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 4 and f"SLURM job {status.slurm_job_id} queued: PartitionConfig" in out
    assert not queued(status.slurm_job_id) and run.status().state == "stopped"


@pytest.mark.slurm
def test_sbatch_refusals_and_a_silent_cluster_are_one_paragraph(demo_on_slurm, tmp_path):
    nowhere = demo_on_slurm("demo-nopart", extra="slurm: {partition: no-such-partition}\n")
    refused = gw_subprocess("run", "--trust", nowhere, "--slurm", "--headless")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "slurm.partition: sbatch refused the job: invalid partition specified: no-such-partition" in refused.stderr
    assert list_runs() == [], "the refused run leaves no folder"
    conf = tmp_path / "missing" / "slurm.conf"
    silent = gw_subprocess(
        "run", "--trust", demo_on_slurm("demo-silent"), "--slurm", "--headless", env={"SLURM_CONF": str(conf)}
    )
    assert silent.returncode == 2 and f"the configuration used is {conf}" in silent.stderr


def test_a_submitted_gpu_job_samples_every_node_into_the_run_folder(tmp_path):
    """The script gpuwizard submits (not the preview) starts the node sampler on every node beside the job."""
    from gpuwizard.model.preset import with_field
    from gpuwizard.model.preset_files import load_preset_file
    from gpuwizard.planning.plan import build_command, make_plan
    from gpuwizard.runner.host.slurm import batch_script

    path = tmp_path / "act-2node.yaml"
    path.write_text(GPU_2NODE)
    _, ctx = make_plan(with_field(load_preset_file(path), "launch.scheduler", "slurm"))
    run_dir = tmp_path / "runs" / "r1"
    script = batch_script(ctx, build_command(ctx), run_dir=run_dir)
    assert f"#SBATCH --output={run_dir / 'log.txt'}" in script.splitlines()
    sampler = next(line for line in script.splitlines() if "gpuwizard.gpus.node_sampler" in line)
    assert sampler.startswith('srun --overlap --nodes="$SLURM_NNODES" --ntasks-per-node=1 ') and sampler.endswith(
        f"{run_dir} &"
    )
    assert subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True).returncode == 0


@pytest.mark.slurm
def test_the_node_sampler_writes_one_file_per_node(cluster, tmp_path):
    """srun on both nodes of the local cluster, NVML replayed from a recorded 2x4090 workstation."""
    recording = DATA / "nvml" / "workstation_2x4090.json"
    result = subprocess.run(
        ["srun", "--nodes=2", "--ntasks-per-node=1", sys.executable, "-m", "gpuwizard.gpus.node_sampler", str(tmp_path)]
        + ["--samples=2", "--interval=0.2"],
        env={**os.environ, "GPUWIZARD_NVML_REPLAY": str(recording)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    from gpuwizard.runs.records import GpuSample, parse_lines

    for node in ("n1", "n2"):
        samples, bad = parse_lines((tmp_path / f"gpu-{node}.jsonl").read_text(), GpuSample)
        assert bad == 0 and {s.node for s in samples} == {node} and {s.index for s in samples} == {0, 1}
        assert len(samples) == 4, "2 rounds x 2 GPUs"


FOUR_RUNS = ("--set", "optim.lr=1e-4,2e-4", "--seeds", "2")


def slurm_sweep(demo_on_slurm, tmp_path: Path, steps: int, grid: tuple[str, ...] = FOUR_RUNS, extra: str = "") -> Path:
    """A demo sweep (by default 4 runs: 2 learning rates x 2 seeds) of a SLURM preset: one node, one process each,
    each run its own output folder."""
    from gpuwizard.runs.sweeps import sweeps_dir

    preset = demo_on_slurm("demo-sweep", nodes=1, steps=steps, extra=extra)
    text = preset.read_text().replace(f"output_dir: {tmp_path}/out-demo-sweep\n", "launch: {scheduler: slurm}\n")
    preset.write_text(text)
    started = gw_subprocess("sweep", "--trust", preset, *grid, cwd=tmp_path, timeout=300)
    assert started.returncode == 0, started.stdout + started.stderr
    (folder,) = sweeps_dir().iterdir()
    return folder


def sweep_statuses(folder: Path) -> list:
    from gpuwizard.runs.sweeps import read_sweep

    return [RunDir(Path(r.run_path)).status() for r in read_sweep(folder).runs if r.run_path]


def job_fields(job_id: str) -> dict[str, str]:
    """`scontrol show job` of one job or array task, as its fields."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30)
    return dict(item.split("=", 1) for item in out.stdout.split() if "=" in item)


def array_tasks(array: str) -> dict[str, str]:
    """squeue's tasks of an array (pending ones one per line too): ARRAY_TASK -> state."""
    out = subprocess.run(
        ["squeue", "-h", "-r", "-j", array, "-o", "%i|%F|%T"], capture_output=True, text=True, timeout=30
    )
    rows = [line.split("|") for line in out.stdout.split()]
    assert all(row[1] == array for row in rows), f"one ArrayJobId: {rows}"
    return {row[0]: row[2] for row in rows}


@pytest.mark.slurm
def test_a_sweep_on_slurm_runs_as_one_array_followed_run_by_run_and_ends_compared(demo_on_slurm, tmp_path):
    """Issue 27 on SLURM: the 4 runs of one shape are one `sbatch --array=0-3` (tasks sharing one ArrayJobId, two at
    a time on the two one-CPU nodes); each run keeps its own checks, run folder, script and supervisor, follows its
    own task (its status names it) and gets its output; the sweep ends with the comparison."""
    from gpuwizard.runner.sweep.view import PENDING, looked
    from gpuwizard.runs.sweeps import read_sweep

    folder = slurm_sweep(demo_on_slurm, tmp_path, steps=20)
    seen: list[list[str]] = []

    def a_look_with_a_task_pending() -> bool:
        record = read_sweep(folder)
        seen.append([r["state"] for r in looked(record)])
        return PENDING in seen[-1] or record.ended

    # two one-CPU nodes: while two tasks train the others wait, and a look shows them pending (they read 'running'
    # from their submission); how many read running at that look is not asserted: a task SLURM has ended can still
    # read running until its supervisor records the end
    assert poll_until(a_look_with_a_task_pending, 600) and PENDING in seen[-1], seen
    poll_until(lambda: read_sweep(folder).ended, 600, lambda: read_sweep(folder).model_dump_json(indent=1))
    record = read_sweep(folder)
    assert record.slurm and [r.state for r in record.runs] == ["finished"] * 4, [r.error for r in record.runs]
    (array,) = record.arrays
    assert array.runs == [0, 1, 2, 3] and not array.held
    assert [(r.array, r.task) for r in record.runs] == [(array.job_id, t) for t in range(4)]
    statuses = sweep_statuses(folder)
    assert [s.slurm_job_id for s in statuses] == [f"{array.job_id}_{t}" for t in range(4)]
    assert all(s.slurm_state == "COMPLETED" and s.sweep == folder.name for s in statuses)
    tasks = [job_fields(s.slurm_job_id or "") for s in statuses]
    assert [(t["ArrayJobId"], t["ArrayTaskId"], t["JobState"]) for t in tasks] == [
        (array.job_id, str(i), "COMPLETED") for i in range(4)
    ]
    assert len({t["JobId"] for t in tasks}) == 4, "each task its own allocation"
    for r in record.runs:
        run = RunDir(Path(r.run_path or ""))
        assert "Effective batch size: 4 x 1 workers" in run.log.read_text(), "the task's output is in its run folder"
        assert run.progress().step == 20 and (run.path / "job.sbatch").is_file()
        assert (folder / "arrays" / array.job_id / str(r.task)).resolve() == run.path.resolve()
    commands = " ".join((RunDir(Path(r.run_path or "")).path / "job.sbatch").read_text() for r in record.runs)
    assert commands.count("--seed=1") == 2 and commands.count("--lr=0.0002") == 2, "each task ran its own run"
    listed = json.loads(gw_subprocess("runs", "--json").stdout)
    assert {row["slurm_job_id"] for row in listed} == {s.slurm_job_id for s in statuses}, "runs names each task"
    shown = gw_subprocess("sweep", "status", folder.name, cwd=tmp_path)
    assert (
        shown.returncode == 0 and "best by final loss (smoothed): #" in shown.stdout and "best run: " in shown.stdout
    ), shown.stdout + shown.stderr
    assert array_tasks(array.job_id) == {}, "nothing left in the queue"


@pytest.mark.slurm
def test_a_runs_stop_cancels_its_task_only_and_a_sweep_stop_the_whole_array(demo_on_slurm, tmp_path):
    """Four long runs on two one-CPU nodes: two tasks train, two wait. `gpuwizard stop` of one running run and of one
    waiting run cancels that task alone; `sweep stop` cancels the rest of the array and leaves nothing."""
    from gpuwizard.runs.sweeps import read_sweep

    folder = slurm_sweep(demo_on_slurm, tmp_path, steps=20000)

    def two_train() -> bool:
        statuses = sweep_statuses(folder)
        return len(statuses) == 4 and sum(s.state == "running" for s in statuses) == 2

    poll_until(two_train, 300, lambda: read_sweep(folder).model_dump_json(indent=1))
    (array,) = read_sweep(folder).arrays
    job = array.job_id
    assert array_tasks(job).keys() == {f"{job}_{t}" for t in range(4)}, "four tasks of one array"
    running = [r for r, s in zip(read_sweep(folder).runs, sweep_statuses(folder), strict=True) if s.state == "running"]
    first = running[0]
    poll_until(lambda: RunDir(Path(first.run_path or "")).progress() is not None, 300)
    stopped = gw_subprocess("stop", first.run_id, timeout=180)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert RunDir(Path(first.run_path or "")).status().state == "stopped"
    left = array_tasks(job)
    assert first.array_task not in left and len(left) == 3, f"only its task was cancelled: {left}"

    def waiting_run():
        for r, s in zip(read_sweep(folder).runs, sweep_statuses(folder), strict=True):
            if (
                r.array_task in array_tasks(job)
                and array_tasks(job)[r.array_task] == "PENDING"
                and s.state != "running"
            ):
                return r
        return None

    poll_until(lambda: waiting_run() is not None, 120, lambda: array_tasks(job))
    pending = waiting_run()
    assert gw_subprocess("stop", pending.run_id, timeout=180).returncode == 0
    poll_until(lambda: RunDir(Path(pending.run_path or "")).status().state == "stopped", 60)
    assert RunDir(Path(pending.run_path or "")).status().slurm_state == "CANCELLED", "a task cancelled while pending"
    assert len(array_tasks(job)) == 2 and pending.array_task not in array_tasks(job)

    swept = gw_subprocess("sweep", "stop", folder.name, cwd=tmp_path, timeout=300)
    assert swept.returncode == 0 and "nothing of it is left" in swept.stdout, swept.stdout + swept.stderr
    poll_until(lambda: array_tasks(job) == {}, 60, "the whole array was cancelled")
    assert [r.state for r in read_sweep(folder).runs] == ["stopped"] * 4
    assert all(s.state == "stopped" for s in sweep_statuses(folder))
    mine = str(tmp_path)
    poll_until(
        lambda: not subprocess.run(["pgrep", "-f", mine], capture_output=True).stdout.strip(),
        60,
        "no process of any run is left",
    )


@pytest.mark.slurm
def test_an_array_sbatch_refuses_fails_its_runs_with_sbatchs_own_paragraph(demo_on_slurm, tmp_path):
    from gpuwizard.runs.sweeps import read_sweep

    nowhere = "slurm: {partition: no-such-partition}\n"
    folder = slurm_sweep(demo_on_slurm, tmp_path, steps=10, grid=("--set", "optim.lr=1e-4,2e-4"), extra=nowhere)
    poll_until(lambda: read_sweep(folder).ended, 300, lambda: read_sweep(folder).model_dump_json(indent=1))
    record = read_sweep(folder)
    assert [r.state for r in record.runs] == ["failed"] * 2 and record.arrays == []
    for run in record.runs:
        assert run.run_id is None and (run.error or "").startswith(
            "slurm.partition: sbatch refused the sweep's job array: invalid partition specified: no-such-partition"
        ), run.error
        assert "`gpuwizard sweep resume`" in (run.error or "")


@pytest.mark.slurm
def test_an_array_a_killed_scheduler_left_held_runs_the_tasks_whose_runs_joined_it(cluster, tmp_path):
    """A scheduler killed while it started an array's runs leaves the array held; the next one (`sweep resume`)
    cancels the tasks no run joined and releases the rest, which run their own run's script. An array it was killed
    before recording (its folder made, sweep.json not yet written) is cancelled whole."""
    from gpuwizard.runner.host.slurm import array_script, submit
    from gpuwizard.runner.sweep.arrays import release_held
    from gpuwizard.runs.sweeps import SlurmArray, Sweep, SweepRun
    from support.runs import copied_run

    arrays = tmp_path / "sweep" / "arrays"
    script = tmp_path / "array.sbatch"
    script.write_text(array_script("held", ("#SBATCH --nodes=1",), arrays, "job.sbatch"))
    job_id, message = submit(str(script), {}, ("--hold", "--array=0-1"))
    assert job_id, message
    joined = copied_run(tmp_path, slurm_job_id=f"{job_id}_0")
    (joined.path / "job.sbatch").write_text("#!/bin/bash\necho task 0 ran the script of its run\n")
    (arrays / job_id).mkdir(parents=True)
    (arrays / job_id / "0").symlink_to(joined.path)
    runs = [
        SweepRun(index=i, values={}, preset_file="", processes=1, device="cpu", state=state, array=job_id, task=i)
        for i, state in enumerate(("running", "queued"))
    ]
    runs[0].run_id, runs[0].run_path = joined.run_id, str(joined.path)
    sweep = Sweep(sweep_id="s", preset="held", source="held", created=0.0, grid={}, workdir=str(tmp_path), runs=runs)
    sweep.arrays.append(SlurmArray(job_id=job_id, runs=[0, 1]))
    orphan, message = submit(str(script), {}, ("--hold", "--array=0-2"))
    assert orphan, message
    (arrays / orphan).mkdir()
    assert array_tasks(job_id) == {f"{job_id}_0": "PENDING", f"{job_id}_1": "PENDING"}
    release_held(tmp_path / "sweep", sweep)
    assert [(a.job_id, a.held) for a in sweep.arrays] == [(job_id, False), (orphan, False)]
    assert array_tasks(orphan) == {}, "the array no run joined was cancelled"
    poll_until(lambda: job_fields(f"{job_id}_0").get("JobState") == "COMPLETED", 120, lambda: job_fields(f"{job_id}_0"))
    assert joined.log.read_text() == "task 0 ran the script of its run\n"
    assert array_tasks(job_id) == {} and job_fields(f"{job_id}_1") == {}, "the task no run joined never ran"
