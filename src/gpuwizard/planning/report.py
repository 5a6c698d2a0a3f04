"""Plain-text renderings of plans, GPU inventories and runs for the command line."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from gpuwizard.core.units import counted, device_unit, fmt_hours, fmt_lr
from gpuwizard.model.job import Plan

if TYPE_CHECKING:
    from gpuwizard.gpus.inventory import Inventory


def wrap(text: str, indent: str = "    ") -> str:
    return textwrap.fill(text, width=100, initial_indent=indent, subsequent_indent=" " * len(indent))


def plan_text(plan: Plan, name: str) -> str:
    k = f"{plan.scale_factor:g}" if plan.scale_factor is not None else "n/a"
    lines = [
        f"Plan for {name}: {plan.policy} with {plan.trainer}",
        f"  devices       {plan.world_size} x {plan.device} ({plan.nodes} node(s), {plan.processes_per_node} "
        f"process(es) per node), strategy {plan.strategy}",
        f"  batch         {plan.batch_meaning}",
        f"                per device {plan.per_device_batch if plan.per_device_batch is not None else 'n/a'}, "
        f"effective {plan.effective_batch if plan.effective_batch is not None else 'n/a'} samples per update "
        f"(reference on {counted(plan.reference_gpus, plan.device)}: {plan.reference_effective_batch}; k = {k})",
        "",
        f"     {'GPUs' if plan.device == 'cuda' else 'procs':>5}   per device   effective",
    ]
    for row in plan.batch_table:
        mark = "*" if row.chosen else " "
        per = row.per_device if row.per_device is not None else "-"
        eff = row.effective if row.effective is not None else "-"
        note = "  (does not divide)" if row.error else ""
        lines.append(f"    {mark} {row.gpus:>4}   {per!s:>10}   {eff!s:>9}{note}")
    warmup = f"{plan.warmup_steps} ({plan.warmup_source})" if plan.warmup_steps else "none"
    lines += [
        "",
        f"  scaling       {plan.rule}: lr {fmt_lr(plan.base_lr)} -> {fmt_lr(plan.lr)}, steps {plan.base_steps} -> "
        f"{plan.steps}, warmup {warmup}",
        f"  steps         {plan.steps} optimizer updates"
        + (f", {plan.samples_seen} samples seen" if plan.samples_seen else "")
        + (f", ~{plan.epochs:g} epochs of the dataset's frames" if plan.epochs is not None else ""),
    ]
    if plan.trainer_steps != plan.steps:
        lines.append(
            wrap(
                f"the trainer counts {plan.trainer_steps_per_update} steps per update (one micro-batch each): it is "
                f"given {plan.trainer_steps} steps, and its log and checkpoint steps count the same way",
                " " * 16,
            )
        )
    lines += estimate_lines(plan)
    fit = plan.fits
    verdict = {True: "yes", False: "no", None: "unknown"}[fit.fits]
    if plan.device == "cpu":
        lines.append(
            f"  memory        ~{fit.estimate_gb} GB per process on a GPU at this batch; this CPU run trains in float32"
        )
    else:
        device = (
            f"{fit.device_gb:g} GB ({fit.device_source})"
            if fit.device_gb
            else "device memory unknown: set hardware.gpu_memory_gb"
        )
        lines.append(f"  fits 1 GPU    {verdict}: ~{fit.estimate_gb} GB per device needed, {device}")
    if plan.dataset:
        d = plan.dataset
        lines.append(
            f"  dataset       {d['episodes']} episodes, {d['frames']} frames at {d['fps']:g} fps, cameras "
            f"{', '.join(d['cameras']) or 'none'}"
        )
    lines.append("")
    lines.append("Advice")
    lines += [wrap(a, "  - ") for a in plan.advice]
    for title, items in (("Notes", plan.notes), ("Warnings", plan.warnings), ("Errors", plan.errors)):
        if items:
            lines.append(title)
            lines += [wrap(p.paragraph(), "  - ") for p in items]
    return "\n".join(lines)


def estimate_lines(plan: Plan) -> list[str]:
    """The estimates table: time, GPU-hours and cost per GPU count, each with its source."""

    if not plan.estimates:
        return []
    count, hours_of = ("GPUs", "GPU-hours") if plan.device == "cuda" else ("procs", "proc-hours")
    lines = ["", f"  estimates    {count:>5}  {'wall time':>10}  {hours_of:>10}  {'cost':>6}   source"]
    for e in plan.estimates:
        mark = "*" if e.gpus == plan.world_size else " "
        hours = f"{e.gpu_hours:.2f}" if e.gpu_hours is not None else "?"
        cost = f"{e.cost:.2f}" if e.cost is not None else "-"
        lines.append(f"              {mark}{e.gpus:>4}  {fmt_hours(e.wall_h):>10}  {hours:>10}  {cost:>6}   {e.source}")
    return lines + [wrap(note, " " * 16) for note in estimate_notes(plan)]


def estimate_notes(plan: Plan) -> list[str]:
    """Why the estimates read as they do: how a published time was scaled to this preset, and why more GPUs finish
    no sooner where the scaling rule keeps both the steps and the batch per GPU."""
    notes = [e.note for e in plan.estimates if e.note]
    rows = [e for e in plan.estimates if e.steps and e.per_device]
    if len(rows) > 1 and len({e.steps for e in rows}) == 1 and len({e.per_device for e in rows}) == 1:
        steps, per_device = rows[0].steps, rows[0].per_device
        one, more = device_unit(plan.device), device_unit(plan.device, 2)
        seen = ", ".join(
            f"{(e.per_device or 0) * e.gpus}{' per step' if i == 0 else ''} on {e.gpus}" for i, e in enumerate(rows[1:])
        )
        notes.append(
            f"{plan.rule} keeps {steps} steps at {per_device} samples per {one} on every {one} count, so each {one} "
            f"does the same work and more {more} only see more samples ({seen}): the wall time does not drop."
            + (" divide_steps (steps / k) shortens the run instead." if plan.rule != "divide_steps" else "")
        )
    return notes


def inventory_text(inv: Inventory) -> str:
    lines = []
    if inv.message:
        lines.append(inv.message)
    cpu = inv.cpu
    lines.append(
        f"CPU: {cpu.model}, {cpu.cores_logical} logical cores, {cpu.memory_total_gb:g} GB RAM "
        f"({cpu.memory_available_gb:g} GB available)"
    )
    if not inv.gpus:
        return "\n".join(lines)
    lines.append(
        f"Driver {inv.driver_version or '?'}, CUDA {inv.cuda_version or '?'}, "
        f"CUDA_VISIBLE_DEVICES={inv.cuda_visible_devices if inv.cuda_visible_devices is not None else '(unset)'}"
    )
    lines.append("")
    lines.append(
        "  idx cuda name                          memory (used/total GB)  util  temp  power        cc   PCIe       "
    )
    for g in inv.gpus:
        if g.error:
            lines.append(f"  {g.index:>3}  -   {g.error}")
            continue
        mem = f"{_gb(g.memory_used_mb)}/{_gb(g.memory_total_mb)}"
        power = f"{_num(g.power_w)}/{_num(g.power_limit_w)} W"
        pcie = f"gen{g.pcie_gen or '?'} x{g.pcie_width or '?'}"
        cuda = str(g.cuda_index) if g.cuda_index is not None else "-"
        lines.append(
            f"  {g.index:>3} {cuda:>4} {(g.name or '?')[:29]:<29} {mem:>22}  {_num(g.utilization_gpu):>3}%  "
            f"{_num(g.temperature_c):>3}C  {power:<12} {g.compute_capability or '?':<4} {pcie}"
        )
        extras = []
        if g.mig_mode:
            extras.append("MIG enabled")
        if g.persistence_mode is False:
            extras.append("persistence off")
        if g.ecc_uncorrected:
            extras.append(f"{g.ecc_uncorrected} uncorrected ECC errors")
        for p in g.processes:
            extras.append(f"pid {p.pid} {p.user or '?'} {_gb(p.used_mb)} GB {(p.command or '')[:50]}")
        lines += [f"       {e}" for e in extras]
    if inv.links:
        lines.append("")
        lines.append(
            "Topology (NV# = NVLink count; PIX/PXB = PCIe switch; PHB = host bridge; NODE/SYS = across NUMA/sockets)"
        )
        for link in inv.links:
            lines.append(f"  GPU{link.a} <-> GPU{link.b}: {link.label:<5} P2P read: {link.p2p_read or 'unavailable'}")
    return "\n".join(lines)


def _gb(mb: float | None) -> str:
    return f"{mb / 1024:.1f}" if mb is not None else "n/a"


def _num(value: float | None) -> str:
    return f"{value:.0f}" if value is not None else "n/a"
