"""Run a probe's grid: each configuration a short real run of the preset's command through the supervisor, with
its output in the probe's scratch folder, one at a time, within a time budget, cancellable with nothing left."""

from __future__ import annotations

import math
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE
from gpuwizard.analysis.probe.results import (
    ENOUGH_LINES,
    ENOUGH_S,
    PROBE_RECORD,
    SCRATCH,
    WARMUP_SHARE,
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
from gpuwizard.core.kinds import ProbeState
from gpuwizard.core.yamlio import atomic_write
from gpuwizard.model.preset import Preset, with_field
from gpuwizard.runner.probe.background import BackgroundMeter
from gpuwizard.runner.probe.batch_search import grid_memory_line, search_batch
from gpuwizard.runner.probe.from_run import find_start
from gpuwizard.runner.probe.request import START_GUESS_S, ProbeRequest, clock, startable_gpus
from gpuwizard.runs.rundir import PRIVATE, RunDir

if TYPE_CHECKING:
    from gpuwizard.model.job import Plan


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
        self.start = find_start(request.preset, request.from_run) if request.from_run else None
        self.inventory = read_inventory()
        self.cancelled = threading.Event()
        self.child: RunDir | None = None
        self.started = time.monotonic()
        self.walls: list[float] = []
        """Each run's wall time as the probe saw it (start-up, measuring and stopping)."""
        plan = self._plan(request.gpus[0], None)
        asked = list(request.gpus)
        request.gpus, left_out = startable_gpus(request, self.inventory, plan.device)
        steps = min(request.steps or self.trainer.probe_steps, request.preset.optim.steps)
        self.refuse_silent_log(steps)
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
            steps=steps,
            job_steps=request.preset.optim.steps,
            steps_asked=request.steps is not None,
            headroom=request.headroom,
            budget_s=request.budget_s,
            full_run_samples=self._plan(request.preset.hardware.gpus, None).samples_seen,
            skipped=left_out,
            gpus=asked,
            grad_accum=request.preset.batch.grad_accum,
            cores=os.cpu_count() if plan.device == "cpu" else None,
            rounds=request.repeat,
            lr=request.preset.optim.lr,
            scaling_rule=request.preset.scaling.rule,
        )
        if self.start is not None:
            self.result.from_run, self.result.start_step = self.start.run_id, self.start.step
            self.result.noise_stage = self.start.stage
            self.result.lr = self.start.lr  # the checkpoint's optimizer state holds it, not the flag
        self.result.scaled_lr = self._scaled_lrs()
        self.result.expected_s = self.expected_s()
        self.save()

    def _plan(self, gpus: int, batch: int | None) -> Plan:
        from gpuwizard.planning.plan import make_plan, with_gpus

        preset = with_gpus(self.request.preset, gpus)
        if batch is not None:
            preset = with_field(preset, "batch.size", self._batch_flag(batch, gpus))
        return make_plan(preset)[0]

    def _scaled_lrs(self) -> dict[str, float]:
        """The lr the preset's scaling rule gives each global batch of the grid (what the step ratio assumes)."""
        out = {}
        for gpus in self.request.gpus:
            for batch in self.request.batches or []:
                plan = self._plan(gpus, batch)
                if plan.lr is not None and plan.effective_batch:
                    out[str(plan.effective_batch)] = plan.lr
        return out

    def refuse_silent_log(self, steps: int) -> None:
        """A trainer whose log lines come too far apart for the probe's steps would measure nothing: refused in one
        paragraph, before anything starts (the probe sets the interval where the trainer has one)."""
        from gpuwizard.planning.plan import make_plan

        plan, ctx = make_plan(self.trainer.probe_variant(self.request.preset, steps))
        every = self.trainer.log_interval(ctx)
        needed = ENOUGH_LINES / (1 - WARMUP_SHARE)
        if every and plan.trainer_steps // every < needed:
            raise UserError(
                problem(
                    "--steps",
                    f"a configuration of {steps} steps logs a loss and a rate every {every} of the trainer's steps, "
                    f"{plan.trainer_steps // every} lines: fewer than the {needed:.0f} the probe needs to measure past "
                    "the warm-up",
                    f"probe with --steps {math.ceil(every * needed * steps / max(1, plan.trainer_steps))} or more, or "
                    "lower the trainer's log interval in trainer_options",
                    value=steps,
                )
            )

    def planned_runs(self) -> int:
        """Runs the probe will start: the grid, then each round's compared configurations (one per GPU count)."""
        grid, counts = len(self.request.gpus) * len(self.request.batches or [1]), len(self.request.gpus)
        return grid + (self.request.repeat * counts if counts > 1 else 0)

    def expected_s(self) -> float:
        """The probe's duration: the mean run so far times the runs left, or before any has ended a guess from the
        plan (start-up, and the steps the measured window needs at the plan's estimated step time)."""
        runs = self.walls
        left = max(0, self.planned_runs() - len(runs))
        if runs:
            return self._elapsed() + left * sum(runs) / len(runs)
        plan = self._plan(self.request.gpus[0], None)
        hours = next((e.wall_h for e in plan.estimates if e.gpus == 1 and e.wall_h), None)
        step_s = hours * 3600 / max(1, self.request.preset.optim.steps) if hours else None
        measure = min(self.result.steps * step_s, 3 * ENOUGH_S) if step_s else 3 * ENOUGH_S
        return self.planned_runs() * (START_GUESS_S[self.result.device] + measure)

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

    def pace(self) -> str:
        """ "1:23 of about 3:40": the time so far against the probe's expected duration (refined as runs end)."""
        return f"{clock(self._elapsed())} of about {clock(max(self._elapsed(), self.result.expected_s or 0))}"

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

    def launch_preset(self, gpus: int, batch: int, repeat: int = 0) -> Preset:
        """One run's preset: the trainer's short variant at this batch, the gauge on (its peak memory, and B_noise
        where gauged(); it only reads), its output in a scratch folder of its own (a round's run is a fresh one)."""
        preset = self.trainer.probe_variant(self.request.preset, self.result.steps)
        if self.start is not None:  # its steps go on from the checkpoint's
            preset = with_field(preset, "optim.steps", self.start.step + self.result.steps)
        preset = with_field(with_field(preset, "scaling.rule", "none"), "monitor.gauge", True)
        scratch = self.path / SCRATCH / (f"g{gpus}-b{batch}" + (f"-r{repeat}" if repeat else ""))
        return with_field(with_field(preset, "batch.size", self._batch_flag(batch, gpus)), "output_dir", str(scratch))

    def run_config(self, gpus: int, batch: int, repeat: int = 0) -> ProbeRow:
        """One short real run, with the machine's background beside it; its row (a recognised out-of-memory failure
        is `does not fit`, not a crash)."""
        from gpuwizard.runner.launch.prepare import prepare_run
        from gpuwizard.runner.launch.start import start_run

        done, began = len(self.walls), time.monotonic()
        which = f", round {repeat} of {self.request.repeat}" if repeat else ""
        self.say(f"running {gpus} x batch {batch} (run {done + 1} of {self.planned_runs()}{which})")
        preset = self.launch_preset(gpus, batch, repeat)
        resume = self.start is not None
        if self.start is not None:
            self.start.seed(Path(str(preset.output_dir)))
        try:
            prepared = prepare_run(preset, gpus=gpus, inventory=self.inventory, resume=resume, slurm=self.request.slurm)
        except UserError as exc:
            message = exc.problems[0].message
            return ProbeRow(gpus=gpus, per_device_batch=batch, outcome="failed", detail=message, repeat=repeat)
        run = start_run(replace(prepared, probe=self.result.probe_id), on_hang="stop")
        self.child, enough = run, False  # an interrupt from here on stops it (Probe.run)
        meter = BackgroundMeter()
        while not (status := run.status()).final:
            meter.sample(status.supervisor.pid if status.supervisor else None)
            if self.cancelled.is_set():
                self._stop_child()
                break
            if self.request.steps is None and measured_enough(
                run, self.result.start_step
            ):  # --steps N: all N, a longer window
                enough = True
                self._stop_child()
                break
            time.sleep(0.3)
        self.child = None
        self.walls.append(time.monotonic() - began)
        start = self.result.start_step
        row = measure(run, gpus, batch, self.result.steps, self.device_memory_mb, stopped_measured=enough, start=start)
        row = with_noise(self.with_peak(row, run, preset), run, self.result.grad_accum)
        background, shift, waiting = meter.window(row.window_start, row.window_end)
        update = {"repeat": repeat, "background": background, "background_shift": shift, "waiting": waiting}
        row = row.model_copy(update=update)
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
        if row.repeat:
            self.result.repeats = [*self.result.repeats, row]
        else:
            self.result.rows = add_scaling([*self.result.rows, row])
        fill_models(self.result)
        self.result.expected_s = self.expected_s()
        self.save()
        said = f"{row.samples_per_s:.1f} samples/s" if row.samples_per_s else row.outcome
        self.on_update(self.result, f"{row.gpus} x batch {row.per_device_batch}: {said}")

    def alternate(self) -> None:
        """Rounds of the configurations the decision compares (the best per GPU count), in alternating order (the
        grid's order reversed, then as it was, ...) so each window of one lies beside a window of the other."""
        decision = self.result.decision
        if decision is None or not decision.compared:
            return
        first = decision.compared[0]
        keys = [(first.base_gpus, first.base_batch), *((c.gpus, c.batch) for c in decision.compared)]
        for round_ in range(1, self.request.repeat + 1):
            for gpus, batch in keys[::-1] if round_ % 2 else keys:
                if self.cancelled.is_set() or self.out_of_budget(f"{gpus} x batch {batch}, round {round_}"):
                    return
                self.record(self.run_config(gpus, batch, round_))

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
            self.alternate()
            if self.result.memory is None:
                self.result.memory = grid_memory_line(self, self.machine_mb())
            self.result.state = ProbeState.STOPPED if self.cancelled.is_set() else ProbeState.FINISHED
        except BaseException as exc:
            self.cancelled.set()
            self.result.state = ProbeState.STOPPED if isinstance(exc, KeyboardInterrupt) else ProbeState.FAILED
            self.result.error = None if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._wind_up()
        return self.result

    def _wind_up(self) -> None:
        """Stop what still runs, drop the scratch output (checkpoints of a measurement are of no use) and keep the
        result; a second Ctrl-C or SIGTERM meanwhile does not leave it half done (the stops are already asked)."""

        while True:
            try:
                self._stop_children()
                shutil.rmtree(self.path / SCRATCH, ignore_errors=True)
                self.result.ended = self.result.ended or time.time()
                fill_models(self.result)
                self.result.verdict = verdict(self.result)
                self.result.recommended = self.recommended()
                self.save()
                break
            except KeyboardInterrupt:
                continue
        self.on_update(self.result, self.result.state)

    def recommended(self) -> ProbeRow | None:
        """The grid's row of the decision's configuration."""
        d = self.result.decision
        found = (r for r in self.result.rows if d and (r.gpus, r.per_device_batch) == (d.gpus, d.batch))
        return next(found, None)

    def cancel(self) -> None:
        self.cancelled.set()
