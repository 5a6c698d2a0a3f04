"""`gpuwizard compare` on real demo runs made here: 1 and 2 processes, and two runs on the same count."""

from __future__ import annotations

import json

import pytest

from gpuwizard.runs.rundir import list_runs
from support.cli import gw_subprocess


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
launch: {{workdir: {tmp_path}}}
trainer_options: {{log_every: 10, step_time_s: 0.02}}
costs: {{gpu_hour: 2.0}}
""")
    assert gw_subprocess("run", "--trust", preset, "--headless", timeout=300).returncode == 0
    assert gw_subprocess("run", "--trust", preset, "--headless", "--gpus", "2", timeout=300).returncode == 0
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
    assert paragraph.startswith(f"2 processes ({two.run_id}) reached loss") and "the process-hours" in paragraph
    text = gw_subprocess("compare", two.run_id[:15], one.run_id).stdout
    assert "smp/s" in text and paragraph in text
    alone = gw_subprocess("compare", one.run_id)
    assert alone.returncode == 2 and "compare needs at least two different runs" in alone.stderr

    smaller = tmp_path / "demo-cmp-b4.yaml"  # the same job on 2 processes again, at half the batch per process
    smaller.write_text(preset.read_text().replace("name: demo-cmp", "name: demo-cmp-b4").replace("size: 8", "size: 4"))
    assert gw_subprocess("run", "--trust", smaller, "--headless", "--gpus", "2", timeout=300).returncode == 0
    four = list_runs()[0].run
    same = gw_subprocess("compare", two.run_id, four.run_id, "--json")
    assert same.returncode == 0, same.stderr
    report = json.loads(same.stdout)
    assert all(r["speedup"] is None and r["efficiency"] is None for r in report["runs"])
    [paragraph] = report["verdicts"]
    assert paragraph.startswith(f"{four.run_id} and {two.run_id} both ran on 2 processes, so they say nothing")
    assert "batch per process 4 against 8" in paragraph and "preset demo-cmp-b4 against demo-cmp" in paragraph
    assert "pays" not in paragraph and "reached loss" in paragraph, "the loss curves still compare, run to run"
    mixed = json.loads(gw_subprocess("compare", one.run_id, two.run_id, four.run_id, "--json").stdout)
    assert [r["speedup"] is not None for r in mixed["runs"]] == [True, True, True], "each 2-process run against 1"
    assert [v.split(" ", 2)[:2] for v in mixed["verdicts"]] == [
        ["2", "processes"],
        ["2", "processes"],
        [four.run_id, "and"],
    ]
