"""The memory line of `probe --batch auto` (analysis/probe/memory_model.py, runner/probe/batch_search.py): the largest
batch within a real or a simulated device, confirmed by at most two runs (the prediction, and one more or one fewer);
where those disagree with the line the search says so and bisects. The search runs here against devices whose answer
is known (a peak that is a line, one that curves); the real demo runs are tests/system/test_probe.py. And the
probe's JAX runs: without preallocation, their memory figure named."""

from __future__ import annotations

import json
import threading

import pytest

from gpuwizard.analysis.probe.memory_model import confirm_next, fit_memory, gauge_peak_mb
from gpuwizard.analysis.probe.results import ProbeResult, ProbeRow
from gpuwizard.runner.probe.batch_search import MAX_AUTO_BATCH, grid_memory_line, search_batch


def test_the_line_predicts_the_largest_batch_within_a_real_and_a_simulated_device():
    real = fit_memory([(16, 500 + 3 * 16), (32, 500 + 3 * 32)], limit_mb=0.9 * 10_000, simulated=False)
    assert real is not None and real.fixed_mb == pytest.approx(500) and real.per_sample_mb == pytest.approx(3)
    assert real.predicted_batch == (9000 - 500) // 3 and real.max_residual_mb is None and real.batches == [16, 32]
    simulated = fit_memory([(16, 300 + 2 * 16), (32, 300 + 2 * 32), (64, 300 + 2 * 64 + 1)], 700, simulated=True)
    assert simulated is not None and 195 <= simulated.predicted_batch <= 200, "the whole line within the device"
    assert simulated.max_residual_mb is not None and simulated.max_residual_mb < 1
    assert "from rows 16, 32, 64" in simulated.line() and "within 700 MB (the simulated device)" in simulated.line()
    assert fit_memory([(16, 400.0)], 400, True) is None, "one batch tells no slope"
    assert fit_memory([(16, 400.0), (32, 390.0)], 400, True) is None, "memory that does not grow predicts nothing"


def test_the_prediction_is_confirmed_by_one_more_or_one_fewer_and_a_disagreement_is_said():
    assert confirm_next(200, {16: True, 32: True}, MAX_AUTO_BATCH).run == 200
    assert confirm_next(200, {16: True, 32: True, 200: True}, MAX_AUTO_BATCH).run == 201
    done = confirm_next(200, {16: True, 200: True, 201: False}, MAX_AUTO_BATCH)
    assert done.run is None and not done.off and done.said == "confirming: 200 fits, 201 does not"
    assert confirm_next(200, {16: True, 200: False}, MAX_AUTO_BATCH).run == 199
    one_over = confirm_next(200, {16: True, 200: False, 199: True}, MAX_AUTO_BATCH)
    assert one_over.run is None and not one_over.off and "199 does (the line was 1 over)" in one_over.said
    off = confirm_next(200, {16: True, 200: True, 201: True}, MAX_AUTO_BATCH)
    assert off.off and off.said == "the line was off: 200 and 201 both fit; bisecting"
    assert confirm_next(200, {16: True, 32: False}, MAX_AUTO_BATCH).off, "runs already ran tell it is off"
    assert confirm_next(9000, {16: True, 4096: True}, MAX_AUTO_BATCH).said.endswith("the search's cap")


class Device:
    """A probe whose runs fit while peak(batch) stays within `limit_mb` (what the demo's simulated device does)."""

    def __init__(self, peak, limit_mb: float | None, simulated: bool = True):
        self.peak, self.limit = peak, limit_mb
        self.cancelled, self.simulated, self.headroom = threading.Event(), simulated, 0.1
        self.device_memory_mb = limit_mb
        self.result = ProbeResult(
            probe_id="p", preset="p", trainer="demo", policy="demo", device="cpu", hardware="CPU", created=0.0,
            steps=30, headroom=0.1,
        )  # fmt: skip
        self.ran: list[int] = []
        self.said: list[str] = []

    def run_config(self, gpus: int, batch: int) -> ProbeRow:
        self.ran.append(batch)
        need = self.peak(batch)
        if self.limit is not None and need > self.limit:
            return ProbeRow(gpus=gpus, per_device_batch=batch, outcome="does not fit")
        return ProbeRow(gpus=gpus, per_device_batch=batch, outcome="measured", memory_mb=need)

    def record(self, row: ProbeRow) -> None:
        self.result.rows = [*self.result.rows, row]

    def out_of_budget(self, what: str) -> bool:
        return False

    def save(self) -> None:
        pass

    def say(self, text: str) -> None:
        self.said.append(text)


