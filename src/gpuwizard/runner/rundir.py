"""One run's folder (SPEC §5): resolved preset, command, log, GPU samples, events, progress and status."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwizard import paths
from gpuwizard.yamlio import atomic_write

ACTIVE_STATES = ("starting", "running", "stopping")


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
    def ranks_file(self) -> Path:
        return self.path / "ranks.jsonl"

    @property
    def stacks_dir(self) -> Path:
        return self.path / "stacks"

    def read_json(self, name: str, default: Any = None) -> Any:
        try:
            return json.loads((self.path / name).read_text())
        except (OSError, ValueError):
            return default

    def write_json(self, name: str, data: Any) -> None:
        atomic_write(self.path / name, json.dumps(data, indent=2, default=str))

    def status(self) -> dict[str, Any]:
        return self.read_json("status.json", {}) or {}

    def update_status(self, **fields: Any) -> dict[str, Any]:
        status = self.status() | fields
        self.write_json("status.json", status)
        return status

    def append_jsonl(self, path: Path, record: dict[str, Any]) -> None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=str) + "\n")

    def events(self) -> list[dict[str, Any]]:
        return read_jsonl(self.events_file)

    def is_active(self) -> bool:
        """Running, and its supervisor process is still alive (a crashed supervisor leaves a stale status)."""
        status = self.status()
        if status.get("state") not in ACTIVE_STATES:
            return False
        return pid_alive(status.get("supervisor_pid"))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def new_run_dir(preset_name: str) -> RunDir:
    base = paths.runs_dir()
    base.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        candidate = base / (f"{stamp}-{preset_name}" + (f"-{n}" if n else ""))
        try:
            candidate.mkdir()
            return RunDir(candidate)
        except FileExistsError:
            continue
    raise RuntimeError("could not allocate a run folder")


def all_runs() -> list[RunDir]:
    """Every run folder, newest first."""
    base = paths.runs_dir()
    if not base.is_dir():
        return []
    runs = [RunDir(p) for p in base.iterdir() if (p / "status.json").exists()]
    return sorted(runs, key=lambda r: (r.status().get("created", 0), r.run_id), reverse=True)


def find_run(run_id: str | None) -> RunDir | None:
    runs = all_runs()
    if run_id is None:
        return runs[0] if runs else None
    for run in runs:
        if run.run_id == run_id or run.run_id.startswith(run_id):
            return run
    return None


def baseline_green(preset_name: str) -> bool:
    """Did a one-GPU (one-process) run of this preset ever finish with exit 0?"""
    for run in all_runs():
        s = run.status()
        if s.get("preset") == preset_name and s.get("world_size") == 1 and s.get("state") == "finished" and s.get("exit_code") == 0:
            return True
    return False


def scaling_report(preset_name: str) -> list[dict[str, Any]]:
    """Measured samples/s per process count for a preset's finished full runs, with speedup and efficiency."""
    latest: dict[int, float] = {}
    for run in reversed(all_runs()):
        s = run.status()
        if s.get("preset") != preset_name or s.get("state") != "finished" or s.get("smoke"):
            continue
        progress = run.read_json("progress.json", {}) or {}
        rate = progress.get("samples_per_s_mean") or progress.get("samples_per_s")
        if rate:
            latest[int(s.get("world_size", 1))] = float(rate)
    base = latest.get(1)
    rows = []
    for world, rate in sorted(latest.items()):
        speedup = rate / base if base else None
        rows.append({"world_size": world, "samples_per_s": rate, "speedup": speedup, "efficiency": speedup / world if speedup else None})
    return rows


def scaling_text(preset_name: str) -> str | None:
    rows = [r for r in scaling_report(preset_name) if r["efficiency"] is not None and r["world_size"] > 1]
    if not rows:
        return None
    return "; ".join(f"{r['world_size']} processes: {r['speedup']:.2f}x the 1-process samples/s (efficiency {r['efficiency']:.0%})" for r in rows)
