"""The run history as `gpuwizard runs` and the Runs screen read it: each folder's status and progress read once,
however many rows, baselines and scaling reports are made of them, and an ended run's not at all while its files are
unchanged since the last listing (core/statcache.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuwizard.core import paths
from gpuwizard.core.errors import UserError, problem
from gpuwizard.core.statcache import StatCache, stamp
from gpuwizard.runs.records import Progress, RecordError, Status
from gpuwizard.runs.rundir import RunDir, RunEntry


@dataclass
class ListedRun(RunDir):
    """A run folder whose progress.json is read on the first ask only (a row and a scaling report both ask)."""

    progress_read: list[Progress | None] = field(default_factory=list, compare=False, repr=False)

    def progress(self) -> Progress | None:
        if not self.progress_read:
            self.progress_read.append(super().progress())
        return self.progress_read[0]


def listed_runs() -> list[RunEntry]:
    """Every run folder, newest first, as rundir.list_runs lists them (unreadable ones with the reason)."""
    base = paths.runs_dir()
    if not base.is_dir():
        return []
    try:
        with os.scandir(base) as found:
            folders = [(entry.name, entry.path) for entry in found if not entry.name.startswith(".")]
    except OSError as exc:
        raise UserError(
            problem(None, f"the runs folder {base} cannot be read: {exc.strerror or exc}", "make it yours, mode 0700")
        ) from None
    cache = StatCache("runs", base)
    entries = [entry for name, folder in folders if (entry := read_entry(name, folder, cache))]
    cache.save()
    return sorted(entries, key=lambda e: e.sort_key, reverse=True)


def read_entry(name: str, folder: str, cache: StatCache) -> RunEntry | None:
    """One folder as listed; None for what is no run (a file, a name reserved for a run being written). Paths as
    text: 5,000 runs make 15,000 of them."""
    path = Path(folder)
    run = ListedRun(path)
    key = stamp(f"{folder}/status.json", f"{folder}/progress.json")
    remembered = remembered_entry(run, cache.get(name, key))
    if remembered is not None:
        return remembered
    try:
        if not path.is_dir() or not any(path.iterdir()):
            return None
        status = run.status()
    except OSError as exc:
        return RunEntry(run, None, f"the folder cannot be read: {exc.strerror or exc}")
    except RecordError as exc:
        return RunEntry(run, None, str(exc))
    progress = run.progress()
    if status.final:  # a live run changes under the listing: read each time
        summary = {  # as JSON text: pydantic parses and validates it in one pass, twice as fast as a dict
            "status": status.model_dump_json(exclude_defaults=True),
            "progress": progress and progress.model_dump_json(exclude_defaults=True),
        }
        cache.put(name, key, summary)
    return RunEntry(run, status)


def remembered_entry(run: ListedRun, summary: Any) -> RunEntry | None:
    """An ended run from the cache, validated as its files are; None when there is none or it does not validate."""
    if not isinstance(summary, dict) or not isinstance(summary.get("status"), str):
        return None
    try:
        status = Status.model_validate_json(summary["status"])
        progress = None if summary.get("progress") is None else Progress.model_validate_json(summary["progress"])
    except ValidationError:
        return None
    if not status.final:
        return None
    run.progress_read.append(progress)
    return RunEntry(run, status)
