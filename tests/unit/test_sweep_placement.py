"""Issue 27: where the sweep scheduler puts each run, over a recorded 4-GPU machine (NVML replay): one device per
single-GPU run, never one another run or process holds, the rest queued; on the CPU, processes within the cores; on
SLURM, one job array per shape of the runs (the real cluster's side is in tests/system/test_slurm.py)."""

from __future__ import annotations

from typing import Literal

from gpuwizard.gpus.inventory import GpuProcess, read_inventory
from gpuwizard.model.preset import with_field
from gpuwizard.model.preset_files import load_preset
from gpuwizard.planning.plan import build_command, plan_here
from gpuwizard.runner.sweep.scheduler import adopt_unrecorded, cpu_fits, link_text, next_start, place
from gpuwizard.runs.sweeps import Sweep, SweepRun
from support.data import replay
from support.runs import copied_run


def gpu_sweep(runs: int, gpus: int = 1, device: Literal["cpu", "cuda"] = "cuda") -> Sweep:
    return Sweep(
        sweep_id="s",
        preset=f"demo-{device.replace('cuda', 'gpu')}",
        source="demo",
        created=0.0,
        grid={},
        workdir="/tmp",
        runs=[
            SweepRun(index=i, values={}, preset_file=f"runs/{i:03d}.yaml", processes=gpus, device=device)
            for i in range(runs)
        ],
    )


def schedule_all(sweep: Sweep, inventory) -> None:
    """What the scheduler's loop does while nothing ends: start the next run that fits until none does."""
    while (chosen := next_start(sweep, inventory, cores=64)) is not None:
        run, devices = chosen
        run.state, run.devices = "running", devices


def test_four_single_gpu_runs_take_four_devices_and_a_fifth_queues(monkeypatch):
    replay(monkeypatch, "h100_nvswitch_4")
    inventory = read_inventory()
    assert len(inventory.visible()) == 4
    sweep = gpu_sweep(5)
    schedule_all(sweep, inventory)
    placed = [r.devices for r in sweep.runs if r.state == "running"]
    assert sorted(d for devices in placed for d in devices) == [0, 1, 2, 3]
    assert [r.state for r in sweep.runs] == ["running"] * 4 + ["queued"]
    sweep.runs[2].state = "finished"  # a run ends: its device frees and the fifth starts there
    schedule_all(sweep, inventory)
    assert sweep.runs[4].state == "running" and sweep.runs[4].devices == sweep.runs[2].devices


def test_a_device_another_process_uses_is_never_given(monkeypatch):
    replay(monkeypatch, "h100_nvswitch_4")
    inventory = read_inventory()
    inventory.visible()[1].processes.append(GpuProcess(pid=4242, used_mb=30_000, user="someone", command="python"))
    assert place(inventory, 1, held=set()) == [0]
    assert place(inventory, 3, held=set()) == [0, 2, 3]
    assert place(inventory, 3, held={0}) is None, "only 2 free: a 3-GPU run waits"
    sweep = gpu_sweep(4)
    schedule_all(sweep, inventory)
    assert [r.devices for r in sweep.runs] == [[0], [2], [3], []]
    assert sweep.runs[3].state == "queued"


def test_a_two_gpu_run_waits_for_two_free_devices(monkeypatch):
    replay(monkeypatch, "h100_nvswitch_4")
    sweep = gpu_sweep(3, gpus=2)
    schedule_all(sweep, read_inventory())
    assert [r.devices for r in sweep.runs] == [[0, 1], [2, 3], []]


def test_the_placed_devices_are_the_runs_cuda_visible_devices(monkeypatch):
    """The run's own preset carries its devices: its command (`preview`) sets CUDA_VISIBLE_DEVICES to them."""
    replay(monkeypatch, "h100_nvswitch_4")
    inventory = read_inventory()
    preset = with_field(load_preset("demo-gpu"), "hardware.devices", place(inventory, 1, held={0, 1}))
    _, ctx = plan_here(preset, inventory)
    assert build_command(ctx).env["CUDA_VISIBLE_DEVICES"] == "2"


