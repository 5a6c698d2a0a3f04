"""`plan` says how many passes over the dataset a run makes (issue 28, "Also"): samples seen over the frames of the
dataset's own metadata (meta/info.json, as LeRobot 0.6.1 writes it), where that metadata is here to read."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "datasets" / "so100_tiny_lerobot061"
PRESET = """\
version: 1
name: epochs
trainer: lerobot
policy: act
dataset: {{repo_id: me/tiny, root: {root}}}
hardware: {{gpus: 1, device: cpu}}
batch: {{size: 4}}
optim: {{steps: 100}}
"""


def test_the_plan_counts_epochs_from_the_datasets_own_frames(gw, write_preset):
    frames = json.loads((DATA / "meta" / "info.json").read_text())["total_frames"]
    result = gw("plan", "--json", write_preset(PRESET.format(root=DATA)))
    plan = json.loads(result.out)
    assert plan["samples_seen"] == 400 and plan["epochs"] == round(400 / frames, 2), (plan["epochs"], frames)
    text = gw("plan", write_preset(PRESET.format(root=DATA))).out
    assert f"400 samples seen, ~{round(400 / frames, 2):g} epochs of the dataset's frames" in text, text


def test_no_epochs_where_the_dataset_is_not_here(gw, write_preset):
    plan = json.loads(gw("plan", "--json", write_preset(PRESET.format(root="/nonexistent/tiny"))).out)
    assert plan["epochs"] is None