def test_a_peak_that_is_a_line_is_found_exactly_with_at_most_two_runs_after_the_fit():
    for limit in (700.5, 740.0, 999.9, 420.0, 600.0):  # 420: batch 16 does not fit, the line comes from 8 and 12
        device = Device(lambda b: 328.0 + 8.2 * b, limit)
        largest = search_batch(device, 1, 16)
        truth = int((limit - 328.0) // 8.2)
        memory = device.result.memory
        assert largest == truth and memory is not None and memory.runs_after_fit <= 2 and not memory.off, limit
        fitted_at = max(device.ran.index(b) for b in memory.batches)  # the run whose row gave the line
        assert memory.runs_after_fit == len(device.ran) - 1 - fitted_at, device.ran
        assert device.said[-1] in (f"confirming: {truth} fits, {truth + 1} does not", f"confirming: {truth + 1} "
                                   f"does not fit, {truth} does (the line was 1 over)")  # fmt: skip
        if truth >= 32:
            assert device.ran == [16, 32, truth, truth + 1]


def test_a_peak_the_line_misjudges_is_bisected_and_said():
    device = Device(lambda b: 300.0 + 2.0 * b + 0.05 * b * b, 1000.0)  # grows faster than the line through 16, 32
    largest = search_batch(device, 1, 16)
    truth = max(b for b in range(1, 200) if 300.0 + 2.0 * b + 0.05 * b * b <= 1000.0)
    memory = device.result.memory
    assert memory is not None and memory.off and memory.predicted_batch > truth + 1
    assert any(line.startswith("the line was off: ") and "do not fit; bisecting" in line for line in device.said)
    assert largest is not None and largest <= truth and truth - largest <= max(1, largest // 8), "bounded to 1/8"


def test_without_a_device_size_the_search_doubles_and_bisects_by_out_of_memory_alone():
    device = Device(lambda b: 300.0 + 2.0 * b, None)
    device.run_config = lambda gpus, batch: (  # a device that refuses past 100 but says nothing of its size
        device.ran.append(batch)
        or ProbeRow(gpus=gpus, per_device_batch=batch, outcome="measured" if batch <= 100 else "does not fit")
    )
    assert search_batch(device, 1, 16) in range(89, 101) and device.result.memory is None
    assert device.ran[:4] == [16, 32, 64, 128]


def test_a_grid_probe_on_the_cpu_says_its_line_within_the_machines_memory_shared_by_its_processes():
    """`probe demo-cpu` (no batch search, no device size) printed no memory model; the grid's rows give one."""
    device = Device(lambda b: 328.0 + 8.2 * b, None, simulated=False)
    for gpus, extra in ((1, 0.0), (2, 20.0)):  # two processes: more per rank (its gloo buffers)
        for batch in (8, 16):
            device.record(
                ProbeRow(gpus=gpus, per_device_batch=batch, outcome="measured", memory_mb=device.peak(batch) + extra)
            )
    assert grid_memory_line(device, None) is None, "no device size and no machine memory: no limit to say"
    fit = grid_memory_line(device, machine_mb=10_000.0)
    assert fit is not None and fit.batches == [8, 16] and fit.fixed_mb == pytest.approx(348.0)
    assert fit.limit_mb == pytest.approx(10_000 * 0.9 / 2), "the machine's memory shared by the 2 processes"
    assert fit.predicted_batch == int((4500 - 348.0) // 8.2)
    assert "shared by 2 processes, 10% kept free" in fit.line()
    simulated = Device(lambda b: 328.0 + 8.2 * b, 700.0)
    for batch in (8, 16):
        simulated.record(ProbeRow(gpus=1, per_device_batch=batch, outcome="measured", memory_mb=simulated.peak(batch)))
    fit = grid_memory_line(simulated, machine_mb=10_000.0)
    assert fit is not None and fit.limit_mb == 700.0 and "the simulated device" in fit.line(), "a device size wins"


def test_the_probe_reads_the_largest_ranks_peak_from_the_gauge(tmp_path):
    path = tmp_path / "gauge.jsonl"
    steps = [
        {"kind": "unmeasured", "rank": 0, "what": "gradient norms", "why": "one process"},
        {"kind": "step", "rank": 0, "step": 1, "max_rss_mb": 410.5, "rss_mb": 400.0},
        {"kind": "step", "rank": 1, "step": 1, "max_rss_mb": 420.25},
        {"kind": "step", "rank": 0, "step": 2, "max_allocated_mb": 90.0, "max_reserved_mb": 128.0},
    ]
    path.write_text("\n".join(map(json.dumps, steps)) + '\n{"kind": "step", "rank": 0, "max_rss')  # a torn last line
    assert gauge_peak_mb(path, cuda=False) == 420.25 and gauge_peak_mb(path, cuda=True) == 128.0
    assert gauge_peak_mb(tmp_path / "none.jsonl", cuda=False) is None


@pytest.mark.parametrize(("name", "jax"), [("pi05-openpi-fsdp", True), ("pi05-openpi-pytorch", False)])
def test_the_probes_jax_runs_do_not_preallocate_and_say_which_memory_they_read(name, jax):
    from gpuwizard.model.preset_files import load_preset
    from gpuwizard.planning.plan import build_command, make_plan
    from gpuwizard.trainers.openpi.trainer import PREALLOCATE, TRAINER

    preset = load_preset(name)
    probed = build_command(make_plan(TRAINER.probe_variant(preset, 40))[1]).env
    assert probed.get(PREALLOCATE) == ("false" if jax else None)
    assert PREALLOCATE not in build_command(make_plan(preset)[1]).env, "a run of the job is left as the user set it"
    source = TRAINER.probe_memory_source(preset, "cuda")
    assert (source is not None and f"{PREALLOCATE}=false" in source) if jax else source is None
