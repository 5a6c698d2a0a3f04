"""torchrun's rendezvous on one node (a private file) and inside a SLURM allocation: every trainer's launcher takes
these arguments, and the batch script (runner/slurm.py) fills in the head node's address and the job id they name."""

from __future__ import annotations

from gpuwizard.core.errors import Problem, note
from gpuwizard.model.job import BuildContext

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
    """One node: the c10d rendezvous in a FileStore, a new private file (tempfile.mkstemp, mode 0600), so the store
    whose state torchrun's agent unpickles (dynamic_rendezvous.py, pickle.loads in sync) listens on no port at all.

    No torchrun arguments or environment make every listener of the job bind loopback only. Measured with torch
    2.13.0 (and 2.11.0), gloo on CPU, 2 processes, GLOO_SOCKET_IFNAME=lo, the listening sockets of the job's
    processes read with psutil (tests/system/test_rendezvous_loopback.py):

    - `--standalone`: the agent on [::]:A and [::]:B (the rendezvous store and the one it shares with the ranks),
      each rank on 127.0.0.1 (gloo);
    - `--rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:P` (a free port, or 0), with or without
      `--local-addr=127.0.0.1`, and USE_LIBUV=0: the same two on [::];
    - `--rdzv-backend=static --master-addr=127.0.0.1 --master-port=P`: the agent on [::]:P, a port picked before
      it is bound (another local process can take it first and become the job's store);
    - `--rdzv-conf=store_type=file` (this): the agent on [::]:B only; with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 that
      listener moves to rank 0, on a port picked before it is bound (elastic/rendezvous/api.py get_free_port).

    Every TCPStore server binds the wildcard address whatever host it is given (TCPStoreLibUvBackend.cpp tries
    "::", then "0.0.0.0"; the legacy backend binds the wildcard too); only a socket passed as master_listen_fd binds
    elsewhere, and torchrun never passes one (elastic/rendezvous/dynamic_rendezvous.py _create_tcp_store_server,
    c10d_rendezvous_backend.py _create_tcp_store). The store left is the one the agent shares with the ranks
    (MASTER_ADDR/MASTER_PORT): bound to a free port (port 0), nothing picked in advance; the plan says it is
    reachable (local_store_note). The 0600 file stays in $TMPDIR after the job, as torchrun's own torchelastic_*
    log folder does."""
    return ["--rdzv-backend=c10d", "--rdzv-conf=store_type=file", f"--rdzv-id={ctx.preset.name}"]


def local_store_note() -> Problem:
    """What still listens beyond loopback on one node, and what closes it (local_rendezvous_args says why)."""
    return note(
        "on one node the rendezvous stays in a private file, but the store torchrun shares with the ranks listens "
        "on every interface (IPv4 and IPv6, a free port) and lets anyone who reaches it read and set its keys: "
        "torch 2.13 binds it so whatever it is given. Where other hosts can reach this machine, keep its ports "
        "behind a firewall"
    )
