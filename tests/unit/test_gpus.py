"""GPU inventory, sampler and setup advice over recorded NVML machines; the real NVML path where a driver exists.
The commands in a child process: tests/system/test_gpus_cli.py."""

from __future__ import annotations

import json
import os

import pytest

from gpuwizard.gpus.advice import setup_advice
from gpuwizard.gpus.inventory import read_inventory
from gpuwizard.gpus.nvml import NO_DRIVER_LINE, import_pynvml
from gpuwizard.gpus.replay import ReplayNvml
from gpuwizard.gpus.sampler import GpuSampler, NvmlSampleSource, open_sample_source, run_memory_held
from support.cli import poll_until
from support.data import DATA, has_driver, replay


def machine(name: str) -> ReplayNvml:
    return ReplayNvml.from_file(DATA / "nvml" / f"{name}.json")


@pytest.mark.parametrize(
    "name, text",
    [
        ("no_driver", NO_DRIVER_LINE),
        ("driver_not_loaded", NO_DRIVER_LINE),
        ("driver_mismatch", "upgraded without reloading"),
    ],
)
def test_nvml_failing_to_start(name, text):
    inventory = read_inventory(machine(name))
    assert inventory.gpus == [] and text in inventory.message
    assert open_sample_source(machine(name)) is None


def test_workstation_fields_and_not_supported_as_unavailable():
    inv = read_inventory(machine("workstation_2x4090"))
    assert inv.driver_version == "550.120" and inv.cuda_version == "12.4"
    g0, g1 = inv.gpus
    assert g0.name == "NVIDIA GeForce RTX 4090" and g0.uuid.startswith("GPU-5d1e")
    assert g0.bus_id == "00000000:01:00.0"
    assert round(g0.memory_total_mb / 1024, 1) == 24.0 and round(g1.memory_used_mb / 1024, 1) == 18.2
    assert (g1.utilization_gpu, g1.utilization_memory, g1.temperature_c) == (97.0, 62.0, 71)
    assert g1.power_w == pytest.approx(402.3) and g1.power_limit_w == 450
    assert (g0.clock_sm_mhz, g0.clock_mem_mhz) == (2520, 10501)
    assert g0.compute_capability == "8.9"
    assert (g0.pcie_gen, g0.pcie_width, g0.pcie_max_gen, g0.pcie_max_width) == (1, 16, 4, 16)
    assert g0.persistence_mode is False
    assert g0.mig_mode is None and g0.ecc_uncorrected is None  # NOT_SUPPORTED on GeForce reads as unavailable
    assert [(p.pid, round(p.used_mb / 1024, 1)) for p in g1.processes] == [(1, 17.8)]
    assert g1.processes[0].user is not None and g1.processes[0].command
    link = inv.link(0, 1)
    assert (link.topology, link.nvlinks, link.p2p_read, link.label) == ("SYS", 0, "GPU not supported", "SYS")


def test_nvlink_bridge_and_nvswitch_topology():
    bridge = read_inventory(machine("a100_pcie_nvlink_bridge")).link(0, 1)
    assert (bridge.label, bridge.p2p_read) == ("NV4", "OK")
    switch = read_inventory(machine("h100_nvswitch_4"))
    assert len(switch.links) == 6 and {link.label for link in switch.links} == {"NV18"}
    assert switch.link(0, 3).topology == "SYS" and switch.link(0, 1).topology == "NODE"
    assert switch.gpus[0].ecc_uncorrected == 0 and switch.gpus[0].mig_mode is False


def test_mig_and_unavailable_per_process_memory():
    g = read_inventory(machine("a100_mig")).gpus[0]
    assert g.mig_mode is True and g.utilization_gpu is None
    assert g.processes[0].pid == 1 and g.processes[0].used_mb is None


def test_p2p_constant_tuple_gotcha_is_avoided():
    """nvidia-ml-py defines NVML_P2P_CAPS_INDEX_READ as (0,); the replay fails like ctypes does if it is passed."""
    nv = machine("workstation_2x4090")
    with pytest.raises(TypeError):
        nv.nvmlDeviceGetP2PStatus(0, 1, import_pynvml().NVML_P2P_CAPS_INDEX_READ)
    assert read_inventory(machine("workstation_2x4090")).link(0, 1).p2p_read is not None


@pytest.mark.parametrize(
    "visible, expected", [("1", {1: 0}), ("1,0", {1: 0, 0: 1}), ("GPU-7f3b9c11", {1: 0}), ("0,7", {0: 0}), ("", {})]
)
def test_cuda_visible_devices_is_respected(monkeypatch, visible, expected):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    inv = read_inventory(machine("workstation_2x4090"))
    assert {g.index: g.cuda_index for g in inv.gpus if g.cuda_index is not None} == expected
    assert inv.cuda_visible_devices == visible
    assert [g.index for g in inv.visible()] == sorted(expected, key=expected.get)


def test_gpus_command_over_a_replay(gw, monkeypatch):
    replay(monkeypatch, "workstation_2x4090")
    result = gw("gpus")
    assert result.code == 0 and "RTX 4090" in result.out and "P2P read: GPU not supported" in result.out
    data = gw("gpus", "--json").json()
    assert len(data["gpus"]) == 2 and data["links"][0]["p2p_read"] == "GPU not supported"


