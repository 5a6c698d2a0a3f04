"""The probe's step-time model (analysis/probe/throughput_model.py) on synthetic rows of known answer: an exact fit
recovers its coefficients and predicts a count it never saw, noisy rows give a residual, rows that cannot tell a
coefficient leave it out and say what cannot be predicted, and a negative coefficient is dropped; a measured
all-reduce (`gpus --bandwidth`) stands in for the comm term one GPU count cannot tell, through the probe too (the
memory line of a batch search: tests/unit/test_memory_model.py)."""

from __future__ import annotations

import pytest

from gpuwizard.analysis.probe.throughput_model import Point, fit, measured_comm, ring

FIXED, PER_SAMPLE, COMM = 0.004, 0.0009, 0.02


def truth(gpus: int, batch: int) -> float:
    return FIXED + PER_SAMPLE * batch + COMM * ring(gpus)


def point(gpus: int, batch: int, scale: float = 1.0, spread: float = 0.0) -> Point:
    step = truth(gpus, batch) * scale
    return Point(gpus, batch, step, step * (1 - spread), step * (1 + spread))


def test_an_exact_grid_gives_back_its_coefficients_and_predicts_four_gpus():
    model = fit([point(g, b) for g in (1, 2) for b in (8, 16)])
    assert model is not None and model.parameters == 3 and model.rows == 4
    assert model.median.fixed_s == pytest.approx(FIXED)
    assert model.median.per_sample_s == pytest.approx(PER_SAMPLE)
    assert model.median.comm_s == pytest.approx(COMM)
    assert model.rms_residual == pytest.approx(0, abs=1e-9) and model.max_residual == pytest.approx(0, abs=1e-9)
    assert model.predicts(4, 32) is None
    step, low, high = model.step_range(4, 32)
    assert step == pytest.approx(truth(4, 32)) and low == pytest.approx(step) and high == pytest.approx(step)
    assert ring(1) == 0 and ring(2) == 1 and ring(4) == 1.5


def test_noisy_rows_give_a_residual_and_the_windows_a_range_around_the_prediction():
    noisy = [point(1, 8, 1.05, 0.1), point(1, 16, 0.97, 0.1), point(2, 8, 0.96, 0.1), point(2, 16, 1.03, 0.1)]
    model = fit(noisy)
    assert model is not None
    assert model.rms_residual is not None and 0.005 < model.rms_residual < 0.06
    assert model.max_residual is not None and model.max_residual >= model.rms_residual
    step, low, high = model.step_range(4, 8)
    assert low < step < high
    assert low < truth(4, 8) < high, "the true step time lies in the predicted range"
    assert "residuals" in model.line() and "x 2(n-1)/n" in model.line()


def test_one_batch_or_one_count_leaves_out_what_the_rows_cannot_tell():
    one_batch = fit([point(1, 8), point(2, 8)])
    assert one_batch is not None and one_batch.median.per_sample_s is None
    assert one_batch.predicts(4, 8) is None
    assert "a sample's cost is not known" in (one_batch.predicts(4, 16) or "")
    assert one_batch.step_range(4, 8)[0] == pytest.approx(truth(4, 8))
    one_count = fit([point(1, 8), point(1, 16)])
    assert one_count is not None and one_count.median.comm_s is None
    assert "all-reduce's cost is not known" in (one_count.predicts(2, 8) or "")
    assert one_count.predicts(1, 32) is None
    assert one_count.rms_residual is None and "exact fit" in one_count.line()
    assert fit([]) is None


def test_a_negative_coefficient_from_noise_is_dropped_and_the_rest_refitted():
    flat = [Point(1, 8, 0.010, 0.010, 0.010), Point(1, 16, 0.009, 0.009, 0.009), Point(2, 8, 0.03, 0.03, 0.03)]
    model = fit(flat)
    assert model is not None and model.median.per_sample_s is None and model.median.comm_s is not None
    assert all(v >= 0 for v in (model.median.fixed_s, model.median.comm_s))


def test_one_gpu_count_takes_the_measured_all_reduce_and_predicts_the_counts_it_never_ran():
    measured = measured_comm(5e6, busbw=1e9, busbw_low=0.5e9, busbw_high=2e9, source="2 gloo processes")
    assert measured is not None and measured.gradient_bytes == 20_000_000
    assert (measured.comm_s, measured.slow_s, measured.fast_s) == pytest.approx((COMM, 2 * COMM, COMM / 2))
    model = fit([point(1, 8), point(1, 16)], measured)
    assert model is not None and model.comm_source == "measured" and model.parameters == 2
    assert model.median.comm_s == pytest.approx(COMM) and model.median.per_sample_s == pytest.approx(PER_SAMPLE)
    assert model.predicts(4, 16) is None, "the measured all-reduce gives the counts not run"
    step, low, high = model.step_range(4, 16)
    assert step == pytest.approx(truth(4, 16)) and low < step < high, "the measurement's own spread"
    assert "(measured)" in model.line() and "all-reduce measured, not fitted" in model.line()
    two_only = fit([point(2, 8), point(2, 16)], measured)
    assert two_only is not None and two_only.median.fixed_s == pytest.approx(FIXED), "fitted around it at n = 2"
    assert measured_comm(0, 1e9, 1e9, 1e9, "") is None and measured_comm(1e6, 0.0, 1e9, 1e9, "") is None


