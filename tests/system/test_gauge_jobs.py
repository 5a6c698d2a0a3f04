"""The gauge in real jobs (2 gloo processes under torchrun on CPU): it measures the demo's known-noise task within 25%
of the closed form through `gpuwizard run --headless`, never changes what the demo computes, says what it could not
measure, and chains the environment's own sitecustomize."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE, estimate, read_gauge
from gpuwizard.demo.noise import closed_form
from gpuwizard.gauge.gwgauge import ACCUM_VAR, FILE_VAR, GLOBAL_BATCH_VAR, RANK_BATCH_VAR
from gpuwizard.runner.launch.gauge_env import GAUGE_DIR
from gpuwizard.runs.rundir import list_runs
from support.cli import gw_subprocess
from support.presets import NOISE_PRESET

TORCHRUN = str(Path(sys.executable).parent / "torchrun")


def gauged_noise_run(tmp_path: Path, name: str, sigma: float, gpus: int = 2, accum: int = 1) -> float:
    """A headless run of the noise task (d 4, |w - w*| 0.25) with its weights held (each step at the same point), 512
    samples per process and step; its measured B_simple."""
    preset = tmp_path / f"{name}.yaml"
    batch = 512 // accum
    preset.write_text(
        NOISE_PRESET.format(
            name=name, root=tmp_path, gpus=gpus, batch=batch, accum=accum, steps=2000, dim=4, sigma=sigma, offset=0.25
        )
    )
    ran = gw_subprocess("run", "--trust", preset, "--headless", timeout=900)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run = next(entry.run for entry in list_runs() if entry.run.run_id.endswith(name))
    read = read_gauge(run.path / GAUGE_FILE)
    assert read.unmeasured == [] and len(read.steps) == (2000 if accum == 1 else 1999), "micro-batches from step 2"
    small, big = (512, 512 * gpus) if gpus > 1 else (batch, 512)
    assert {(s.b_small, s.b_big) for s in read.steps} == {(small, big)}, "the plan's batches reached the gauge"
    found = estimate(read.steps)
    assert found is not None and found.b_simple is not None and not found.provisional, found
    reader = subprocess.run(
        [sys.executable, "-m", "gpuwizard.analysis.probe.noise_scale", str(run.path)], capture_output=True, text=True
    )
    assert reader.returncode == 0 and reader.stdout.startswith(f"B_simple ~ {found.b_simple:.3g} samples"), reader
    return found.b_simple


@pytest.mark.slow
def test_the_gauge_measures_the_known_noise_scale_through_a_headless_run(tmp_path):
    """The loss 0.5 (x.w - y)^2 with x ~ N(0, I_d), y = x.w* + e, e ~ N(0, sigma^2), at w = w* + D: the per-sample
    gradient is g = x (x.D - e), so G = E[g] = D; Isserlis gives E[x x^T (x.D)^2] = |D|^2 I + 2 D D^T, and the noise
    adds sigma^2 I, so tr(Sigma) = E|g|^2 - |G|^2 = (d + 1)|D|^2 + sigma^2 d and B_simple = (d + 1) + sigma^2 d / |D|^2.
    The measurement is within 25% of it, and 10x the noise variance reads about 10x higher (the closed form's own
    ratio, (5 + 640) / (5 + 64) here)."""
    low_sigma, high_sigma = 1.0, math.sqrt(10.0)
    low = gauged_noise_run(tmp_path, "noise-low", low_sigma)
    high = gauged_noise_run(tmp_path, "noise-high", high_sigma)
    truth_low, truth_high = closed_form(4, low_sigma, 0.25), closed_form(4, high_sigma, 0.25)
    assert low == pytest.approx(truth_low, rel=0.25)
    assert high == pytest.approx(truth_high, rel=0.25)
    assert high / low == pytest.approx(truth_high / truth_low, rel=0.25) and high / low > 7


@pytest.mark.slow
def test_one_process_with_accumulation_reads_its_micro_batches(tmp_path):
    """torchrun's one process (DDP of one rank: nothing to average) with 4 micro-batches of 128: each micro-batch's
    share of the gradient is the small batch, the step's 512 samples the big one."""
    assert gauged_noise_run(tmp_path, "noise-accum", 1.0, gpus=1, accum=4) == pytest.approx(
        closed_form(4, 1.0, 0.25), rel=0.25
    )


