"""`gpuwizard compare`: the arithmetic on known curves, and the command on two real demo runs (1 and 2 processes)."""

from __future__ import annotations

import json

import pytest

from conftest import gw_subprocess
from gpuwizard.compare import CurvePoint, RunFacts, at_samples, time_to, verdict
from gpuwizard.runner.rundir import list_runs


def facts(run_id: str, gpus: int, time_to_target: float, loss_eq: float) -> RunFacts:
    return RunFacts(
        run_id=run_id,
        preset="p",
        gpus=gpus,
        device="cuda",
        state="finished",
        duration_s=time_to_target,
        samples_per_s=100.0 * gpus,
        samples_seen=None,
        gpu_hours=gpus * time_to_target / 3600,
        cost=None,
        final_loss=0.05,
        time_to_target_s=time_to_target,
        gpu_hours_to_target=gpus * time_to_target / 3600,
        loss_at_equal_samples=loss_eq,
    )


def test_interpolation_between_logged_points():
    curve = [CurvePoint(0, 0, 1.0), CurvePoint(100, 10, 0.5), CurvePoint(200, 30, 0.1)]
    assert at_samples(curve, 50) == pytest.approx(0.75)
    assert at_samples(curve, 200) == pytest.approx(0.1)
    assert at_samples(curve, 201) is None, "never extrapolated past what the run saw"
    assert at_samples(curve, 20, by_time=True) == pytest.approx(0.3)
    assert time_to(curve, 0.3) == pytest.approx(20.0)
    assert time_to(curve, 0.05) is None


@pytest.mark.parametrize(
    "other_time, loss_eq, expected",
    [
        (
            620,
            1.0,
            "2 GPUs (b) reached loss 0.05 in 0.62x the time of 1 (a) for 1.24x the GPU-hours: pays for "
            "wall-clock, costs 24% more compute.",
        ),
        (450, 1.0, "in 0.45x the time of 1 (a) for 0.90x the GPU-hours: pays: sooner, for about the same compute"),
        (1000, 1.0, "in 1.00x the time of 1 (a) for 2.00x the GPU-hours: does not pay: no sooner, and costs more"),
        (1300, 1.0, "does not pay: slower."),
        (620, 1.3, "Per sample it learned less (loss 1.30x at equal samples)"),
    ],
)
def test_the_verdict_in_plain_words(other_time, loss_eq, expected):
    base, other = facts("a", 1, 1000, 1.0), facts("b", 2, other_time, loss_eq)
    assert expected in verdict(base, other, 0.05)


@pytest.mark.slow
def test_compare_two_real_demo_runs(tmp_path):
    preset = tmp_path / "demo-cmp.yaml"
    preset.write_text(f"""\
version: 1
name: demo-cmp
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {tmp_path}/dataset}}
hardware: {{gpus: 1, device: cpu}}
batch: {{size: 8}}
optim: {{steps: 200}}
mixed_precision: "no"
output_dir: {tmp_path}/out
trainer_options: {{log_every: 10, step_time_s: 0.02}}
costs: {{gpu_hour: 2.0}}
""")
    assert gw_subprocess("run", preset, "--headless", timeout=300).returncode == 0
    assert gw_subprocess("run", preset, "--headless", "--gpus", "2", timeout=300).returncode == 0
    two, one = (entry.run for entry in list_runs())
    result = gw_subprocess("compare", two.run_id, one.run_id, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["base"] == one.run_id, "against the run with the fewest GPUs"
    rows = {r["run_id"]: r for r in report["runs"]}
    assert (rows[one.run_id]["gpus"], rows[two.run_id]["gpus"]) == (1, 2)
    assert rows[two.run_id]["efficiency"] == pytest.approx(rows[two.run_id]["speedup"] / 2)
    assert rows[two.run_id]["cost"] == pytest.approx(rows[two.run_id]["gpu_hours"] * 2.0)
    assert len(rows[one.run_id]["curve"]) >= 10 and report["equal_samples"] == 200 * 8
    assert report["target_loss"] == pytest.approx(max(r["final_loss"] for r in rows.values()))
    assert report["equal_time_s"] == pytest.approx(min(r["curve"][-1][1] for r in rows.values()))
    assert all(r["loss_at_equal_time"] is not None for r in rows.values())
    [paragraph] = report["verdicts"]
    assert paragraph.startswith(f"2 processes ({two.run_id}) reached loss") and "the GPU-hours" in paragraph
    text = gw_subprocess("compare", two.run_id[:15], one.run_id).stdout
    assert "smp/s" in text and paragraph in text
    alone = gw_subprocess("compare", one.run_id)
    assert alone.returncode == 2 and "compare needs at least two different runs" in alone.stderr