def test_cpu_runs_fit_within_the_cores():
    assert cpu_fits(1, used=0, cores=2) and cpu_fits(1, used=1, cores=2)
    assert not cpu_fits(1, used=2, cores=2), "2 cores: a third 1-process run waits"
    assert cpu_fits(4, used=0, cores=2), "a run alone always starts (the plan refused what cannot)"
    assert not cpu_fits(2, used=1, cores=2)


def test_a_run_a_killed_scheduler_was_starting_is_found_by_its_link_or_queued(tmp_path):
    """A scheduler killed between a run's start and its record: that run's folder names the sweep in its preset's
    description, so resume and stop adopt it instead of starting (or missing) a second copy."""
    run = copied_run(tmp_path)
    preset = run.path / "preset.yaml"
    linked = f"description: '{link_text('S1', 1, 3)} optim.lr=0.0002'"
    lines = [linked if line.startswith("description:") else line for line in preset.read_text().splitlines()]
    preset.write_text("\n".join(lines) + "\n")
    sweep = gpu_sweep(3).model_copy(update={"sweep_id": "S1", "preset": "demo-cpu"})
    for r in sweep.runs:
        r.state = "starting"
    adopt_unrecorded(sweep)
    assert [(r.state, r.run_id) for r in sweep.runs] == [("queued", None), ("running", run.run_id), ("queued", None)]


def test_cpu_runs_share_the_cores_with_other_runs_of_this_machine(tmp_path):
    """Two sweeps (or a sweep beside a run of the user's) on 2 cores: each counts the other's processes."""
    import os

    from gpuwizard.runner.sweep.scheduler import cpu_processes_elsewhere
    from gpuwizard.runs.records import ProcessRef

    sweep = gpu_sweep(1, device="cpu")
    assert next_start(sweep, None, cores=2) is not None, "nothing else runs: it starts"
    assert next_start(sweep, None, cores=2, elsewhere=2) is None, "2 processes of another run hold both cores"
    assert cpu_processes_elsewhere(sweep) == 0
    alive = ProcessRef.of(os.getpid())  # a live supervisor: this test's own process
    copied_run(tmp_path, state="running", ended=None, exit_code=None, supervisor=alive, world_size=2)
    assert cpu_processes_elsewhere(sweep) == 2
    sweep.runs[0].run_id = "20261129-120000-demo-cpu"  # the same run as one of the sweep's own: not elsewhere
    assert cpu_processes_elsewhere(sweep) == 0


def slurm_sweep_of(runs: int) -> Sweep:
    sweep = gpu_sweep(runs, device="cpu")
    sweep.slurm = True
    return sweep


def test_a_slurm_sweep_hands_its_queued_runs_over_together_at_most_slurm_in_flight():
    """The cluster places a SLURM sweep's runs: every queued run goes at once (one array per shape), up to the runs
    this machine's supervisors follow at a time."""
    from gpuwizard.runner.sweep.scheduler import SLURM_IN_FLIGHT, slurm_batch

    assert [r.index for r in slurm_batch(slurm_sweep_of(4))] == [0, 1, 2, 3]
    sweep = slurm_sweep_of(SLURM_IN_FLIGHT + 3)
    first = slurm_batch(sweep)
    assert len(first) == SLURM_IN_FLIGHT
    for run in first:
        run.state = "running"
    assert slurm_batch(sweep) == []
    sweep.runs[0].state = "finished"
    assert [r.index for r in slurm_batch(sweep)] == [SLURM_IN_FLIGHT]


