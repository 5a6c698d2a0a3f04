"""Issue 27: where the sweep scheduler puts each run, over a recorded 4-GPU machine (NVML replay): one device per
single-GPU run, never one another run or process holds, the rest queued; on the CPU, processes within the cores."""

from __future__ import annotations

from typing import Literal

from gpuwizard.gpus.inventory import GpuProcess, read_inventory
from gpuwizard.model.preset import with_field
from gpuwizard.model.preset_files import load_preset
from gpuwizard.planning.plan import build_command, plan_here
from gpuwizard.runner.sweep_scheduler import adopt_unrecorded, cpu_fits, link_text, next_start, place
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

    from gpuwizard.runner.sweep_scheduler import cpu_processes_elsewhere
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
