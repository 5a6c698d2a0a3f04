"""Two nodes on loopback without a scheduler: `gpuwizard run PRESET --node-rank K` on each, real torchrun agents
meeting at a c10d rendezvous (shared/reference/slurm.md, "Without SLURM")."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwizard.runs.rundir import RunDir, list_runs
from support.cli import gw_subprocess, poll_until

pytestmark = pytest.mark.slow

PRESET = """\
version: 1
name: demo-2node
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 1, device: cpu, nodes: 2, rdzv_endpoint: "127.0.0.1:{port}"}}
batch: {{size: 4}}
optim: {{steps: {steps}}}
mixed_precision: "no"
output_dir: {root}/out
trainer_options: {{log_every: 5, step_time_s: 0.05}}
monitor: {{hang_timeout_s: {hang}, first_step_timeout_s: {first}}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def two_node_preset(tmp_path):
    from gpuwizard.demo.dataset import ensure_dataset

    ensure_dataset(tmp_path / "dataset", 20)  # both "nodes" share this machine's disk: written once, up front

    def make(steps=60, hang=60, first=120, port=None) -> Path:
        path = tmp_path / "demo-2node.yaml"
        path.write_text(PRESET.format(root=tmp_path, port=port or free_port(), steps=steps, hang=hang, first=first))
        return path

    return make


def start_node(preset: Path, rank: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", "--trust", str(preset), "--headless", "--node-rank", str(rank)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def run_of_node(rank: int) -> RunDir:
    runs = [e.run for e in list_runs() if e.status is not None and e.run.job().node_rank == rank]
    assert runs, f"node {rank} created its run folder"
    return runs[0]


def test_two_nodes_on_loopback_finish_green_with_world_size_two(two_node_preset):
    preset = two_node_preset()
    plan = json.loads(gw_subprocess("plan", preset, "--json").stdout)
    assert (plan["world_size"], plan["nodes"], plan["processes_per_node"]) == (2, 2, 1)
    assert any("through lo (127.0.0.1)" in note and "NCCL_SOCKET_IFNAME=lo" in note for note in plan["notes"])
    node1 = start_node(preset, 1)  # started first: it counts down until node 0's store answers
    poll_until(lambda: list_runs() == [] and node1.poll() is None, 5)
    node0 = start_node(preset, 0)
    out0, _ = node0.communicate(timeout=300)
    out1, _ = node1.communicate(timeout=300)
    assert node0.returncode == 0, out0
    assert node1.returncode == 0, out1
    assert "waiting for node 0 at 127.0.0.1:" in out1
    head, other = run_of_node(0), run_of_node(1)
    assert "Effective batch size: 4 x 2 workers x 1 grad accum = 8" in head.log.read_text()
    assert head.progress().step == 60 and head.status().state == "finished" and other.status().state == "finished"
    events, _ = other.events()
    assert [e.title for e in events if e.severity == "error"] == [], "a green run's agent teardown is no failure"
    for run, rank in ((head, 0), (other, 1)):
        env = json.loads((run.path / "environment.json").read_text())
        assert env["node_rank"] == rank and env["nodes"] == 2 and env["torch"] and env["trainer_package"] == "gpuwizard"


def test_a_dead_node_is_reported_by_the_other_within_its_hang_timeout(two_node_preset):
    hang = 45
    preset = two_node_preset(steps=5000, hang=hang)
    node0 = start_node(preset, 0)
    node1 = start_node(preset, 1)
    poll_until(lambda: len(list_runs()) == 2 and (run_of_node(0).progress() or None) is not None, 120)
    head = run_of_node(0)
    poll_until(lambda: (head.progress().step or 0) >= 10, 120)
    supervisor = run_of_node(1).status().supervisor
    os.kill(supervisor.pid, signal.SIGKILL)  # node 1 dies with everything on it (its ranks follow their parent)
    killed = time.monotonic()
    poll_until(lambda: head.status().final, hang + 30)
    reported = time.monotonic() - killed
    out0, _ = node0.communicate(timeout=60)
    node1.communicate(timeout=60)
    assert reported < hang, f"node 0 noticed after {reported:.0f} s"
    events, _ = head.events()
    assert head.status().state == "failed", out0
    assert any(e.kind in ("rank_failed", "gloo_error") for e in events), [e.title for e in events]


def test_node_one_counts_down_and_gives_up_when_node_zero_never_comes(two_node_preset):
    preset = two_node_preset(first=6)
    result = gw_subprocess("run", "--trust", preset, "--headless", "--node-rank", "1", timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "waiting for node 0 at 127.0.0.1:" in result.stdout and "s left" in result.stdout
    assert "node 0 did not answer at 127.0.0.1:" in result.stderr and "within 6 s" in result.stderr
    assert list_runs() == []


def test_multi_node_bad_input_is_one_paragraph_each(two_node_preset):
    busy = socket.socket()
    busy.bind(("", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        taken = gw_subprocess("run", "--trust", two_node_preset(port=port), "--headless", "--node-rank", "0")
    finally:
        busy.close()
    assert taken.returncode == 2 and f"port {port} is already in use on node 0" in taken.stderr
    beyond = gw_subprocess("run", "--trust", two_node_preset(), "--headless", "--node-rank", "2")
    assert beyond.returncode == 2 and "--node-rank = 2: hardware.node_rank 2 must be below hardware.nodes 2" in (
        beyond.stderr
    )
    nowhere = two_node_preset()
    nowhere.write_text(nowhere.read_text().replace('"127.0.0.1:', '"no-such-host.invalid:'))
    unresolved = gw_subprocess("run", "--trust", nowhere, "--headless", "--node-rank", "0")
    assert unresolved.returncode == 2 and "the host no-such-host.invalid does not resolve on this node" in (
        unresolved.stderr
    )
    elsewhere = two_node_preset()
    elsewhere.write_text(elsewhere.read_text().replace('"127.0.0.1:', '"192.0.2.1:'))  # TEST-NET-1: never local
    foreign = gw_subprocess("run", "--trust", elsewhere, "--headless", "--node-rank", "0")
    assert foreign.returncode == 2 and "192.0.2.1 (192.0.2.1) is not an address of this machine" in foreign.stderr
    endless = two_node_preset()
    text = endless.read_text()
    endless.write_text(text[: text.index(", rdzv_endpoint")] + "}\n" + text[text.index("batch:") :])
    missing = gw_subprocess("run", "--trust", endless, "--headless", "--node-rank", "0")
    assert missing.returncode == 2 and "hardware.rdzv_endpoint" in missing.stderr and "is required" in missing.stderr
    for result in (taken, beyond, unresolved, foreign, missing):
        assert result.stderr.count("\n") == 1, result.stderr
    assert list_runs() == []
