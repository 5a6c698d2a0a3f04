"""Reads a run folder as it grows (log, events, samples, progress, status) and sends stop/dump requests."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from gpuwizard.runner.procs import JobProcesses
from gpuwizard.runner.rundir import ACTIVE_STATES, RunDir, pid_alive
from gpuwizard.runner.tail import LogTail

FINAL_STATES = ("finished", "failed", "hung", "stopped")


@dataclass
class RunUpdate:
    lines: list[str] = field(default_factory=list)
    bar: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    gpu: list[dict[str, Any]] = field(default_factory=list)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    progress: dict[str, Any] | None = None
    status: dict[str, Any] = field(default_factory=dict)


class JsonlTail:
    def __init__(self, path: Any):
        self.tail = LogTail(path)

    def read(self) -> list[dict[str, Any]]:
        records = []
        for line in self.tail.read().lines:
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
        return records


class RunFollower:
    """Incremental reader of one run folder; `poll()` returns what is new since the last call."""

    def __init__(self, run: RunDir, log_offset: int = 0):
        self.run = run
        self.log = LogTail(run.log, offset=log_offset, chunk=1 << 20)  # small batches keep keys responsive in a flood
        self.events = JsonlTail(run.events_file)
        self.gpu = JsonlTail(run.gpu_file)
        self.ranks = JsonlTail(run.ranks_file)
        self._progress_mtime = 0.0

    def poll(self) -> RunUpdate:
        chunk = self.log.read()
        update = RunUpdate(lines=chunk.lines, bar=chunk.bar)
        update.events = self.events.read()
        update.gpu = self.gpu.read()
        update.ranks = self.ranks.read()
        progress_file = self.run.path / "progress.json"
        try:
            mtime = progress_file.stat().st_mtime
        except OSError:
            mtime = 0.0
        if mtime != self._progress_mtime:
            self._progress_mtime = mtime
            update.progress = self.run.read_json("progress.json")
        update.status = self.run.status()
        return update

    def close(self) -> None:
        for tail in (self.log, self.events.tail, self.gpu.tail, self.ranks.tail):
            tail.close()


def is_final(status: dict[str, Any]) -> bool:
    return status.get("state") in FINAL_STATES


def supervisor_lost(run: RunDir) -> bool:
    """The status says active but the supervisor is gone (killed with -9, machine rebooted)."""
    status = run.status()
    return status.get("state") in ACTIVE_STATES and not pid_alive(status.get("supervisor_pid"))


def request_stop(run: RunDir) -> None:
    """Ask the supervisor to stop the job (it signals the whole tree); without one, stop the tree here."""
    status = run.status()
    if pid_alive(status.get("supervisor_pid")):
        os.kill(status["supervisor_pid"], signal.SIGTERM)
        return
    job_pid = status.get("job_pid")
    if isinstance(job_pid, int) and pid_alive(job_pid):
        JobProcesses(job_pid).stop()
    run.update_status(state="stopped", exit_code=4, ended=time.time(), stop_reason="user (supervisor was gone)")


def request_stack_dump(run: RunDir) -> bool:
    pid = run.status().get("supervisor_pid")
    if pid_alive(pid):
        os.kill(pid, signal.SIGUSR1)
        return True
    return False


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def progress_parts(progress: dict[str, Any] | None, status: dict[str, Any]) -> list[str]:
    """loss, lr, samples/s and ETA, as shown in status lines and the monitor."""
    p = progress or {}
    parts = []
    if p.get("loss") is not None:
        parts.append(f"loss {p['loss']:.4g}")
    if p.get("lr") is not None:
        parts.append(f"lr {p['lr']:.2e}")
    if p.get("samples_per_s") is not None:
        parts.append(f"{p['samples_per_s']:.0f} smp/s")
    if p.get("step") is not None and not is_final(status):
        parts.append(f"ETA {clock(p.get('eta_s'))}")
    return parts


def status_line(progress: dict[str, Any] | None, status: dict[str, Any], now: float | None = None) -> str:
    """One line: elapsed, state, step/total, then progress_parts."""
    now = now or time.time()
    p = progress or {}
    started = status.get("started") or status.get("created") or now
    step, total = p.get("step"), p.get("total") or status.get("steps")
    parts = [f"[{clock(now - started)}]", status.get("state", "?")]
    if step is not None:
        pct = f" ({100 * step / total:.0f}%)" if total else ""
        parts.append(f"step {step}/{total or '?'}{pct}")
    else:
        parts.append("waiting for the first step")
    return "  ".join(parts + progress_parts(progress, status))


def event_text(event: dict[str, Any]) -> str:
    text = f"{event.get('severity', 'info').upper()}: {event.get('title')}"
    if event.get("detail"):
        text += f"\n  {event['detail']}"
    if event.get("suggestion"):
        text += f"\n  next: {event['suggestion']}"
    return text
