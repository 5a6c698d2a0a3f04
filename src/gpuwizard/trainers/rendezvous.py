"""torchrun's rendezvous on one node (loopback only) and inside a SLURM allocation: every trainer's launcher takes
these arguments, and the batch script (runner/host/slurm.py) fills in the head node and job id they name."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpuwizard import loopback
from gpuwizard.model.job import BuildContext, LaunchSpec, first_on_pythonpath

LOOPBACK_BACKEND = "gpuwizard-loopback"
"""The backend name in loopback/gwloopback-1.dist-info/entry_points.txt (gwloopback.BACKEND, loaded by torchrun)."""
LOOPBACK_HOST = "127.0.0.1"
LOOPBACK_DIR = Path(loopback.__file__).parent

DEFAULT_PORT = 29500
HEAD = "$head_addr"
NNODES = "$SLURM_NNODES"
JOB_ID = "$SLURM_JOB_ID"


def rdzv_port(ctx: BuildContext) -> int:
    from gpuwizard.core.network import Endpoint

    endpoint = ctx.preset.hardware.rdzv_endpoint
    return Endpoint.parse(endpoint).port if endpoint else DEFAULT_PORT


def rendezvous_args(ctx: BuildContext) -> list[str]:
    """torchrun's multi-node arguments inside a SLURM allocation: node count, job id and head from SLURM."""
    return [
        f"--nnodes={NNODES}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={HEAD}:{rdzv_port(ctx)}",
        f"--rdzv-id={JOB_ID}",
    ]


def local_rendezvous_args(ctx: BuildContext) -> list[str]:
    """One node: gpuwizard's loopback backend (loopback/gwloopback.py), whose store binds 127.0.0.1 only.

    None of torchrun's own backends can do it. Measured with torch 2.13.0 (and 2.11.0), gloo on CPU, 2 processes,
    GLOO_SOCKET_IFNAME=lo, the listening sockets of the job's processes read with psutil
    (tests/system/test_rendezvous_loopback.py):

    - `--standalone`: the agent on [::]:A and [::]:B (the rendezvous store and the one it shares with the ranks);
    - `--rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:P`, with or without `--local-addr=127.0.0.1`, and
      USE_LIBUV=0: the same two on [::];
    - `--rdzv-backend=static --master-addr=127.0.0.1 --master-port=P`: the agent on [::]:P;
    - `--rdzv-conf=store_type=file`: the agent on [::]:B only.

    Every TCPStore server binds the wildcard address whatever host it is given (TCPStoreLibUvBackend.cpp tries
    "::", then "0.0.0.0"); only a socket passed as master_listen_fd binds elsewhere, and torchrun's backends never
    pass one. torchrun loads out-of-tree backends from the `torchrun.handlers` entry point (torch 2.5 and later,
    elastic/rendezvous/registry.py _register_out_of_tree_handlers), so the plugin's folder goes first on the job's
    PYTHONPATH (with_loopback_plugin); with it the agent listens once, on 127.0.0.1, and the ranks join its store."""
    return [f"--rdzv-backend={LOOPBACK_BACKEND}", f"--rdzv-endpoint={LOOPBACK_HOST}", f"--rdzv-id={ctx.preset.name}"]


def with_loopback_plugin(spec: LaunchSpec) -> LaunchSpec:
    """The command with the loopback plugin's folder first on PYTHONPATH where its torchrun asks for the backend;
    the PYTHONPATH the preset (or this shell) sets follows it, so nothing it finds there is lost."""
    if f"--rdzv-backend={LOOPBACK_BACKEND}" not in spec.argv:
        return spec
    return replace(spec, env=first_on_pythonpath(LOOPBACK_DIR, spec.env))
