"""Run a probe's grid: each configuration a short real run of the preset's command through the supervisor, with
its output in the probe's scratch folder, one at a time, within a time budget, cancellable with nothing left."""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE
from gpuwizard.analysis.probe.results import (
    PROBE_RECORD,
    SCRATCH,
    ProbeResult,
    ProbeRow,
    add_scaling,
    measure,
    measured_enough,
    probes_dir,
    with_headroom,
    with_noise,
)
from gpuwizard.analysis.probe.verdict import fill_models, verdict
from gpuwizard.core.errors import UserError, problem
from gpuwizard.core.yamlio import atomic_write
from gpuwizard.model.preset import Preset, with_field
from gpuwizard.runner.probe.batch_search import grid_memory_line, search_batch
from gpuwizard.runs.rundir import PRIVATE, RunDir

if TYPE_CHECKING:
    from gpuwizard.gpus.inventory import Inventory
    from gpuwizard.model.job import Plan


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


def new_probe_dir(preset_name: str) -> Path:
    base = probes_dir()
    base.mkdir(parents=True, exist_ok=True, mode=PRIVATE)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        path = base / (f"{stamp}-{n}-{preset_name}" if n else f"{stamp}-{preset_name}")
        try:
            path.mkdir(mode=PRIVATE)
        except FileExistsError:
            continue
        return path
    raise OSError(f"could not allocate a probe folder under {base}")