def staged_variants(**changes) -> list:
    """The demo preset on SLURM as a sweep's checked run, once per value of each changed field."""
    from gpuwizard.runner.launch.prepare import PreparedRun
    from gpuwizard.runner.sweep.arrays import Staged

    base = with_field(load_preset("demo-cpu"), "launch.scheduler", "slurm")
    out = []
    for field, values in changes.items():
        for value in values:
            preset = with_field(base, field, value)
            plan, ctx = plan_here(preset, read_inventory())
            run = SweepRun(index=len(out), values={field: value}, preset_file="", processes=1, device="cpu")
            out.append(Staged(run, PreparedRun(preset, plan, ctx, smoke=False, baseline_green=False)))
    return out


def test_runs_of_one_shape_share_an_array_and_each_other_shape_gets_its_own(monkeypatch):
    """The shape is what the batch script asks SLURM for (nodes, CPUs, time, partition, sbatch options) and the
    secrets sbatch exports to every task; the learning rate or the seed is not part of it."""
    from gpuwizard.runner.sweep.arrays import grouped

    replay(monkeypatch, "h100_nvswitch_4")
    arrays, alone = grouped(staged_variants(**{"optim.lr": [1e-4, 2e-4, 3e-4], "trainer_options.seed": [1, 2]}))
    assert [[s.run.index for s in group] for group in arrays] == [[0, 1, 2, 3, 4]] and alone == []
    arrays, alone = grouped(staged_variants(**{"slurm.time": ["01:00:00", "02:00:00", "01:00:00"]}))
    assert [[s.run.index for s in group] for group in arrays] == [[0, 2], [1]]
    arrays, _ = grouped(staged_variants(**{"launch.env": [{"HF_TOKEN": "a"}, {"HF_TOKEN": "b"}, {"HF_TOKEN": "a"}]}))
    assert [[s.run.index for s in group] for group in arrays] == [[0, 2], [1]], "sbatch exports one value per array"


def test_a_run_whose_preset_asks_for_an_array_itself_goes_as_a_job_of_its_own(monkeypatch):
    from gpuwizard.runner.sweep.arrays import grouped, own_job_reason

    replay(monkeypatch, "h100_nvswitch_4")
    arrays, alone = grouped(staged_variants(**{"slurm.sbatch_args": [["--array=0-1"], ["--qos=high"]]}))
    assert [s.run.index for s in alone] == [0] and [[s.run.index for s in g] for g in arrays] == [[1]]
    reason = own_job_reason(alone[0].prepared.preset)
    assert reason is not None and "--array" in reason


def test_an_array_task_runs_the_batch_script_of_the_run_its_link_names(tmp_path):
    """The array's script as bash runs it in task 1 of array 77: the run folder arrays/77/1 links to is the one whose
    batch script runs, and the array asks for what the run's own script asks (the preset's options last, so they
    win as they do for a run submitted alone)."""
    import subprocess

    from gpuwizard.runner.host.slurm import array_script

    arrays = tmp_path / "sweep" / "arrays"
    for task in (0, 1):
        run = tmp_path / "runs" / f"r{task}"
        run.mkdir(parents=True)
        (run / "job.sbatch").write_text(f"#!/bin/bash\n#SBATCH --output={run}/log.txt\necho run r{task} ran\n")
        (arrays / "77").mkdir(parents=True, exist_ok=True)
        (arrays / "77" / str(task)).symlink_to(run)
    shape = ("#SBATCH --nodes=1", "#SBATCH --cpus-per-task=1", "#SBATCH --qos=high")
    script = array_script("demo-cpu", shape, arrays, "job.sbatch")
    lines = script.splitlines()
    assert lines[:6] == [
        "#!/bin/bash",
        "#SBATCH --job-name=demo-cpu",
        f"#SBATCH --output={arrays}/%A/%a/log.txt",
        *shape,
    ]
    (tmp_path / "array.sbatch").write_text(script)
    env = {"PATH": "/usr/bin:/bin", "SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "1"}
    ran = subprocess.run(["bash", str(tmp_path / "array.sbatch")], capture_output=True, text=True, env=env)
    assert (ran.returncode, ran.stdout) == (0, "run r1 ran\n"), ran.stderr
