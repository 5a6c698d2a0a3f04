"""`gpuwizard probe` in time to the same loss, for real: the demo's known-noise task (weights held, so B_noise stays at
its closed form) on 1 and 2 gloo processes with accumulation 2, so every configuration is gauged (one process through
its micro-batches, two through DDP, which the demo all-reduces at every micro-batch). Each row's B_noise is held to
the closed form, the throughput model is fitted from the four rows and predicts twice the largest batch (and 4
processes where the cores hold them), marked as predicted and kept apart from the measured rows, and the verdict says
what the second process buys; plan shows the B_noise. And the gauge's reading of a DDP that all-reduces every
micro-batch never changes what the demo computes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE
from gpuwizard.analysis.probe.results import ProbeResult
from gpuwizard.analysis.probe.verdict import result_text
from gpuwizard.demo.noise import closed_form
from gpuwizard.gauge.gwgauge import ACCUM_VAR, FILE_VAR, GLOBAL_BATCH_VAR, RANK_BATCH_VAR
from gpuwizard.runner.launch.gauge_env import GAUGE_DIR

PRESET = """\
version: 1
name: noise-probe
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 64, grad_accum: 2}}
optim: {{lr: 1.0e-3, steps: 400}}
mixed_precision: "no"
output_dir: {root}/out
trainer_options: {{task: noise, noise_dim: 4, noise_sigma: 1.0, noise_offset: 0.25, noise_hold: true}}
monitor: {{hang_timeout_s: 120}}
"""
TRUTH = closed_form(4, 1.0, 0.25)


@pytest.mark.slow
def test_probe_measures_b_noise_fits_the_throughput_model_and_says_the_time_to_the_same_loss(gw, tmp_path):
    path = tmp_path / "noise-probe.yaml"
    path.write_text(PRESET.format(root=tmp_path))
    ran = gw("probe", "--trust", path, "--gpus", "1,2", "--batch", "32,128", "--json")
    assert ran.code == 0, ran.err
    result = ProbeResult.model_validate(ran.json())
    assert sorted((r.gpus, r.per_device_batch, r.outcome) for r in result.rows) == [
        (1, 32, "measured"),
        (1, 128, "measured"),
        (2, 32, "measured"),
        (2, 128, "measured"),
    ]
    for row in result.rows:
        assert row.noise is not None, row.noise_detail
        assert row.noise.b_simple == pytest.approx(TRUTH, rel=0.25), (row.gpus, row.per_device_batch, row.noise)
        rank = row.per_device_batch * 2
        expected = (rank // 2, rank) if row.gpus == 1 else (rank, rank * 2)
        assert (row.noise.b_small, row.noise.b_big) == expected, "micro-batches on one process, ranks on two"
    assert result.noise is not None and not result.noise.provisional
    assert result.noise.b_simple == pytest.approx(TRUTH, rel=0.25) and " runs pooled (" in result.noise.source

    model = result.throughput
    assert model is not None and model.rows == 4 and model.gpus == [1, 2] and model.batches == [32, 128]
    assert model.median.comm_s is not None and model.rms_residual is not None
    # twice the largest batch on the counts measured, where the fit tells a sample's cost (on this tiny task a loaded
    # machine can make it negative, and it is dropped), and 4 processes only where the cores hold them (ranks past
    # the cores would share them, which the model does not know) and the fit tells the all-reduce's cost
    predicted = sorted((r.gpus, r.per_device_batch) for r in result.predicted)
    per_sample, comm = model.median.per_sample_s is not None, model.median.comm_s is not None
    four = (os.cpu_count() or 1) >= 4 and comm
    expected = sorted(
        (g, b)
        for g in (1, 2, 4)
        for b in (32, 128, 256)
        if (g == 4 and four or g < 4 and b == 256) and (b < 256 or per_sample)
    )
    assert predicted == expected, (predicted, model)
    assert all(r.outcome == "predicted" for r in result.predicted)
    assert all(r.outcome != "predicted" for r in result.rows), "predicted rows never among the measured"
    line = result.memory  # the grid's own memory line gives each predicted row its memory per device
    assert line is not None and line.batches == [32, 128], line
    for r in result.predicted:
        assert r.memory_mb == pytest.approx(line.fixed_mb + line.per_sample_mb * r.per_device_batch), r
    for r in result.predicted:  # a fit 100% or more off at some row (a loaded machine) leaves no upper end
        assert r.rate_low and r.rate_low <= r.samples_per_s, r
        assert r.samples_per_s <= r.rate_high if r.rate_high else (model.max_residual or 0) >= 1, r
    assert {(t.gpus, t.per_device_batch, t.predicted) for t in result.time_to_loss} == {
        *((r.gpus, r.per_device_batch, False) for r in result.rows),
        *((gpus, batch, True) for gpus, batch in expected),
    }
    assert result.goodput.startswith("Time to the same loss (B_noise ~") and result.goodput in result.verdict
    assert " reach it in " in result.goodput or " reaches it in " in result.goodput, result.goodput

    text = result_text(result)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    rows = [line for line in text.splitlines() if line.split()[:1] and line.split()[0].isdigit()]  # the table's
    predicted_lines = [line for line in rows if line.rstrip().endswith("predicted")]
    assert [tuple(map(int, line.split()[:2])) for line in predicted_lines] == expected
    assert "B_noise (gradient noise scale" in text and "throughput model: step time =" in text

    plan = gw("plan", path).out
    assert "probed: B_noise ≈ " in plan, plan


def ddp_accumulating_job(tmp_path: Path, name: str, gauge: bool) -> tuple[list[str], Path]:
    """The demo policy on 2 gloo processes, 4 samples x accumulation 2, 20 steps; its losses and its folder."""
    out = tmp_path / name
    out.mkdir()
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "CUDA_VISIBLE_DEVICES": ""}
    if gauge:
        env |= {FILE_VAR: str(out / GAUGE_FILE), ACCUM_VAR: "2", RANK_BATCH_VAR: "8", GLOBAL_BATCH_VAR: "16"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(GAUGE_DIR), env.get("PYTHONPATH")) if p)
    torchrun = str(Path(sys.executable).parent / "torchrun")
    argv = [torchrun, "--standalone", "--nproc-per-node=2", "-m", "gpuwizard.demo.train", "--steps=20"]
    argv += ["--batch-size=4", "--grad-accum=2", "--log-every=1", "--episodes=4"]
    argv += [f"--dataset-root={tmp_path / 'dataset'}", f"--output-dir={out}"]
    ran = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    return [line.split("loss=")[1].split()[0] for line in ran.stdout.splitlines() if " loss=" in line], out


@pytest.mark.slow
def test_reading_every_micro_batchs_all_reduce_never_changes_what_the_demo_computes(tmp_path):
    plain, plain_out = ddp_accumulating_job(tmp_path, "plain", gauge=False)
    gauged, gauged_out = ddp_accumulating_job(tmp_path, "gauged", gauge=True)
    assert len(plain) == 20 and gauged == plain, "the same losses, bit for bit"
    weights = [
        torch.load(o / "checkpoints" / "last" / "model.pt", weights_only=True)["model"] for o in (plain_out, gauged_out)
    ]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    lines = [json.loads(line) for line in (gauged_out / GAUGE_FILE).read_text().splitlines()]
    assert not [line for line in lines if line["kind"] == "unmeasured"]
    steps = [line for line in lines if line["kind"] == "step"]
    assert all(s["local_sq"] is None for s in steps if s["step"] == 1), "the first step finds the second round"
    assert all(s["local_sq"] > 0 and s["avg_sq"] > 0 for s in steps if s["step"] > 1)
