"""A one-node torchrun rendezvous whose store listens on 127.0.0.1 only.

torchrun's own backends bind every TCPStore server to the wildcard address whatever host they are given; only a
socket passed as `master_listen_fd` binds elsewhere, and none of them passes one. This backend binds the socket
itself (127.0.0.1, a free port chosen by the kernel at bind time, so no other process can take it first), hands it to
the store, and shares that store with the ranks, as torchrun's static backend does. torchrun (torch 2.5 and later)
finds it through the `torchrun.handlers` entry point of the dist-info next to this file, when this folder is on the
job's PYTHONPATH. Loaded inside the training interpreter: torch and the standard library only."""

from __future__ import annotations

import datetime
import errno
import socket
from collections.abc import Callable

from torch.distributed import PrefixStore, Store, TCPStore
from torch.distributed.elastic.rendezvous import (
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    RendezvousStoreInfo,
)

BACKEND = "gpuwizard-loopback"
HOST = "127.0.0.1"
DEFAULT_TIMEOUT_S = 600


class LoopbackRendezvous(RendezvousHandler):
    """One node, one agent: the store on a loopback socket bound before the store exists."""

    def __init__(self, run_id: str, timeout_s: int):
        self.run_id = run_id
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self._listener: socket.socket | None = None
        self._store: Store | None = None
        self._port = 0

    def get_backend(self) -> str:
        return BACKEND

    @property
    def use_agent_store(self) -> bool:
        """The ranks connect to this store as clients (TORCHELASTIC_USE_AGENT_STORE), so nothing else listens."""
        return True

    def next_rendezvous(self) -> RendezvousInfo:
        if self._store is None:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                listener.bind((HOST, 0))
                listener.listen(socket.SOMAXCONN)
            except OSError as exc:
                listener.close()
                raise OSError(exc.errno, cannot_listen(exc)) from None
            self._listener = listener  # kept open for the job's lifetime: the store serves on its descriptor
            self._port = listener.getsockname()[1]
            self._store = TCPStore(
                HOST,
                self._port,
                1,
                True,
                self.timeout,
                multi_tenant=True,
                master_listen_fd=listener.fileno(),
            )
        return RendezvousInfo(PrefixStore(self.run_id, self._store), 0, 1, RendezvousStoreInfo(HOST, self._port))

    def is_closed(self) -> bool:
        return False

    def set_closed(self) -> None:
        pass

    def num_nodes_waiting(self) -> int:
        return 0

    def get_run_id(self) -> str:
        return self.run_id

    def shutdown(self) -> bool:
        return True


def cannot_listen(exc: OSError) -> str:
    """Why the store has no socket, in the words the run's log ends with."""
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{BACKEND}: no port on {HOST} is free for torchrun's rendezvous store ({exc.strerror}): every local "
            "port is taken; end the processes that hold them (`ss -tanp` lists them) or widen the range the kernel "
            "hands out (sysctl net.ipv4.ip_local_port_range), then run again"
        )
    return (
        f"{BACKEND}: torchrun's rendezvous store cannot listen on {HOST} ({exc.strerror}): this machine's loopback "
        "interface must be up (`ip addr show lo`)"
    )


def create_handler(params: RendezvousParameters) -> RendezvousHandler:
    """torchrun's handler for `--rdzv-backend=gpuwizard-loopback`: one node only, its run id, its timeout."""
    if params.max_nodes != 1:
        raise ValueError(f"{BACKEND} is a one-node rendezvous, but --nnodes asks for up to {params.max_nodes} nodes")
    return LoopbackRendezvous(params.run_id, params.get_as_int("timeout", DEFAULT_TIMEOUT_S) or DEFAULT_TIMEOUT_S)


def handler_creator() -> Callable[[RendezvousParameters], RendezvousHandler]:
    """The entry point torchrun calls (elastic/rendezvous/registry.py, _register_out_of_tree_handlers)."""
    return create_handler
