"""A real probe measures its own spread (issue 25): 1 and 2 gloo processes of the demo under torchrun, `--steps 60`
so each configuration runs to its end; each row keeps the median samples/s of its sub-windows and their
slowest-fastest, the verdict says how sure it is, and the history hides the probe's runs unless asked."""

from __future__ import annotations

import pytest

from gpuwizard.analysis.probe.results import SUB_WINDOWS, ProbeResult
from gpuwizard.analysis.probe.verdict import result_text
from gpuwizard.runs.rundir import history_entries, is_probe_run, list_runs

PRESET = """\
version: 1
name: spread-demo
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 4}}
optim: {{lr: 1.0e-3, steps: 200}}
mixed_precision: "no"
trainer_options: {{episodes: 4}}
monitor: {{hang_timeout_s: 60}}
"""


@pytest.mark.slow
def test_a_probe_keeps_each_rows_spread_and_says_how_sure_its_recommendation_is(gw, tmp_path):
    path = tmp_path / "spread-demo.yaml"
    path.write_text(PRESET.format(root=tmp_path))
    result = gw("probe", "--trust", path, "--gpus", "1,2", "--batch", "4", "--steps", "60", "--json")
    assert result.code == 0, result.err
    probe = ProbeResult.model_validate(result.json())
    assert probe.state == "finished" and probe.steps == 60 and probe.steps_asked
    for row in probe.rows:
        assert row.outcome == "measured", row
        assert row.sub_windows == SUB_WINDOWS, row
        assert row.rate_low is not None and row.rate_high is not None and row.samples_per_s is not None
        assert 0 < row.rate_low <= row.samples_per_s <= row.rate_high, row
        assert row.window is not None and row.window.startswith("steps ") and "-60 " in row.window, "ran to its end"
    said = probe.verdict[0]
    assert said.startswith(("Recommended: ", "Cannot tell here whether 2 processes pay")), probe.verdict
    assert "adjacent windows" in said, said
    if "under a different background" in said:  # a loaded machine (CI): no answer, the load that kept it and a rerun
        assert said.startswith("Cannot tell") and "outside the probe" in said and "--repeat" in said, said
    else:
        assert "in samples/s" in said or "in time to the same loss" in said, said
    text = result_text(probe)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "60 steps per configuration, each run to its end (--steps)" in " ".join(text.split())
    low, high = (probe.rows[0].rate_low, probe.rows[0].rate_high)
    spec = ".1f" if high < 100 else ".0f"
    assert f"{low:{spec}}-{high:{spec}}" in text

    entries = list_runs("spread-demo")
    assert len(entries) == 4 and all(is_probe_run(e) for e in entries)  # the grid's 2, then both again
    assert history_entries(entries, probes=False) == ([], 4)
    assert history_entries(entries, probes=True) == (entries, 0)
