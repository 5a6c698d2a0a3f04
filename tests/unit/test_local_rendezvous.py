"""A single-node command keeps torchrun's rendezvous in a private file (no port), and the plan says what still
listens beyond loopback; the real job's sockets: tests/system/test_rendezvous_loopback.py."""

from __future__ import annotations

import pytest

from gpuwizard.model.preset import with_field
from gpuwizard.model.preset_files import load_preset
from gpuwizard.planning.plan import build_command, make_plan

STORE_NOTE = "the store torchrun shares with the ranks listens on every interface"


def store_notes(preset) -> list[str]:
    plan, _ = make_plan(preset)
    return [p.message for p in plan.notes if STORE_NOTE in p.message]


@pytest.mark.parametrize("name", ["demo-cpu", "so100-act-ddp2", "pi05-openpi-pytorch", "groot-n17-8gpu"])
def test_one_node_runs_its_rendezvous_in_a_private_file_and_the_plan_names_the_open_store(name):
    preset = load_preset(name)
    plan, ctx = make_plan(preset)
    argv = build_command(ctx).argv
    torchrun = argv[: argv.index("--max-restarts=0") + 1]
    assert torchrun[-5:] == [
        "--nproc-per-node=" + str(plan.processes_per_node),
        "--rdzv-backend=c10d",
        "--rdzv-conf=store_type=file",
        f"--rdzv-id={name}",
        "--max-restarts=0",
    ], torchrun
    assert not any(a.startswith(("--standalone", "--rdzv-endpoint", "--master")) for a in argv)
    assert len(store_notes(preset)) == 1, [p.message for p in plan.notes]


@pytest.mark.parametrize(
    "name, field, value",
    [
        ("groot-n17-8gpu", "hardware.gpus", 1),  # launch_finetune.py itself, no torchrun
        ("example-openpi", "hardware.gpus", 2),  # JAX: one process over every device
        ("so100-act-ddp2", "hardware.nodes", 2),  # node 0's endpoint, with its own firewall note
    ],
)
def test_no_store_note_where_no_single_node_torchrun_starts(name, field, value):
    preset = with_field(load_preset(name), field, value)
    if field == "hardware.nodes":
        preset = with_field(with_field(preset, "hardware.rdzv_endpoint", "10.0.0.5:29500"), "hardware.node_rank", 0)
    assert store_notes(preset) == []
