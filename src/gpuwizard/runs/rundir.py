"""One run's folder: resolved preset, command, log, GPU samples, events, progress and status."""

from __future__ import annotations

import contextlib
import errno
import glob
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

from pydantic import ValidationError

from gpuwizard.core import paths
from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.core.errors import UserError, problem
from gpuwizard.core.yamlio import atomic_write
from gpuwizard.runs.records import (
    Event,
    Job,
    Metric,
    PlanSummary,
    ProcessRef,
    Progress,
    RanksSample,
    Record,
    RecordError,
    RecordT,
    Status,
    StatusUpdate,
    first_mistake,
    parse_lines,
    read_record,
    read_small_file,
)

PRIVATE = 0o700
NAME_MAX = 255
"""The longest folder name Linux file systems take, in bytes: a longer run id names no run."""


@dataclass
class RunDir:
    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def log(self) -> Path:
        return self.path / "log.txt"

    @property
    def events_file(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def gpu_file(self) -> Path:
        return self.path / "gpu.jsonl"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def ranks_file(self) -> Path:
        return self.path / "ranks.jsonl"

    @property
    def stacks_dir(self) -> Path:
        return self.path / "stacks"

    @property
    def space_reserve(self) -> Path:
        """Room the supervisor holds while the job runs, freed for the final records (a full disk at the end)."""
        return self.path / ".space-reserve"

    def write(self, name: str, record: Record) -> None:
        atomic_write(self.path / name, record.to_json_text(), make_parents=False)  # a deleted run stays deleted

    def read(self, name: str, kind: type[RecordT]) -> RecordT:
        """A record file; RecordError says why it cannot be read."""
        return read_record(self.path / name, kind)

    def status(self) -> Status:
        return self.read("status.json", Status)

    def job(self) -> Job:
        return self.read("job.json", Job)

    def plan(self) -> PlanSummary:
        """What plan.json says about batch and steps; RecordError when it cannot be read."""
        try:
            return PlanSummary.model_validate_json(read_small_file(self.path / "plan.json"))
        except ValidationError as exc:
            raise RecordError(f"plan.json does not hold a plan: {first_mistake(exc, PlanSummary)}") from None

    def metrics(self) -> list[Metric]:
        """Every loss the supervisor read, oldest first (lines that are not a record are skipped)."""
        try:
            text = read_small_file(self.metrics_file).decode("utf-8", errors="replace")
        except RecordError:
            return []
        return parse_lines(text, Metric)[0]

    def progress(self) -> Progress | None:
        """The newest progress, or None before the first write (or when it cannot be read)."""
        try:
            return self.read("progress.json", Progress)
        except RecordError:
            return None

    def update_status(self, in_place: bool = False, **fields: Unpack[StatusUpdate]) -> Status:
        """Rewrite status.json with some fields changed, validated as a whole. `in_place` overwrites the file in the
        blocks it already has (a last resort on a full disk, where a new file cannot be made; not atomic)."""
        status = Status.model_validate(self.status().model_dump() | fields)
        if in_place:
            data = status.to_json_text().encode()
            with open(self.path / "status.json", "r+b") as fh:
                if len(data) > os.fstat(fh.fileno()).st_blocks * 512:
                    raise OSError(errno.ENOSPC, "status.json has no room for the new status")
                fh.write(data)
                fh.truncate()
                fh.flush()
                os.fsync(fh.fileno())
        else:
            self.write("status.json", status)
        return status

    def append_line(self, path: Path, record: Record) -> None:
        self.append_lines(path, [record])

    def append_lines(self, path: Path, records: Sequence[Record]) -> None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("".join(record.to_json_text() + "\n" for record in records))

    def events(self) -> tuple[list[Event], int]:
        """Every event, and how many lines could not be read as one."""
        try:
            text = read_small_file(self.events_file).decode("utf-8", errors="replace")
        except RecordError:
            return [], 0
        return parse_lines(text, Event)

    def is_active(self) -> bool:
        """Running, and its supervisor is the very process recorded (a crashed supervisor leaves a stale status)."""
        try:
            status = self.status()
        except RecordError:
            return False
        return status_active(status)


def run_processes(run: RunDir, status: Status) -> list[ProcessRef]:
    """Every process of a run that is known by identity: its supervisor, its launcher and the ranks it sampled."""
    refs = [r for r in (status.supervisor, status.job) if r is not None]
    try:
        text = read_small_file(run.ranks_file).decode("utf-8", errors="replace")
    except RecordError:
        return refs
    samples, _ = parse_lines(text, RanksSample)
    seen = {r.pid for r in refs}
    for sample in samples:
        for rank in sample.ranks:
            if rank.pid not in seen and rank.ref is not None:
                seen.add(rank.pid)
                refs.append(rank.ref)
    return refs


def alive_processes(run: RunDir, status: Status) -> list[int]:
    return sorted(ref.pid for ref in run_processes(run, status) if ref.alive())


def status_active(status: Status) -> bool:
    return status.claims_active and not supervisor_lost(status)


SPAWN_GRACE_S = 150.0


def supervisor_lost(status: Status, now: float | None = None) -> bool:
    """The status says active but its supervisor is gone (killed with -9, machine rebooted, never started)."""
    if not status.claims_active:
        return False
    if status.supervisor is None:
        return (now or time.time()) - status.created > SPAWN_GRACE_S  # the launcher waits on a starting one
    return not status.supervisor.alive()


def new_run_dir(preset_name: str) -> tuple[RunDir, RunDir]:
    """A fresh run folder readable by its owner only (it may hold the command), and a hidden staging folder to fill.

    The final name is reserved by creating it empty; `publish` renames the filled staging folder over it, so
    `runs` and `attach` never see a half-written run (an empty folder is skipped).
    """
    base = paths.runs_dir()
    base.mkdir(parents=True, exist_ok=True, mode=PRIVATE)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        candidate = base / (f"{stamp}-{preset_name}" + (f"-{n}" if n else ""))
        try:
            candidate.mkdir(mode=PRIVATE)
        except FileExistsError:
            continue
        staging = base / f".{candidate.name}.staging"
        try:
            staging.mkdir(mode=PRIVATE)
            for folder in (candidate, staging):
                os.chmod(folder, PRIVATE)  # mkdir's mode is cut by the umask
        except BaseException:  # an interrupt (Ctrl-C) or a full disk: no empty folder is left behind
            for folder in (staging, candidate):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise
        return RunDir(candidate), RunDir(staging)
    raise OSError(f"could not allocate a run folder under {base}")


def publish(staging: RunDir, run: RunDir) -> None:
    """Put a filled staging folder in place of its reserved, empty final folder in one rename."""
    os.rename(staging.path, run.path)


@dataclass
class RunEntry:
    """A run folder as listed: its status, or why it cannot be read."""

    run: RunDir
    status: Status | None
    problem: str | None = None

    @property
    def sort_key(self) -> tuple[float, str]:
        return (self.status.created if self.status else 0.0, self.run.run_id)


def list_runs(preset_name: str | None = None) -> list[RunEntry]:
    """Every run folder, newest first, each status read once; unreadable ones are listed with the reason. With a
    preset name only its (readable) runs: new_run_dir names their folders <stamp>-<preset>[-<n>]."""
    base = paths.runs_dir()
    if not base.is_dir():
        return []
    entries = []
    try:
        if preset_name:
            name = glob.escape(preset_name)
            folders = {*base.glob(f"*-{name}"), *base.glob(f"*-{name}-[0-9]*")}
        else:
            folders = set(base.iterdir())
    except OSError as exc:
        raise UserError(
            problem(None, f"the runs folder {base} cannot be read: {exc.strerror or exc}", "make it yours, mode 0700")
        ) from None
    for path in folders:
        run = RunDir(path)
        try:
            if path.name.startswith(".") or not path.is_dir() or not any(path.iterdir()):
                continue  # staging folders and names reserved for a run being written
            entries.append(RunEntry(run, run.status()))
        except OSError as exc:
            entries.append(RunEntry(run, None, f"the folder cannot be read: {exc.strerror or exc}"))
        except RecordError as exc:
            entries.append(RunEntry(run, None, str(exc)))
    if preset_name:  # "-cpu" also ends "demo-cpu": the status says whose run it is
        entries = [e for e in entries if e.status is not None and e.status.preset == preset_name]
    return sorted(entries, key=lambda e: e.sort_key, reverse=True)


def find_run(run_id: str | None) -> RunDir | None:
    """The run with this id (or a unique prefix of one); the newest readable run when no id is given."""
    base = paths.runs_dir()
    if run_id and len(os.fsencode(run_id)) > NAME_MAX:
        return None  # no folder has such a name (the file system refuses to look: ENAMETOOLONG)
    if run_id:
        exact = base / run_id
        if "/" not in run_id and run_id not in (".", "..") and exact.is_dir():
            return RunDir(exact)
        matches = sorted(p for p in base.glob(f"{glob.escape(run_id)}*") if p.is_dir()) if base.is_dir() else []
        return RunDir(matches[-1]) if matches else None
    readable = [e for e in list_runs() if e.status is not None]
    return readable[0].run if readable else None


def is_probe_run(entry: RunEntry) -> bool:
    """A short measurement run of `gpuwizard probe`: the run history (Runs screen, `gpuwizard runs`) hides it unless
    asked, since a probe makes several per preset and none is a job the user started."""
    return entry.status is not None and entry.status.probe is not None


def history_entries(entries: list[RunEntry], probes: bool) -> tuple[list[RunEntry], int]:
    """The entries the history shows (probe runs only with `probes`) and how many probe runs it hid."""
    shown = [e for e in entries if probes or not is_probe_run(e)]
    return shown, len(entries) - len(shown)


def history_row(entry: RunEntry, green: set[str], now: float) -> dict[str, Any]:
    """One history row; a folder that cannot be read is a row saying so."""
    s = entry.status
    if s is None:
        return {"run_id": entry.run.run_id, "state": "corrupt", "problem": entry.problem, "path": str(entry.run.path)}
    progress = entry.run.progress()
    state = str(s.state)
    if s.claims_active and not status_active(s):
        state = "lost"
    return {
        "run_id": entry.run.run_id,
        "preset": s.preset,
        "state": state,
        "exit_code": s.exit_code,
        "world_size": s.world_size,
        "nodes": s.nodes,
        "slurm_job_id": s.slurm_job_id,
        "device": s.device,
        "smoke": s.smoke,
        "probe": s.probe,
        "sweep": s.sweep,
        "step": progress.step if progress else None,
        "steps": s.steps,
        "duration_s": round(s.elapsed_s(now), 1),
        "samples_per_s": finite((progress.samples_per_s_mean or progress.samples_per_s) if progress else None),
        "baseline_green": s.preset in green,
        "resumed_from": s.resumed_from,
        "path": str(entry.run.path),
    }


def finite(value: float | None) -> float | None:
    """A rate as shown and written as JSON: a job's log may report inf or NaN, which JSON cannot carry."""
    return value if value is not None and math.isfinite(value) else None


def green_baselines(entries: list[RunEntry]) -> set[str]:
    """Presets with a one-process run that finished with exit 0 (a probe's short measurement is no baseline)."""
    return {
        e.status.preset
        for e in entries
        if e.status
        and e.status.world_size == 1
        and e.status.state == RunState.FINISHED
        and e.status.exit_code == ExitCode.OK
        and not e.status.probe
    }


def baseline_green(preset_name: str) -> bool:
    """Did a one-GPU (one-process) run of this preset ever finish with exit 0?"""
    return preset_name in green_baselines(list_runs())


def scaling_report(preset_name: str, entries: list[RunEntry] | None = None) -> list[dict[str, Any]]:
    """Measured samples/s per process count for a preset's finished full runs, with speedup and efficiency."""
    latest: dict[int, tuple[float, str]] = {}
    for entry in reversed(entries if entries is not None else list_runs(preset_name)):
        s = entry.status
        if s is None or s.preset != preset_name or s.state != RunState.FINISHED or s.smoke or s.probe:
            continue
        progress = entry.run.progress()
        rate = finite((progress.samples_per_s_mean or progress.samples_per_s) if progress else None)
        if rate:
            latest[s.world_size] = (float(rate), entry.run.run_id)
    base = latest[1][0] if 1 in latest else None
    rows = []
    for world, (rate, run_id) in sorted(latest.items()):
        speedup = rate / base if base else None
        rows.append(
            {
                "world_size": world,
                "run_id": run_id,
                "samples_per_s": rate,
                "speedup": speedup,
                "efficiency": speedup / world if speedup else None,
            }
        )
    return rows
