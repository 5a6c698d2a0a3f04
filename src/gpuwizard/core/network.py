"""Multi-node preflight: the rendezvous host resolves, node 0's port is free, the others can reach it, and the
network interface that routes there (what NCCL_SOCKET_IFNAME must name when NCCL picks another)."""

from __future__ import annotations

import errno
import fcntl
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpuwizard.core.errors import Problem, problem

SIOCGIFADDR = 0x8915
WAIT_REPORT_EVERY_S = 5.0


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        host, _, port = text.rpartition(":")
        return cls(host.strip("[]"), int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def resolve(endpoint: Endpoint) -> str | None:
    """The IPv4 address the rendezvous host resolves to here, or None."""
    try:
        infos = socket.getaddrinfo(endpoint.host, endpoint.port, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return str(infos[0][4][0]) if infos else None


def route_interface(address: str) -> tuple[str, str] | None:
    """(interface, local address) the kernel would use to reach `address`: a UDP connect sends nothing, it only
    picks the route; the interface is the one holding that local address."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((address, 9))
            local = probe.getsockname()[0]
    except OSError:
        return None
    for _, name in socket.if_nameindex():
        if interface_address(name) == local:
            return name, local
    return None


def interface_address(name: str) -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
    except OSError:
        return None
    return socket.inet_ntoa(packed[20:24])


def port_free(port: int) -> bool:
    """Whether node 0 can bind the rendezvous port (torchrun's c10d store listens on every interface)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def is_local_address(address: str) -> bool:
    """Whether an address belongs to this machine: binding to it fails with EADDRNOTAVAIL where it does not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, 0))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return False
            raise
    return True


def reachable(endpoint: Endpoint, timeout_s: float = 2.0) -> bool:
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s):
            return True
    except OSError:
        return False


def preflight(endpoint_text: str, node_rank: int) -> list[Problem]:
    """What stops a multi-node launch before it starts: an unresolvable host, or node 0's port taken."""
    endpoint = Endpoint.parse(endpoint_text)
    if resolve(endpoint) is None:
        return [
            problem(
                "hardware.rdzv_endpoint",
                f"the host {endpoint.host} does not resolve on this node",
                "use node 0's address or a name every node resolves (check /etc/hosts or DNS)",
                value=endpoint_text,
            )
        ]
    address = resolve(endpoint)
    if node_rank == 0 and address is not None and not is_local_address(address):
        return [
            problem(
                "hardware.rdzv_endpoint",
                f"{endpoint.host} ({address}) is not an address of this machine, and node 0 is where torchrun's "
                "rendezvous store listens: the other nodes would wait for a store that never answers",
                "give node 0's own address (`hostname -I` lists them) or run node rank 0 on the host it names",
                value=endpoint_text,
            )
        ]
    if node_rank == 0 and not port_free(endpoint.port):
        return [port_taken(endpoint_text, endpoint.port)]
    return []


def port_taken(endpoint_text: str, port: int) -> Problem:
    """Node 0's rendezvous port is held by another program (the launch's preflight and the doctor say it alike)."""
    return problem(
        "hardware.rdzv_endpoint",
        f"port {port} is already in use on node 0, so torchrun's rendezvous store cannot listen on it",
        "pick a free port in hardware.rdzv_endpoint (the same on every node), or stop what holds it "
        f"(`ss -ltnp 'sport = :{port}'`)",
        value=endpoint_text,
    )


def wait_for_node0(
    endpoint_text: str, timeout_s: float, report: Callable[[float], None], interval_s: float = 1.0
) -> bool:
    """Until node 0's rendezvous store answers, calling `report(seconds_left)` every few seconds (a countdown, not a
    silent wait); False if it never does."""
    endpoint = Endpoint.parse(endpoint_text)
    deadline = time.monotonic() + timeout_s
    last_report = 0.0
    while True:
        if reachable(endpoint):
            return True
        now = time.monotonic()
        if now >= deadline:
            return False
        if now - last_report >= WAIT_REPORT_EVERY_S:
            last_report = now
            report(deadline - now)
        time.sleep(min(interval_s, max(0.0, deadline - now)))


def interface_note(endpoint_text: str) -> str | None:
    """The plan's NCCL_SOCKET_IFNAME suggestion for the route to the rendezvous host."""
    endpoint = Endpoint.parse(endpoint_text)
    address = resolve(endpoint)
    if address is None:
        return None
    route = route_interface(address)
    if route is None:
        return None
    name, local = route
    return (
        f"this node reaches the rendezvous host {endpoint.host} ({address}) through {name} ({local}): if NCCL picks "
        f"another interface, set launch.env NCCL_SOCKET_IFNAME={name} (names can differ between nodes), and "
        "NCCL_IB_DISABLE=1 where there is no InfiniBand"
    )
