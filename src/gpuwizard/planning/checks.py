"""The plan's checks of what surrounds the job: the dataset folder, the output and working folders, the rendezvous."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpuwizard.core.errors import Problem, note, problem, warning
from gpuwizard.model import datasets
from gpuwizard.model.job import BuildContext
from gpuwizard.model.preset import Preset
from gpuwizard.runs.owner import read_owner
from gpuwizard.trainers.base import Trainer


def dataset_path(preset: Preset, workdir: str) -> Path | None:
    """dataset.root as the job sees it: a relative one is under the job's working directory."""
    return Path(workdir, os.path.expanduser(preset.dataset.root)) if preset.dataset.root else None


def missing_dataset(preset: Preset, trainer: Trainer, workdir: str) -> list[Problem]:
    """A run on this machine needs its dataset folder here, unless its trainer writes the dataset itself (the plan
    only warns: it may be made for another machine)."""
    root = dataset_path(preset, workdir)
    if root is None or trainer.writes_dataset or root.exists():
        return []
    return [
        problem(
            "dataset.root",
            f"{root} does not exist on this machine, so the job would fail as soon as it reads its data",
            "fix the path (a relative one is under launch.workdir) or copy the dataset there",
            value=preset.dataset.root,
        )
    ]


def dataset_findings(
    preset: Preset, trainer: Trainer, effective: int | None, workdir: str
) -> tuple[dict[str, Any] | None, list[Problem]]:
    root = dataset_path(preset, workdir)
    if root is None:
        return None, []
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


def checkpoint_findings(ctx: BuildContext, trainer: Trainer) -> list[Problem]:
    """A fresh run into a folder that holds another run's checkpoints would overwrite them, and a later resume would
    continue from a mix of the two runs: refused, naming the run they belong to."""
    path = ctx.output_path
    if not path.is_dir() or (trainer.last_checkpoint(ctx) is None and trainer.unfinished_checkpoint(path) is None):
        return []
    owner = read_owner(path, ctx.preset.hardware.node_rank)
    name = ctx.preset.name
    if owner is not None:
        whose, resume = f"run {owner.run_id}", f"`gpuwizard run {name} --resume {owner.run_id}`"
    else:
        whose, resume = "a run gpuwizard has no record of", f"`gpuwizard run {name} --resume`"
    return [
        problem(
            "output_dir",
            f"holds checkpoints written by {whose}: a fresh run there would overwrite them, and a later resume would "
            "continue from a mix of the two runs",
            f"resume that run with {resume}, or choose another output_dir (null gives each run a folder of its own)",
            value=ctx.output_dir,
        )
    ]


def rendezvous_findings(preset: Preset, trainer: Trainer) -> list[Problem]:
    """Where the job's rendezvous store listens, and who could reach it."""
    if not trainer.uses_torchrun:
        return []
    found = []
    if preset.launch.master_port is not None:
        found.append(
            warning(
                "launch.master_port",
                "is not used: on one node the job's store binds a free port on 127.0.0.1 itself, so no other "
                "process can take it first; across nodes the port is the one in hardware.rdzv_endpoint",
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
