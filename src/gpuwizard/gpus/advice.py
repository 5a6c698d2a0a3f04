"""Setup advice before a launch, from the inventory: P2P, InfiniBand, busy or short devices, mixed models."""

from __future__ import annotations

from pathlib import Path

from gpuwizard.core.errors import Problem, warning
from gpuwizard.gpus.inventory import GpuInfo, Inventory


def chosen_gpus(inventory: Inventory, devices: list[int] | None, count: int) -> list[GpuInfo]:
    """The devices a job would use: explicit CUDA indices, else the first `count` visible ones."""
    visible = inventory.visible()
    if devices is None:
        return visible[:count]
    by_cuda = {g.cuda_index: g for g in visible}
    return [by_cuda[d] for d in devices if d in by_cuda]


def has_infiniband(sys_root: Path = Path("/sys/class/infiniband")) -> bool:
    return sys_root.is_dir() and any(sys_root.iterdir())


def setup_advice(
    inventory: Inventory,
    devices: list[int] | None,
    count: int,
    nodes: int = 1,
    need_gb: float | None = None,
    own_pids: set[int] | None = None,
    infiniband: bool | None = None,
) -> list[Problem]:
    """What to fix or set before launching on these devices."""
    if not inventory.has_gpus:
        return []
    found: list[Problem] = []
    chosen = chosen_gpus(inventory, devices, count)
    if len(chosen) < count:
        found.append(
            warning(
                "hardware.gpus",
                f"only {len(chosen)} of the {count} requested GPUs {'is' if len(chosen) == 1 else 'are'} visible here "
                f"(CUDA_VISIBLE_DEVICES={inventory.cuda_visible_devices})",
                f"set hardware.gpus: {len(chosen)} or make more devices visible"
                if chosen
                else "make the devices visible (CUDA_VISIBLE_DEVICES) or run on the training machine",
                value=count,
            )
        )
    for i, a in enumerate(chosen):
        for b in chosen[i + 1 :]:
            link = inventory.link(a.index, b.index)
            if link and link.p2p_read and link.p2p_read != "OK":
                found.append(
                    warning(
                        "launch.env",
                        f"P2P reads between GPU {a.index} and GPU {b.index} are {link.p2p_read} ({link.label}); NCCL "
                        "may hang right after init",
                        "set launch.env NCCL_P2P_DISABLE: 1 (slower, but it will not hang), then check ACS/IOMMU "
                        "settings",
                    )
                )
    if nodes > 1 and not (has_infiniband() if infiniband is None else infiniband):
        found.append(
            warning(
                "launch.env",
                "multi-node run and no InfiniBand device on this node (/sys/class/infiniband is empty)",
                "set launch.env NCCL_IB_DISABLE: 1 so NCCL uses TCP sockets, and NCCL_SOCKET_IFNAME to the right "
                "network interface",
            )
        )
    names = {g.name for g in chosen if g.name}
    if len(names) > 1:
        found.append(
            warning(
                "hardware.devices",
                f"mixed GPU models ({', '.join(sorted(names))}): the slowest card sets the pace and memory limits "
                "differ",
                "choose identical devices with hardware.devices",
            )
        )
    for g in chosen:
        others = [p for p in g.processes if p.pid not in (own_pids or set())]
        if others:
            who = ", ".join(
                f"pid {p.pid} ({p.user or 'unknown user'}, {(p.used_mb or 0) / 1024:.1f} GB)" for p in others[:3]
            )
            found.append(
                warning(
                    "hardware.devices",
                    f"GPU {g.index} is busy with other processes: {who}",
                    "choose idle devices with hardware.devices, or wait for them to finish",
                )
            )
        if need_gb and g.memory_free_mb is not None and g.memory_free_mb / 1024 < need_gb:
            found.append(
                warning(
                    "batch.size",
                    f"GPU {g.index} has {g.memory_free_mb / 1024:.1f} GB free; the plan needs ~{need_gb} GB per device",
                    "lower batch.size (add grad_accum), or free the device",
                )
            )
        if g.mig_mode:
            found.append(
                warning(
                    "hardware.devices",
                    f"GPU {g.index} has MIG enabled: each instance is a separate, smaller device and NCCL peer-to-peer "
                    "between instances is unavailable",
                    "disable MIG for multi-GPU training, or train on one instance",
                )
            )
    return found
