"""What this machine can start: the capacity checks that `plan` shows and `run` refuses on, one copy for both."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from gpuwizard.core.errors import Problem, problem

if TYPE_CHECKING:
    from gpuwizard.gpus.inventory import Inventory
    from gpuwizard.model.job import Plan
    from gpuwizard.model.preset import Preset


def machine_problems(preset: Preset, plan: Plan, inventory: Inventory) -> list[Problem]:
    """What stops this plan from starting on this machine, as the errors `run` refuses with: more CPU processes than
    cores, fewer GPUs visible than the job needs (SLURM checks its own nodes)."""
    if preset.launch.scheduler == "slurm":
        return []
    if plan.device == "cpu":
        cores = os.cpu_count() or 1
        if plan.processes_per_node <= cores:
            return []
        return [
            problem(
                "hardware.gpus",
                f"a CPU run starts one process per GPU slot, and this machine has {cores} cores",
                f"use at most {cores} (2 is enough to exercise the distributed path)",
                value=preset.hardware.gpus,
            )
        ]
    visible = len(inventory.visible())
    if visible >= preset.hardware.gpus:
        return []
    if visible:  # a count that fits here; none visible: lowering the count fixes nothing
        first = f"set hardware.gpus: {visible}, "
    else:
        first = "make the GPUs visible (CUDA_VISIBLE_DEVICES), " if inventory.has_gpus else ""
    verb = "is" if visible == 1 else "are"
    return [
        problem(
            "hardware.gpus",
            f"this job needs {preset.hardware.gpus} GPU(s) per node but {visible} {verb} visible here"
            + (f" ({inventory.message})" if inventory.message else ""),
            f"{first}use hardware.device: cpu for a CPU dry run, or run it on the training machine",
            value=preset.hardware.gpus,
        )
    ]
