"""`gpuwizard compare` on real demo runs made here: 1 and 2 processes, and two runs on the same count."""

from __future__ import annotations

import pytest

from gpuwizard.runs.rundir import list_runs
from support.cli import gw_subprocess


@pytest.mark.slow
def test_compare_two_real_demo_runs(gw, tmp_path):
    """Three real runs of 100 steps, compared in process (`compare` only reads their folders)."""
    preset = tmp_path / "demo-cmp.yaml"
    preset.write_text(f"""\
version: 1
name: demo-cmp
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {tmp_path}/dataset}}
hardware: {{gpus: 1, device: cpu}}
batch: {{size: 8}}
optim: {{steps: 100}}
mixed_precision: "no"
launch: {{workdir: {tmp_path}}}
trainer_options: {{log_every: 5, step_time_s: 0.02}}
costs: {{gpu_hour: 2.0}}
""")
    assert gw_subprocess("run", "--trust", preset, "--headless", timeout=300).returncode == 0
    assert gw_subprocess("run", "--trust", preset, "--headless", "--gpus", "2", timeout=300).returncode == 0
    two, one = (entry.run for entry in list_runs())
    result = gw("compare", two.run_id, one.run_id, "--json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["base"] == one.run_id, "against the run with the fewest GPUs"
    rows = {r["run_id"]: r for r in report["runs"]}
    assert (rows[one.run_id]["gpus"], rows[two.run_id]["gpus"]) == (1, 2)
    assert rows[two.run_id]["efficiency"] == pytest.approx(rows[two.run_id]["speedup"] / 2)
    assert rows[two.run_id]["cost"] == pytest.approx(rows[two.run_id]["gpu_hours"] * 2.0)
    assert len(rows[one.run_id]["curve"]) >= 10 and report["equal_samples"] == 100 * 8
    assert report["target_loss"] == pytest.approx(max(r["final_loss"] for r in rows.values()))
    assert report["equal_time_s"] == pytest.approx(min(r["curve"][-1][1] for r in rows.values()))
    assert all(r["loss_at_equal_time"] is not None for r in rows.values())
    [paragraph] = report["verdicts"]
    assert paragraph.startswith(f"2 processes ({two.run_id}) reached loss") and "the process-hours" in paragraph
    text = gw("compare", two.run_id[:15], one.run_id).out
    assert "smp/s" in text and paragraph in text
    alone = gw("compare", one.run_id)
    assert alone.code == 2 and "compare needs at least two different runs" in alone.err

    smaller = tmp_path / "demo-cmp-b4.yaml"  # the same job on 2 processes again, at half the batch per process
    smaller.write_text(preset.read_text().replace("name: demo-cmp", "name: demo-cmp-b4").replace("size: 8", "size: 4"))
    assert gw_subprocess("run", "--trust", smaller, "--headless", "--gpus", "2", timeout=300).returncode == 0
    four = list_runs()[0].run
    same = gw("compare", two.run_id, four.run_id, "--json")
    assert same.code == 0, same.err
    report = same.json()
    assert all(r["speedup"] is None and r["efficiency"] is None for r in report["runs"])
    [paragraph] = report["verdicts"]
    assert paragraph.startswith(f"{four.run_id} and {two.run_id} both ran on 2 processes, so they say nothing")
    assert "batch per process 4 against 8" in paragraph and "preset demo-cmp-b4 against demo-cmp" in paragraph
    assert "pays" not in paragraph and "reached loss" in paragraph, "the loss curves still compare, run to run"
    mixed = gw("compare", one.run_id, two.run_id, four.run_id, "--json").json()
    assert [r["speedup"] is not None for r in mixed["runs"]] == [True, True, True], "each 2-process run against 1"
    assert [v.split(" ", 2)[:2] for v in mixed["verdicts"]] == [
        ["2", "processes"],
        ["2", "processes"],
        [four.run_id, "and"],
    ]
