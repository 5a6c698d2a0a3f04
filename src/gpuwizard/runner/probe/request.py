"""What a probe is asked to measure: the GPU counts and batches (by default, and as the user wrote them), the counts
this machine can start, the budget, and the pace it keeps in words."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuwizard.core.errors import UserError, problem
from gpuwizard.model.preset import Preset

if TYPE_CHECKING:
    from gpuwizard.gpus.inventory import Inventory


@dataclass
class ProbeRequest:
    preset: Preset
    gpus: list[int]
    batches: list[int] | None
    """Per-device batches to measure; None searches the largest that fits (--batch auto)."""
    budget_s: float | None = None
    headroom: float = 0.1
    slurm: bool = False
    steps: int | None = None
    gpus_chosen: bool = True
    """The GPU counts were the user's (--gpus): one this machine cannot start is refused, not quietly dropped."""
    repeat: int = 1
    """Alternating rounds of the compared configurations after the grid (--repeat): each adds a window of each beside
    one of the other, so every ratio is taken under one background."""
    from_run: str | None = None
    """The run of this preset whose newest checkpoint every configuration starts from (--from-run)."""


def default_gpus(preset: Preset) -> list[int]:
    """1 and the preset's own count (2 when it has one): does the next GPU pay?"""
    return sorted({1, max(2, preset.hardware.gpus)})


def default_batches(preset: Preset) -> list[int]:
    """The plan's per-device batch and twice it."""
    from gpuwizard.planning.plan import make_plan

    per_device = make_plan(preset)[0].per_device_batch or 1
    return [per_device, per_device * 2]


def default_request(preset: Preset) -> ProbeRequest:
    return ProbeRequest(preset, default_gpus(preset), default_batches(preset), gpus_chosen=False)


def unstartable(request: ProbeRequest, inventory: Inventory) -> dict[int, str]:
    """The GPU counts this machine cannot start (more CPU processes than cores, more GPUs than visible), and why:
    the capacity check `run` refuses on (SLURM checks its own nodes)."""
    from gpuwizard.planning.machine import machine_problems
    from gpuwizard.planning.plan import make_plan, with_gpus

    refused = {}
    for gpus in request.gpus:
        preset = with_gpus(request.preset, gpus)
        found = machine_problems(preset, make_plan(preset)[0], inventory)
        if found:
            refused[gpus] = found[0].message
    return refused


def startable_gpus(request: ProbeRequest, inventory: Inventory, device: str) -> tuple[list[int], list[str]]:
    """The counts to probe and what was left out; chosen counts this machine cannot start are refused up front,
    before any configuration runs, in one paragraph like `run --gpus N` (default counts are only left out)."""
    refused = unstartable(request, inventory)
    kept = [g for g in request.gpus if g not in refused]
    word = "processes" if device == "cpu" else "GPUs"
    if refused and (request.gpus_chosen or not kept):
        limit = (os.cpu_count() or 1) if device == "cpu" else len(inventory.visible())
        largest = max(refused)
        counts = ",".join(map(str, request.gpus))
        raise UserError(
            problem(
                "--gpus" if request.gpus_chosen else "hardware.gpus",
                f"{largest} {word} cannot start here: {refused[largest]}",
                f"probe at most {limit} {word}, e.g. --gpus {','.join(map(str, sorted({1, max(1, limit)})))}"
                if limit
                else "probe on a machine with GPUs, or set hardware.device: cpu for a CPU dry run",
                value=counts,
            )
        )
    return kept, [f"{g} {word}: {why}" for g, why in refused.items()]


START_GUESS_S = {"cpu": 12.0, "cuda": 40.0}
"""A configuration's start-up (launch to its first logged step) before one has been timed: the demo on 2 cores takes
8-12 s, a GPU trainer loading a policy tens of seconds."""


def clock(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?")


def parse_budget(text: str) -> float:
    """`10m`, `90s`, `1h`, `1h30m` or plain seconds."""
    body = text.strip()
    match = DURATION.fullmatch(body.removeprefix("-").strip())
    if not match or not any(match.groups()):
        raise UserError(problem("--budget", "is not a duration", "write it like 10m, 90s or 1h30m", value=text))
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if body.startswith("-") or total <= 0:
        raise UserError(
            problem("--budget", "must be more than zero", "give the time the probe may take, e.g. 10m", value=text)
        )
    return total


def parse_counts(text: str, flag: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        values = []
    if not values or values[0] < 1:
        raise UserError(problem(flag, "is not a list of whole numbers of 1 or more", "write it like 1,2,4", value=text))
    return values
