"""Where a single-node run listens: a real 2-process demo (`gpuwizard run demo-cpu --headless`, gloo on CPU), every
listening TCP socket of every process of the run read while it trains; and the real torchrun's refusal without the
plugin. What torch 2.13 allows and why: trainers/rendezvous.py, local_rendezvous_args."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from gpuwizard.runner.detect.failures import failure_advice
from gpuwizard.runner.host.procs import marker_value, read_marker
from gpuwizard.runs.records import RecordError, Status
from gpuwizard.runs.rundir import RunDir
from gpuwizard.trainers.rendezvous import LOOPBACK_BACKEND

WAIT_S = 240
"""A generous bound for the demo's 300 steps on two loaded cores; the wait ends as soon as the run does."""


@dataclass(frozen=True, order=True)
class Listener:
    role: str
    """cli, supervisor, agent (torchrun) or rank."""
    pid: int
    address: str
    port: int

    def on_loopback(self) -> bool:
        return ipaddress.ip_address(self.address.split("%")[0]).is_loopback


def the_run(data: Path) -> RunDir | None:
    runs = sorted((data / "runs").glob("[!.]*")) if (data / "runs").is_dir() else []  # not the .staging folder
    return RunDir(runs[0]) if runs else None


def readable_status(run: RunDir) -> Status | None:
    """The run's status.json, None while it is not written yet."""
    try:
        return run.status()
    except RecordError:
        return None


def role_of(proc: psutil.Process, cli: int, agent: int | None) -> str:
    if proc.pid == cli:
        return "cli"
    if proc.pid == agent:
        return "agent"
    try:
        return "rank" if agent is not None and proc.ppid() == agent else "supervisor"
    except psutil.Error:
        return "gone"


def listeners_now(cli: int, run: RunDir, agent: int | None) -> set[Listener]:
    """Every LISTEN socket of the CLI and of each process carrying the run's marker (supervisor, torchrun, ranks)."""
    marker = marker_value(run.path)
    found = set()
    for proc in psutil.process_iter():
        if proc.pid != cli and read_marker(proc.pid) != marker:
            continue
        try:
            sockets = proc.net_connections(kind="tcp")
        except psutil.Error:
            continue
        role = role_of(proc, cli, agent)
        found |= {Listener(role, proc.pid, s.laddr.ip, s.laddr.port) for s in sockets if s.status == psutil.CONN_LISTEN}
    return found


@pytest.fixture(scope="module")
def demo_listeners(tmp_path_factory) -> set[Listener]:
    """Run demo-cpu headless in its own data, config and working folders; gather what every process listens on,
    from the first poll to the end of the run."""
    root = tmp_path_factory.mktemp("loopback")
    env = os.environ | {"GPUWIZARD_DATA_DIR": str(root / "data"), "GPUWIZARD_CONFIG_DIR": str(root / "config")}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    cli = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", "--trust", "demo-cpu", "--headless"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: set[Listener] = set()
    deadline = time.monotonic() + WAIT_S
    try:
        while cli.poll() is None and time.monotonic() < deadline:
            run = the_run(root / "data")
            status = readable_status(run) if run is not None else None
            if run is not None and status is not None:
                seen |= listeners_now(cli.pid, run, status.job.pid if status.job else None)
            time.sleep(0.1)  # a poll interval, not a wait for something to happen
        out, _ = cli.communicate(timeout=120 if cli.poll() is None else None)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    if cli.returncode != 0:
        pytest.fail(f"the demo run failed: {out[-3000:]}")
    if len({s.pid for s in seen if s.role == "rank"}) != 2:
        pytest.fail(f"both ranks should be seen listening (gloo) while training: {sorted(seen)}")
    return seen


def test_every_socket_of_a_single_node_run_listens_on_loopback_only(demo_listeners):
    """The ranks (gloo, GLOO_SOCKET_IFNAME=lo) and torchrun's agent (the store it shares with the ranks, bound by
    gpuwizard's loopback rendezvous) listen on 127.0.0.1 only; the agent once; the CLI and the supervisor nowhere.
    Before that backend, the agent's store listened on [::] whatever host torchrun was given."""
    wide = sorted(s for s in demo_listeners if not s.on_loopback())
    assert wide == [], f"listening beyond loopback: {wide}"
    by_role = {role: {s for s in demo_listeners if s.role == role} for role in ("cli", "supervisor", "agent", "rank")}
    assert len(by_role["agent"]) == 1, f"torchrun listens only for the store it shares with the ranks: {by_role}"
    assert by_role["cli"] == by_role["supervisor"] == set(), by_role


def test_torchrun_without_the_plugin_fails_with_advice_that_names_the_cause(tmp_path):
    """The real torchrun's refusal when its PYTHONPATH lacks the plugin (or its torch predates out-of-tree
    backends) is matched by the advice the run shows."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=1"]
    argv += [f"--rdzv-backend={LOOPBACK_BACKEND}", "--rdzv-endpoint=127.0.0.1", "-m", "this.never.starts"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode != 0
    error = next(line for line in done.stderr.splitlines() if "is not registered" in line)
    assert "torch 2.5 or later" in failure_advice(error)
