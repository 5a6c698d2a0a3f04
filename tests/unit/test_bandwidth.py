"""`gpuwizard gpus --bandwidth` without starting a rank: NCCL-tests' busbw arithmetic on times whose answer is known,
the record kept per host and device set and found again, the table in 80 columns, the ranks' argv and loopback
environment on the CPU and (read, not run) on a recorded 4-GPU machine, and a bad flag as one paragraph."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwizard.cli.bandwidth import measurement_from, table_text
from gpuwizard.cli.parser import build_parser
from gpuwizard.gpus import bandwidth
from gpuwizard.gpus.bandwidth import MIB, BandwidthRecord, bus_factor, find, record_path, save, size_result
from gpuwizard.runner.bandwidth.measure import Measurement, rank_command, rank_env
from support.data import DATA


def record(device: str = "cpu", devices: tuple[str, ...] = ("cpu",), created: float = 1000.0, **kw) -> BandwidthRecord:
    sizes = [size_result(s * MIB, [0.002 * s, 0.001 * s, 0.004 * s], 2) for s in (1, 4, 64)]
    fields = {
        "host": "box",
        "device": device,
        "backend": "nccl" if device == "cuda" else "gloo",
        "ranks": 2,
        "devices": list(devices),
        "hardware": "CPU, 2 cores",
        "warmup": 5,
        "created": created,
        "seconds": 3.0,
        "sizes": sizes,
    }
    return BandwidthRecord(**(fields | kw))


def test_busbw_is_algbw_times_two_n_minus_one_over_n_at_the_median_with_the_extremes_as_spread():
    assert (bus_factor(2), bus_factor(4), bus_factor(8)) == (1.0, 1.5, 1.75)
    result = size_result(8 * MIB, [0.03, 0.01, 0.02, 0.02, 0.04], ranks=4)
    assert result.time_s == 0.02 and (result.time_min_s, result.time_max_s) == (0.01, 0.04)
    assert result.algbw == pytest.approx(8 * MIB / 0.02)
    assert result.busbw == pytest.approx(8 * MIB / 0.02 * 1.5)
    assert result.busbw_low == pytest.approx(8 * MIB / 0.04 * 1.5) and result.busbw_low < result.busbw
    assert result.busbw_high == pytest.approx(8 * MIB / 0.01 * 1.5) and result.busbw_high > result.busbw
    assert result.iterations == 5
    with pytest.raises(ValueError):
        size_result(MIB, [], 2)
    assert bandwidth.gbps(1.0e9) == "1.00" and bandwidth.gbps(12.34e9) == "12.3" and bandwidth.gbps(123.4e9) == "123"


def test_the_record_is_kept_per_host_and_device_set_and_found_again(isolated_dirs):
    cpu = save(record())
    set_a = save(record("cuda", ("GPU-a", "GPU-b"), created=2000.0, hardware="2 x H100"))
    set_b = save(record("cuda", ("GPU-c", "GPU-d"), created=3000.0, hardware="2 x L40S"))
    assert len({cpu, set_a, set_b}) == 3 and all(p.parent == isolated_dirs / "data" / "bandwidth" for p in (cpu, set_a))
    assert find("cuda", ["GPU-a", "GPU-b"], host="box").created == 2000.0
    assert find("cuda", host="box").created == 3000.0, "without a set: the newest of the kind"
    assert find("cuda", host="box", hardware="2 x H100").created == 2000.0, "the probe's hardware first"
    assert find("cpu", host="box").devices == ["cpu"] and find("cpu", host="elsewhere") is None
    assert find("cuda", ["GPU-a"], host="box") is None
    save(record(created=4000.0))
    assert find("cpu", host="box").created == 4000.0, "a new measurement replaces the old one of its set"
    record_path("box", "cuda", ["GPU-a", "GPU-b"]).write_text('{"format": 1, "host": "box"')
    assert find("cuda", ["GPU-a", "GPU-b"], host="box") is None, "a damaged file is no measurement"
    assert record().largest.size_bytes == 64 * MIB and "at 64 MiB" in record().figure_text()


def test_the_table_fits_80_columns_and_names_the_figure_and_where_it_was_saved(isolated_dirs):
    rec = record()
    text = table_text(rec, record_path("box", "cpu", ["cpu"]))
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "1 MiB" in text and "64 MiB" in text and "busbw min-max" in text
    assert f"figure used: busbw {bandwidth.gbps(rec.largest.busbw)} GB/s at 64 MiB" in text
    assert "box-cpu.json" in text.replace("\n  ", "")


def test_the_ranks_are_an_argv_list_on_loopback_gloo_on_the_cpu():
    m = Measurement(device="cpu", ranks=2, sizes=(MIB, 4 * MIB), devices=("cpu",), hardware="CPU, 2 cores")
    argv = rank_command(m, Path("/tmp/x/store"))
    assert argv[1:3] == ["-m", "gpuwizard.runner.bandwidth.allreduce"] and "--backend=gloo" in argv
    assert f"--sizes={MIB},{4 * MIB}" in argv
    env = rank_env(m, 1)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("1", "2", "1")
    assert env["GLOO_SOCKET_IFNAME"] == "lo" and env["MASTER_ADDR"] == "127.0.0.1"
    assert env["CUDA_VISIBLE_DEVICES"] == "" and "NCCL_SOCKET_IFNAME" not in env


def test_on_a_recorded_four_gpu_machine_it_would_run_nccl_over_every_visible_gpu(monkeypatch):
    monkeypatch.setenv("GPUWIZARD_NVML_REPLAY", str(DATA / "nvml" / "h100_nvswitch_4.json"))
    m = measurement_from(build_parser().parse_args(["gpus", "--bandwidth"]))
    assert (m.device, m.backend, m.ranks) == ("cuda", "nccl", 4)
    assert m.devices[0].startswith("GPU-cccc0000") and len(set(m.devices)) == 4
    assert m.hardware == "4 x NVIDIA H100 80GB HBM3" and m.sizes[-1] == 256 * MIB
    assert "--backend=nccl" in rank_command(m, Path("s"))
    env = rank_env(m, 3)
    assert env["NCCL_SOCKET_IFNAME"] == "lo" and env["LOCAL_RANK"] == "3" and "CUDA_VISIBLE_DEVICES" not in env
    two = measurement_from(build_parser().parse_args(["gpus", "--bandwidth", "--processes", "2"]))
    assert (
        two.ranks == 2
        and two.devices == m.devices[:2]
        and bandwidth.device_key("cuda", list(two.devices)) != (bandwidth.device_key("cuda", list(m.devices)))
    )


@pytest.mark.parametrize(
    ("args", "field", "said"),
    [
        (["--bandwidth", "--sizes", "0"], "--sizes = '0'", "not a message size in MiB"),
        (["--bandwidth", "--sizes", "1,lots"], "--sizes = '1,lots'", "'lots' is not a message size"),
        (["--bandwidth", "--processes", "1"], "--processes = 1", "needs 2 or more processes"),
        (["--bandwidth", "--device", "cuda"], "--device = 'cuda'", "0 GPU visible here"),
        (["--sizes", "4"], "--sizes:", "only applies to --bandwidth"),
    ],
)
def test_a_bad_value_is_one_paragraph_naming_the_flag_value_and_fix(gw, monkeypatch, args, field, said):
    monkeypatch.setenv("GPUWIZARD_NVML_REPLAY", str(DATA / "nvml" / "no_driver.json"))
    out = gw("gpus", *args)
    assert out.code == 2 and out.out == ""
    assert out.err.count("\n") == 1 and "Traceback" not in out.err, out.err
    assert out.err.startswith(field) and said in out.err and "Fix: " in out.err


def test_the_busbw_of_a_size_between_two_measured_is_read_off_the_time_line_between_them():
    rec = record()  # 1, 4 and 64 MiB at a median of 2 ms per MiB (1 ms fastest, 4 ms slowest)
    assert rec.busbw_at(64 * MIB) == (rec.largest.busbw, rec.largest.busbw_low, rec.largest.busbw_high)
    assert rec.busbw_at(1 << 30) == rec.busbw_at(64 * MIB), "above the sweep: the largest size's"
    median, low, high = rec.busbw_at(2 * MIB)
    assert median == pytest.approx(2 * MIB / (0.002 + (0.008 - 0.002) / 3)) and low < median < high
    small = rec.busbw_at(MIB // 4)
    assert small[0] == pytest.approx((MIB // 4) / 0.002), "below the sweep: the smallest size's time (latency)"
    assert bandwidth.size_text(int(1.2e6)) == "1.14 MiB" and bandwidth.size_text(256 * 1024) == "256 KiB"


def test_times_read_with_three_figures_and_no_bare_point():
    """'#.3g' keeps 1.00's zeros but printed 119 ms as '119. ms' (issue 39 item 7)."""
    from gpuwizard.cli.bandwidth import time_text

    assert [time_text(s) for s in (0.000845, 0.0506, 0.119, 0.1, 1.46, 12.0)] == [
        "0.845 ms",
        "50.6 ms",
        "119 ms",
        "100 ms",
        "1.46 s",
        "12.0 s",
    ]
