"""The plan's checks of what surrounds the job: the dataset folder, the output and working folders, the rendezvous."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpuwizard.core.errors import Problem, note, problem, warning
from gpuwizard.model import datasets
from gpuwizard.model.job import BuildContext
from gpuwizard.model.preset import Preset
from gpuwizard.trainers.base import Trainer


def dataset_findings(
    preset: Preset, trainer: Trainer, effective: int | None, workdir: str
) -> tuple[dict[str, Any] | None, list[Problem]]:
    if not preset.dataset.root:
        return None, []
    root = Path(workdir, os.path.expanduser(preset.dataset.root))  # relative: under the job's working directory
    if trainer.writes_dataset and not root.exists():
        return None, [note(f"the {trainer.name} trainer writes its synthetic dataset to {root} on the first run")]
    if not root.exists():
        return None, [
            warning(
                "dataset.root",
                f"{root} does not exist here, so its metadata is not shown",
                "plan on the training machine, or fix the path (a relative one is under launch.workdir)",
                value=preset.dataset.root,
            )
        ]
    try:
        meta = datasets.read_metadata(root)
    except datasets.DatasetError as exc:
        return None, [
            problem(
                "dataset.root",
                str(exc),
                "point dataset.root at a LeRobot dataset folder (the one containing meta/info.json)",
                value=preset.dataset.root,
            )
        ]
    found = []
    if effective and meta.frames:
        share = effective / meta.frames
        if share >= 0.05:
            found.append(
                warning(
                    "batch.size",
                    f"the effective batch ({effective}) is {share:.0%} of the dataset's {meta.frames} frames: one "
                    f"epoch is only {max(1, meta.frames // effective)} optimizer updates",
                    "lower batch.size or the GPU count so each epoch gives the optimizer more updates",
                )
            )
    return meta.to_json(), found


def output_dir_findings(ctx: BuildContext) -> list[Problem]:
    path, output_dir = ctx.output_path, ctx.output_dir
    if path.exists() and not path.is_dir():
        return [problem("output_dir", "exists and is not a folder", "choose a folder path", value=output_dir)]
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        return [
            problem(
                "output_dir",
                f"cannot be written ({existing} is not writable)",
                "choose a folder you can write to",
                value=output_dir,
            )
        ]
    return []


def rendezvous_findings(preset: Preset, trainer: Trainer) -> list[Problem]:
    """Where the job's rendezvous store listens, and who could reach it."""
    if not trainer.uses_torchrun:
        return []
    found = []
    if preset.launch.master_port is not None:
        found.append(
            warning(
                "launch.master_port",
                "is not used: on one node torchrun --standalone binds a free port itself, so no other process can take "
                "it first; across nodes the port is the one in hardware.rdzv_endpoint",
                "remove launch.master_port",
                value=preset.launch.master_port,
            )
        )
    if preset.hardware.nodes > 1 and not preset.hardware.rdzv_endpoint and preset.launch.scheduler == "local":
        found.append(
            problem(
                "hardware.rdzv_endpoint",
                "(host:port of node 0) is required when hardware.nodes > 1 and the nodes are started by hand",
                "add it, e.g. 10.0.0.1:29500, or submit with SLURM (`run --slurm`), which finds the head node itself",
                value=None,
            )
        )
    if preset.hardware.nodes > 1 and preset.hardware.rdzv_endpoint and preset.launch.scheduler == "local":
        from gpuwizard.core.network import interface_note

        found.append(
            note(
                f"the rendezvous store on node 0 ({preset.hardware.rdzv_endpoint}) listens on every interface and "
                "torch "
                "exchanges pickled state through it: firewall that port to the cluster's nodes"
            )
        )
        route = interface_note(preset.hardware.rdzv_endpoint)
        if route:
            found.append(note(route))
    return found
