"""`probe --from-run RUN` refuses, in one paragraph each and before anything starts (runner/probe/from_run.py, through
runner/launch/resume.py): a trainer it does not support, an unknown run id, another preset's run, a probe's own
measurement run. A probe that starts from a real checkpoint: tests/system/test_probe_from_run.py."""

from __future__ import annotations

import json

from gpuwizard.core import paths
from support.presets import shipped_preset
from support.runs import copy_runs

OTHER = "20261201-005642-demo-cmp"
"""A real finished demo run of preset demo-cmp (tests/data/runs), in /tmp/cmp."""


def refused(gw, preset, run_id: str) -> str:
    said = gw("probe", preset, "--trust", "--gpus", "1", "--from-run", run_id)
    assert said.code == 2 and not said.out, said.err
    probes = paths.data_dir() / "probes"
    assert not probes.exists() or not any(probes.iterdir()), "refused before a probe folder was made"
    return said.err.strip()


def test_a_trainer_other_than_the_demos_is_refused(gw, tmp_path):
    preset = shipped_preset(tmp_path, "example-hf", hardware__device="cpu")
    assert refused(gw, preset, OTHER) == (
        f"example-hf: --from-run = '{OTHER}': a probe starts from a run's checkpoint only with the demo trainer; "
        "hf resumes its own saved state in its own folder, which the probe's configurations (other batches and "
        "process counts, each in a folder of its own) cannot share. Fix: probe without --from-run (B_noise then "
        "comes from the initial weights, and the verdict says so), or keep monitor.gauge: true on the full run, "
        "whose B_noise plan then uses."
    )


def test_an_unknown_run_id_is_refused(gw, tmp_path):
    preset = shipped_preset(tmp_path, "demo-cpu")
    assert refused(gw, preset, "20991231-000000-nope") == (
        "demo-cpu: --from-run = '20991231-000000-nope': no such run. Fix: pick a run id from `gpuwizard runs`."
    )


def test_another_presets_run_is_refused(gw, tmp_path):
    copy_runs(paths.data_dir(), OTHER)
    preset = shipped_preset(tmp_path, "demo-cpu")
    assert refused(gw, preset, OTHER) == (
        f"demo-cpu: --from-run = '{OTHER}': run {OTHER} is a run of demo-cmp (in /tmp/cmp), not of this preset "
        "file: its checkpoint holds another job's weights. Fix: name a run of demo-cpu from `gpuwizard runs`, or "
        "probe the preset that run came from."
    )


def test_a_probes_measurement_run_is_refused(gw, tmp_path):
    copy_runs(paths.data_dir(), OTHER)
    status = paths.data_dir() / "runs" / OTHER / "status.json"
    status.write_text(json.dumps(json.loads(status.read_text()) | {"probe": "20261201-010000-demo-cmp"}))
    preset = shipped_preset(tmp_path, "demo-cpu")
    assert refused(gw, preset, OTHER) == (
        f"demo-cpu: --from-run = '{OTHER}': run {OTHER} is a measurement of probe 20261201-010000-demo-cmp, which "
        "is not continued. Fix: resume a full run."
    )