def test_rows_that_tell_the_all_reduce_keep_the_fitted_term_and_show_the_measured_one_beside_it():
    measured = measured_comm(1e6, busbw=1e9, busbw_low=1e9, busbw_high=1e9, source="here")
    model = fit([point(g, b) for g in (1, 2) for b in (8, 16)], measured)
    assert model is not None and model.comm_source == "fitted" and model.median.comm_s == pytest.approx(COMM)
    assert model.measured_comm == measured and "(fitted)" in model.line()
    assert "all-reduce fitted from the rows; measured 4 ms = 4 MB of float32 gradients" in model.line()
    without = fit([point(1, 8), point(1, 16)])
    assert without is not None and without.comm_source is None and "all-reduce" not in without.line()


def test_the_probe_uses_this_hosts_bandwidth_where_it_ran_one_process_count(isolated_dirs):
    from gpuwizard.analysis.probe.results import ProbeResult, ProbeRow
    from gpuwizard.analysis.probe.verdict import fill_models, result_text
    from gpuwizard.gpus.bandwidth import MIB, BandwidthRecord, host_name, save, size_result
    from gpuwizard.model.catalog import load_catalog

    rows = [ProbeRow(gpus=1, per_device_batch=b, outcome="measured", samples_per_s=b / truth(1, b)) for b in (8, 16)]
    probe = ProbeResult(
        probe_id="p", preset="demo-cpu", trainer="demo", policy="demo", device="cpu", hardware="CPU, 2 cores",
        created=0.0, steps=300, headroom=0.1, rows=rows, batches=[8, 16], gpus=[1, 2],
    )  # fmt: skip
    fill_models(probe)
    assert probe.throughput is not None and probe.throughput.comm_source is None
    assert {(r.gpus, r.per_device_batch) for r in probe.predicted} == {(1, 32)}, "one count: only a batch it can tell"
    busbw = 0.6e9
    seconds = MIB / busbw
    save(
        BandwidthRecord(
            host=host_name(),
            device="cpu",
            backend="gloo",
            ranks=2,
            devices=["cpu"],
            hardware="CPU, 2 cores",
            warmup=5,
            created=1.0,
            seconds=2.0,
            sizes=[size_result(MIB, [seconds, 0.9 * seconds, 1.2 * seconds], 2)],
        )
    )
    fill_models(probe)
    model = probe.throughput
    assert model is not None and model.comm_source == "measured"
    params = (load_catalog()["demo"].params_m or 0) * 1e6
    assert model.median.comm_s == pytest.approx(params * 4 / busbw)
    assert {(r.gpus, r.per_device_batch) for r in probe.predicted} == {(1, 32), (2, 8), (2, 16), (2, 32)}
    text = result_text(probe).replace("\n  ", " ")
    assert "x 2(n-1)/n (measured)" in text and "2 gloo processes on CPU, 2 cores" in text


def test_a_cpu_probe_predicts_no_process_count_past_the_cores():
    """On the CPU, ranks past the cores share them, which the model does not know: `probe demo-cpu` on 2 cores
    predicted 4 processes at 1.6x the samples/s of 2 before."""
    from gpuwizard.analysis.probe.results import ProbeResult, ProbeRow
    from gpuwizard.analysis.probe.verdict import fill_models

    rows = [
        ProbeRow(gpus=n, per_device_batch=b, outcome="measured", samples_per_s=n * b / truth(n, b))
        for n in (1, 2)
        for b in (8, 16)
    ]

    def predicted(cores: int | None) -> set[tuple[int, int]]:
        probe = ProbeResult(
            probe_id="p", preset="demo-cpu", trainer="demo", policy="demo", device="cpu", hardware="CPU",
            created=0.0, steps=300, headroom=0.1, rows=rows, batches=[8, 16], gpus=[1, 2], cores=cores,
        )  # fmt: skip
        fill_models(probe)
        return {(r.gpus, r.per_device_batch) for r in probe.predicted}

    bigger = {(1, 32), (2, 32)}  # twice the largest batch, on the counts measured
    assert predicted(4) == bigger | {(4, 8), (4, 16), (4, 32)}, "twice the most processes measured, within 4 cores"
    assert predicted(2) == bigger, "2 cores: no count past the 2 processes measured"
    assert predicted(None) == predicted(4), "a probe.json from before the cores were kept predicts as it did"


def test_twice_the_largest_batch_is_predicted_only_where_the_memory_line_lets_it_fit():
    from gpuwizard.analysis.probe.memory_model import fit_memory
    from gpuwizard.analysis.probe.results import ProbeResult, ProbeRow
    from gpuwizard.analysis.probe.verdict import fill_models

    rows = [ProbeRow(gpus=1, per_device_batch=b, outcome="measured", samples_per_s=b / truth(1, b)) for b in (8, 16)]

    def predicted(limit_mb: float) -> dict[int, str]:
        probe = ProbeResult(
            probe_id="p", preset="demo-cpu", trainer="demo", policy="demo", device="cpu", hardware="CPU",
            created=0.0, steps=300, headroom=0.1, rows=rows, batches=[8, 16], gpus=[1], cores=1,
            memory=fit_memory([(8, 400.0), (16, 480.0)], limit_mb, simulated=False),
        )  # fmt: skip
        fill_models(probe)
        assert [r.memory_mb for r in probe.predicted] == [320.0 + 10.0 * r.per_device_batch for r in probe.predicted]
        return {r.per_device_batch: r.detail for r in probe.predicted}

    assert predicted(10_000) == {32: "throughput model; fits by the memory line"}, "at 640 MB a device, the line's"
    assert predicted(600) == {}, "the line puts 32 past 600 MB (320 + 10 x 32 = 640)"
