"""The batch script's fields, planned in process: a line break or control character in any field that reaches the
script is one paragraph, sbatch values take only the shape sbatch reads, and the shapes clusters use are accepted
(issue 19, item 1)."""

from __future__ import annotations

import json

import pytest

from support.slurm import lerobot_preset

REACHES_THE_SCRIPT = [
    "slurm.partition",
    "slurm.account",
    "slurm.time",
    "slurm.sbatch_args.0",
    "slurm.setup.0",
    "launch.env.NCCL_DEBUG",
    "launch.extra_args",
    "launch.workdir",
    "launch.python",
    "dataset.repo_id",
    "dataset.root",
    "output_dir",
    "trainer_options.policy_path",
    "trainer_options.pretrained_path",
    "trainer_options.repo_id",
    "name",
]


@pytest.mark.parametrize("field", REACHES_THE_SCRIPT)
@pytest.mark.parametrize("breaker", ["\n", "\r", "\x1b", "\x00", "\x85"])
def test_a_line_break_or_control_character_in_any_field_of_the_script_is_one_paragraph(
    gw, write_preset, field, breaker
):
    value = f"gpu{breaker}touch /tmp/INJECTED"
    changes = {field: [value] if field == "launch.extra_args" else value}
    if field.startswith("slurm.sbatch_args"):
        changes[field] = f"--qos=high{breaker}touch"
    path = write_preset(json.dumps(lerobot_preset(**changes)))
    result = gw("preview", path, "--format", "sbatch")
    shown = field.removesuffix(".0") if field == "slurm.setup.0" else field
    assert result.code == 2 and result.out == "", result.out
    assert shown.split(".")[-1] in result.err and "Traceback" not in result.err
    assert result.err.count("\n") == 1, f"one paragraph: {result.err}"
    assert "Fix:" in result.err


@pytest.mark.parametrize("given", ["PAYLOAD=ok\ntouch /tmp/INJECTED", "PAYLOAD"])
def test_an_env_value_with_a_line_break_is_one_paragraph(gw, monkeypatch, given):
    monkeypatch.setenv("PAYLOAD", "ok\ntouch /tmp/INJECTED")
    result = gw("run", "--trust", "demo-cpu", "--headless", "--env", given)
    assert result.code == 2 and result.err.count("\n") == 1 and "Traceback" not in result.err, result.err
    assert "--env = 'PAYLOAD': the value of PAYLOAD holds control characters (U+000A)" in result.err


@pytest.mark.parametrize(
    "field, value",
    [
        ("slurm.partition", "gpu;touch /tmp/INJECTED"),
        ("slurm.partition", "$(touch /tmp/INJECTED)"),
        ("slurm.partition", "`touch /tmp/INJECTED`"),
        ("slurm.partition", 'gpu"'),
        ("slurm.account", "robotics #comment"),
        ("slurm.account", "it's"),
        ("slurm.time", "04:00:00 --qos=high"),
        ("slurm.sbatch_args.0", "--qos=high --partition=other"),
        ("slurm.sbatch_args.0", '--comment="two words"'),
        ("slurm.sbatch_args.0", "--comment=$(touch /tmp/INJECTED)"),
        ("slurm.sbatch_args.0", "--comment=a#b"),
        ("slurm.sbatch_args.0", "-p gpu"),
    ],
)
def test_sbatch_values_take_only_the_shape_sbatch_reads(gw, write_preset, field, value):
    result = gw("preview", write_preset(json.dumps(lerobot_preset(**{field: value}))), "--format", "sbatch")
    assert result.code == 2 and result.err.count("\n") == 1 and "Traceback" not in result.err, result.err
    assert f"{field} = {value!r}" in result.err and "Fix:" in result.err


def test_the_shapes_clusters_use_are_accepted(gw, write_preset):
    data = lerobot_preset(
        **{
            "slurm.partition": "gpu,gpu-long",
            "slurm.account": "proj_robotics.2026",
            "slurm.time": "1-00:00:00",
            "slurm.sbatch_args": ["--constraint=h100&ib", "--exclusive", "--mail-user=me@lab.org", "--gres=gpu:h100:4"],
        }
    )
    result = gw("preview", write_preset(json.dumps(data)), "--format", "sbatch")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert "#SBATCH --partition=gpu,gpu-long" in lines and "#SBATCH --account=proj_robotics.2026" in lines
    assert '#SBATCH --constraint="h100&ib"' in lines and "#SBATCH --exclusive" in lines
    assert "#SBATCH --gres=gpu:h100:4" in lines