def test_sampler_keeps_bounded_history_and_attributes_to_a_run():
    source = NvmlSampleSource(machine("workstation_2x4090"))
    sampler = GpuSampler(source, interval=0.01, history=5, run_pids=lambda: {1})
    for _ in range(8):
        sampler.sample_once()
    assert len(sampler.history[1]) == 5 and len(sampler.history[0]) == 5
    latest = {s.index: s for s in sampler.latest()}
    assert round(latest[1].run_memory_mb / 1024, 1) == 17.8 and latest[1].run_utilization == 97.0
    assert latest[0].run_memory_mb == 0.0 and latest[0].run_utilization == 0.0
    assert [h.utilization for h in sampler.history[1]] == [97.0] * 5


def test_memory_still_held_after_a_job_is_reported_per_device():
    """After a stop the supervisor asks NVML whether any of the run's pids still holds GPU memory."""
    import time

    source = NvmlSampleSource(machine("workstation_2x4090"))
    held = run_memory_held(source, {1}, wait_s=0)
    assert list(held) == [1] and round(held[1] / 1024, 1) == 17.8, "pid 1 holds 17.8 GB on GPU 1 in the recording"
    start = time.monotonic()
    assert run_memory_held(source, {424242}, wait_s=5) == {}
    assert time.monotonic() - start < 1, "nothing held: no waiting"


def test_sampler_thread_polls_off_the_caller():
    sampler = GpuSampler(NvmlSampleSource(machine("a100_pcie_nvlink_bridge")), interval=0.02, history=50).start()
    try:
        poll_until(lambda: len(sampler.history.get(0, ())) >= 3, 5, "three samples from its thread", every=0.02)
    finally:
        sampler.stop()


def test_device_lost_mid_run():
    source = NvmlSampleSource(machine("l40s_lost_midrun"))
    samples = [source.sample(set())[0] for _ in range(6)]
    assert [s.lost for s in samples] == [False, False, False, True, True, True]
    assert samples[1].power_w == pytest.approx(95.0) and samples[1].utilization == 100
    inventory_after = read_inventory(machine("l40s_lost_midrun"))
    assert inventory_after.gpus[0].name == "NVIDIA L40S"


def test_setup_advice():
    ws = read_inventory(machine("workstation_2x4090"))
    advice = " ".join(p.paragraph() for p in setup_advice(ws, None, 2, need_gb=10))
    assert "NCCL_P2P_DISABLE" in advice
    assert "GPU 1 is busy" in advice and "has 5.8 GB free" in advice
    assert "NCCL_IB_DISABLE" in " ".join(p.paragraph() for p in setup_advice(ws, None, 2, nodes=2, infiniband=False))
    assert "NCCL_IB_DISABLE" not in " ".join(p.paragraph() for p in setup_advice(ws, None, 2, nodes=2, infiniband=True))
    bridge = read_inventory(machine("a100_pcie_nvlink_bridge"))
    assert setup_advice(bridge, [0, 1], 2, need_gb=20) == []
    mixed = read_inventory(machine("a100_pcie_nvlink_bridge"))
    mixed.gpus[1].name = "NVIDIA A100 40GB PCIe"
    assert "mixed GPU models" in " ".join(p.paragraph() for p in setup_advice(mixed, None, 2))
    assert "only 2 of the 4" in " ".join(p.paragraph() for p in setup_advice(bridge, None, 4))
    assert "MIG enabled" in " ".join(p.paragraph() for p in setup_advice(read_inventory(machine("a100_mig")), None, 1))


def test_plan_uses_detected_memory(gw, monkeypatch):
    replay(monkeypatch, "workstation_2x4090")
    plan = gw("plan", "so100-act-ddp2", "--json").json()
    assert plan["fits"]["device_gb"] == 24.0 and plan["fits"]["fits"] is True
    assert plan["fits"]["device_source"] == "detected NVIDIA GeForce RTX 4090"
    big = gw("plan", "pi05-openpi-fsdp", "--json").json()
    assert any("only 2 of the 4 requested GPUs are visible here" in w for w in big["warnings"])


@pytest.mark.skipif(not has_driver(), reason="needs an NVIDIA driver")
def test_real_nvml_inventory_and_sample():
    """The same code path against the real driver (runs on GPU machines, e.g. via scripts/gpu_check.sh)."""
    inv = read_inventory()
    assert inv.gpus and inv.driver_version
    g = inv.gpus[0]
    assert g.name and g.memory_total_mb and g.compute_capability
    source = open_sample_source()
    assert source is not None
    assert source.sample({os.getpid()})[0].memory_total_mb == pytest.approx(g.memory_total_mb)
    source.close()


RECORDED = [p for p in sorted((DATA / "nvml").glob("*.json")) if json.loads(p.read_text()).get("devices")]


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
def test_recording_a_replayed_machine_gives_the_recording_back(gw, monkeypatch, tmp_path, path):
    """`gpus --record` over a replay writes what the replay was made from (record_machine inverts ReplayNvml)."""
    monkeypatch.setenv("GPUWIZARD_NVML_REPLAY", str(path))
    out = tmp_path / "again.json"
    result = gw("gpus", "--record", out)
    recording = json.loads(path.read_text())
    assert result.code == 0 and f"recorded {len(recording['devices'])} GPU(s)" in result.out
    again = json.loads(out.read_text())
    scripted = {
        "timeline",
        "lost_after_samples",
    }  # replay-only: how a recording plays out over time, not an NVML answer
    devices = [{k: v for k, v in d.items() if k not in scripted} for d in recording["devices"]]
    expected = {k: v for k, v in recording.items() if k != "source"} | {
        "pairs": recording.get("pairs") or {},
        "devices": devices,
    }
    assert again == expected
    assert (
        read_inventory(ReplayNvml.from_file(str(out))).to_json()
        == read_inventory(ReplayNvml.from_file(str(path))).to_json()
    )