def demo_job(
    tmp_path: Path, name: str, gauge: bool, torchrun: bool = True, accum: int = 1, **env: str
) -> tuple[list[str], Path]:
    """The demo policy task, 30 steps of 2 x 4 samples (or one plain process without torchrun); its loss lines."""
    out = tmp_path / name
    out.mkdir()
    job_env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "CUDA_VISIBLE_DEVICES": "", **env}
    if gauge:
        job_env |= {FILE_VAR: str(out / GAUGE_FILE), ACCUM_VAR: str(accum), RANK_BATCH_VAR: str(4 * accum)}
        job_env[GLOBAL_BATCH_VAR] = str(4 * accum * (2 if torchrun else 1))
        job_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(GAUGE_DIR), env.get("PYTHONPATH")) if p)
    launcher = [TORCHRUN, "--standalone", "--nproc-per-node=2"] if torchrun else [sys.executable]
    trainer = ["-m", "gpuwizard.demo.train", "--steps=30", "--batch-size=4", f"--grad-accum={accum}", "--log-every=1"]
    paths = [f"--dataset-root={tmp_path / 'dataset'}", f"--output-dir={out}"]
    ran = subprocess.run(launcher + trainer + paths, env=job_env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    losses = [line.split("loss=")[1].split()[0] for line in ran.stdout.splitlines() if " loss=" in line]
    assert len(losses) == 30
    return losses, out


def gauge_lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / GAUGE_FILE).read_text().splitlines()]


def same_weights(*outs: Path) -> bool:
    first, second = (torch.load(o / "checkpoints" / "last" / "model.pt", weights_only=True)["model"] for o in outs)
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.slow
def test_the_gauge_never_changes_what_the_demo_computes(tmp_path):
    plain, plain_out = demo_job(tmp_path, "plain", gauge=False)
    gauged, gauged_out = demo_job(tmp_path, "gauged", gauge=True)
    assert gauged == plain and same_weights(plain_out, gauged_out), "the same losses and weights, bit for bit"
    assert not (plain_out / GAUGE_FILE).exists()
    lines = gauge_lines(gauged_out)
    steps = [line for line in lines if line["kind"] == "step"]
    assert sorted((s["rank"], s["step"]) for s in steps) == [(r, i) for r in (0, 1) for i in range(1, 31)]
    assert all(s["local_sq"] > 0 and s["avg_sq"] > 0 and s["rss_mb"] > 0 for s in steps), "the hook measured"
    assert len({s["avg_sq"] for s in steps if s["step"] == 5}) == 1, "the averaged gradient is the same on both ranks"


@pytest.mark.slow
def test_without_ddp_the_gauge_says_what_it_did_not_measure_and_chains_sitecustomize(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text(
        "import os, pathlib\npathlib.Path(os.environ['CHAINED_MARK']).write_text('ran')\n"
    )
    mark = tmp_path / "chained"
    losses, out = demo_job(
        tmp_path, "alone", gauge=True, torchrun=False, PYTHONPATH=str(theirs), CHAINED_MARK=str(mark)
    )
    assert mark.read_text() == "ran", "the environment's own sitecustomize still ran"
    lines = gauge_lines(out)
    [told] = [line for line in lines if line["kind"] == "unmeasured"]
    assert "no DistributedDataParallel module" in told["why"]
    steps = [line for line in lines if line["kind"] == "step"]
    assert len(steps) == 30 and all(s["local_sq"] is None and s["max_rss_mb"] > 0 for s in steps)
    alone_again, again_out = demo_job(tmp_path, "alone-plain", gauge=False, torchrun=False)
    assert losses == alone_again and same_weights(out, again_out)


@pytest.mark.slow
def test_micro_batches_are_read_without_changing_the_steps(tmp_path):
    plain, plain_out = demo_job(tmp_path, "accum-plain", gauge=False, torchrun=False, accum=3)
    gauged, gauged_out = demo_job(tmp_path, "accum-gauged", gauge=True, torchrun=False, accum=3)
    assert gauged == plain and same_weights(plain_out, gauged_out)
    steps = [line for line in gauge_lines(gauged_out) if line["kind"] == "step"]
    assert all(s["local_sq"] > 0 and (s["rank_batch"], s["global_batch"]) == (4, 12) for s in steps[1:])
    assert "unmeasured" not in {line["kind"] for line in gauge_lines(gauged_out)}
