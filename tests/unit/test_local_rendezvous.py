"""A single-node command uses gpuwizard's loopback rendezvous, and torchrun finds it on the PYTHONPATH the command
sets; the real job's sockets, and the real torchrun without the plugin: tests/system/test_rendezvous_loopback.py."""

from __future__ import annotations

import os

import pytest

from gpuwizard.model.preset import with_field
from gpuwizard.model.preset_files import load_preset
from gpuwizard.planning.plan import build_command, make_plan
from gpuwizard.trainers.rendezvous import LOOPBACK_BACKEND, LOOPBACK_DIR


@pytest.mark.parametrize("name", ["demo-cpu", "so100-act-ddp2", "pi05-openpi-pytorch", "groot-n17-8gpu"])
def test_one_node_runs_the_loopback_rendezvous_with_its_plugin_on_the_path(name):
    plan, ctx = make_plan(load_preset(name))
    spec = build_command(ctx)
    torchrun = spec.argv[: spec.argv.index("--max-restarts=0") + 1]
    assert torchrun[-5:] == [
        "--nproc-per-node=" + str(plan.processes_per_node),
        f"--rdzv-backend={LOOPBACK_BACKEND}",
        "--rdzv-endpoint=127.0.0.1",
        f"--rdzv-id={name}",
        "--max-restarts=0",
    ], torchrun
    assert not any(a.startswith(("--standalone", "--master")) for a in spec.argv)
    assert spec.env["PYTHONPATH"].split(os.pathsep)[0] == str(LOOPBACK_DIR)
    assert not [p.message for p in plan.notes if "every interface" in p.message]


def test_a_pythonpath_the_preset_sets_follows_the_plugin():
    preset = with_field(load_preset("demo-cpu"), "launch.env", {"PYTHONPATH": "/opt/mine"})
    _, ctx = make_plan(preset)
    assert build_command(ctx).env["PYTHONPATH"] == os.pathsep.join([str(LOOPBACK_DIR), "/opt/mine"])


@pytest.mark.parametrize(
    "name, field, value",
    [
        ("groot-n17-8gpu", "hardware.gpus", 1),  # launch_finetune.py itself, no torchrun
        ("example-openpi", "hardware.gpus", 2),  # JAX: one process over every device
        ("so100-act-ddp2", "hardware.nodes", 2),  # node 0's endpoint, with its own firewall note
    ],
)
def test_no_plugin_where_no_single_node_torchrun_starts(name, field, value):
    preset = with_field(load_preset(name), field, value)
    if field == "hardware.nodes":
        preset = with_field(with_field(preset, "hardware.rdzv_endpoint", "10.0.0.5:29500"), "hardware.node_rank", 0)
    _, ctx = make_plan(preset)
    spec = build_command(ctx)
    assert f"--rdzv-backend={LOOPBACK_BACKEND}" not in spec.argv
    assert str(LOOPBACK_DIR) not in spec.env.get("PYTHONPATH", "")