class Probe:
    """One probe: its folder, its result record (rewritten after each configuration) and the running child."""

    def __init__(self, request: ProbeRequest, on_update: Callable[[ProbeResult, str], object] | None = None):
        from gpuwizard.gpus.inventory import read_inventory
        from gpuwizard.trainers.registry import get_trainer

        self.request, self.on_update = request, on_update or (lambda result, message: None)
        self.trainer = get_trainer(request.preset.trainer)
        self.inventory = read_inventory()
        self.cancelled = threading.Event()
        self.child: RunDir | None = None
        self.started = time.monotonic()
        plan = self._plan(request.gpus[0], None)
        asked = list(request.gpus)
        request.gpus, left_out = startable_gpus(request, self.inventory, plan.device)
        self.path = new_probe_dir(request.preset.name)
        device_mb = self._device_memory_mb(plan.device)
        self.device_memory_mb = device_mb
        self.simulated = bool(getattr(request.preset.options, "device_memory_mb", None))
        self.headroom = request.headroom
        self.result = ProbeResult(
            probe_id=self.path.name,
            preset=request.preset.name,
            trainer=request.preset.trainer,
            policy=request.preset.policy,
            device=plan.device,
            hardware=self._hardware(plan.device),
            created=time.time(),
            steps=min(request.steps or self.trainer.probe_steps, request.preset.optim.steps),
            job_steps=request.preset.optim.steps,
            steps_asked=request.steps is not None,
            headroom=request.headroom,
            budget_s=request.budget_s,
            full_run_samples=self._plan(request.preset.hardware.gpus, None).samples_seen,
            skipped=left_out,
            gpus=asked,
            grad_accum=request.preset.batch.grad_accum,
            cores=os.cpu_count() if plan.device == "cpu" else None,
        )
        self.save()

    def _plan(self, gpus: int, batch: int | None) -> Plan:
        from gpuwizard.planning.plan import make_plan, with_gpus

        preset = with_gpus(self.request.preset, gpus)
        if batch is not None:
            preset = with_field(preset, "batch.size", self._batch_flag(batch, gpus))
        return make_plan(preset)[0]

    def _batch_flag(self, per_device: int, gpus: int) -> int:
        """The preset's batch.size for a per-device batch, in the trainer's own meaning (GR00T, openpi: global)."""
        return per_device * gpus if self.trainer.batch_is_global else per_device

    def _device_memory_mb(self, device: str) -> float | None:
        opts = self.request.preset.options
        simulated = getattr(opts, "device_memory_mb", None)
        if simulated:
            return float(simulated)
        if device == "cuda":
            visible = self.inventory.visible()
            totals = [g.memory_total_mb for g in visible if g.memory_total_mb]
            return min(totals) if totals else None
        return None

    def machine_mb(self) -> float | None:
        """The machine's memory, which a CPU run's processes share (None on a GPU: its own memory is the limit)."""
        import psutil

        return psutil.virtual_memory().total / 2**20 if self.result.device == "cpu" else None

    def _hardware(self, device: str) -> str:
        if device == "cuda":
            visible = self.inventory.visible()
            names = sorted({g.name or "GPU" for g in visible})
            return f"{len(visible)} x {', '.join(names)}" if visible else "GPUs"
        return f"CPU, {os.cpu_count()} cores"

    def save(self) -> None:
        atomic_write(self.path / PROBE_RECORD, self.result.to_json_text())

    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, text: str) -> None:
        self.on_update(self.result, text)

    def out_of_budget(self, what: str) -> bool:
        """Skip a configuration that would end past the budget (judged by the mean time of those run so far)."""
        budget = self.request.budget_s
        if budget is None:
            return False
        ran = [r.seconds for r in self.result.rows if r.seconds]
        expected = sum(ran) / len(ran) if ran else 0.0
        if self._elapsed() + expected > budget:
            self.result.skipped.append(f"{what}: the {budget:.0f} s budget would be passed")
            return True
        return False

    def launch_preset(self, gpus: int, batch: int) -> Preset:
        """One configuration's preset: the trainer's short variant at this batch, the gauge on (its peak memory, and
        B_noise where gauged(); it only reads), its output in the probe's scratch folder."""
        preset = self.trainer.probe_variant(self.request.preset, self.result.steps)
        preset = with_field(with_field(preset, "scaling.rule", "none"), "monitor.gauge", True)
        scratch = self.path / SCRATCH / f"g{gpus}-b{batch}"
        return with_field(with_field(preset, "batch.size", self._batch_flag(batch, gpus)), "output_dir", str(scratch))

    def run_config(self, gpus: int, batch: int) -> ProbeRow:
        """One short real run; its row (a recognised out-of-memory failure is `does not fit`, not a crash)."""
        from gpuwizard.runner.launch.prepare import prepare_run
        from gpuwizard.runner.launch.start import start_run

        self.say(f"running {gpus} x batch {batch}")
        preset = self.launch_preset(gpus, batch)
        try:
            prepared = prepare_run(preset, gpus=gpus, inventory=self.inventory, slurm=self.request.slurm)
        except UserError as exc:
            return ProbeRow(gpus=gpus, per_device_batch=batch, outcome="failed", detail=exc.problems[0].message)
        run = start_run(replace(prepared, probe=self.result.probe_id), on_hang="stop")
        self.child, enough = run, False  # an interrupt from here on stops it (Probe.run)
        while not run.status().final:
            if self.cancelled.is_set():
                self._stop_child()
                break
            if self.request.steps is None and measured_enough(run):  # --steps N: all N, a longer window
                enough = True
                self._stop_child()
                break
            time.sleep(0.3)
        self.child = None
        row = measure(run, gpus, batch, self.result.steps, self.device_memory_mb, stopped_measured=enough)
        row = with_noise(self.with_peak(row, run, preset), run, self.result.grad_accum)
        if self.result.device != "cuda" or self.simulated:
            return row  # only the allocator's refusal says it does not fit: a simulated device has no other tenant
        return with_headroom(row, self.request.headroom)

    def with_peak(self, row: ProbeRow, run: RunDir, preset: Preset) -> ProbeRow:
        """The row's memory as the figure that limits its device: the gauge's peak (the one a simulated device
        refuses past; on CPU the true peak, where the sampler's resident memory may miss it), NVML's on a real GPU;
        the trainer names its own figure where it has one (JAX)."""
        from gpuwizard.analysis.probe.memory_model import gauge_peak_mb

        update: dict[str, object] = {}
        cuda = self.result.device == "cuda"
        peak = gauge_peak_mb(run.path / GAUGE_FILE, cuda) if self.simulated or not cuda else None
        if row.outcome == "measured" and peak is not None:
            kind = "the caching allocator's peak reservation" if cuda else "peak resident memory"
            update = {"memory_mb": peak, "memory_source": f"{kind} of the largest rank (the gauge's)"}
        named = getattr(self.trainer, "probe_memory_source", None)  # not every trainer has one (openpi's JAX does)
        if named is not None and (own := named(preset, self.result.device)):
            update["memory_source"] = own
        return row.model_copy(update=update) if update else row

    def _stop_child(self, run: RunDir | None = None) -> None:
        """Stop a configuration's run (the running one by default) and wait until none of its processes is left."""
        from gpuwizard.runner.control.stopping import request_stop
        from gpuwizard.runs.rundir import alive_processes

        run = run or self.child
        if run is None:
            return
        request_stop(run)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = run.status()
            if status.final and not alive_processes(run, status):
                return
            time.sleep(0.2)

    def _stop_children(self) -> None:
        """Stop the running configuration and any other run of this probe still active (a start cut short)."""
        from gpuwizard.runs.rundir import list_runs

        mine = [
            e.run
            for e in list_runs(self.request.preset.name)
            if e.status is not None and e.status.probe == self.result.probe_id and not e.status.final
        ]
        for run in {r.path: r for r in [*([self.child] if self.child else []), *mine]}.values():
            self._stop_child(run)

    def record(self, row: ProbeRow) -> None:
        self.result.rows = add_scaling([*self.result.rows, row])
        fill_models(self.result)
        self.save()
        self.on_update(self.result, f"{row.gpus} x batch {row.per_device_batch}: {row.outcome}")

    def run(self) -> ProbeResult:
        """The whole grid; the result is kept in the probe's folder whatever happens."""
        request = self.request
        try:
            batches = request.batches
            if batches is None:
                start = self._plan(request.gpus[0], None).per_device_batch or 1
                largest = search_batch(self, request.gpus[0], start)
                self.result.batch_limit, self.result.limit_gpus = largest, request.gpus[0]
                batches = [largest] if largest else []
            self.result.batches = batches
            for gpus in request.gpus:
                for batch in batches:
                    done = any(r.gpus == gpus and r.per_device_batch == batch for r in self.result.rows)
                    if self.cancelled.is_set() or done or self.out_of_budget(f"{gpus} x batch {batch}"):
                        continue
                    self.record(self.run_config(gpus, batch))
            if self.result.memory is None:
                self.result.memory = grid_memory_line(self, self.machine_mb())
            self.result.state = "stopped" if self.cancelled.is_set() else "finished"
        except BaseException as exc:
            self.cancelled.set()
            self.result.state = "stopped" if isinstance(exc, KeyboardInterrupt) else "failed"
            self.result.error = None if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._wind_up()
        return self.result

    def _wind_up(self) -> None:
        """Stop what still runs, drop the scratch output (checkpoints of a measurement are of no use) and keep the
        result; a second Ctrl-C or SIGTERM meanwhile does not leave it half done (the stops are already asked)."""
        from gpuwizard.analysis.probe.results import grid_rows, recommend

        while True:
            try:
                self._stop_children()
                shutil.rmtree(self.path / SCRATCH, ignore_errors=True)
                self.result.ended = self.result.ended or time.time()
                fill_models(self.result)
                self.result.verdict = verdict(self.result)
                self.result.recommended = recommend(grid_rows(self.result))
                self.save()
                break
            except KeyboardInterrupt:
                continue
        self.on_update(self.result, self.result.state)

    def cancel(self) -> None:
        self.cancelled.set()
