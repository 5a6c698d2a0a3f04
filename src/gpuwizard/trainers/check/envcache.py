"""Answers from a training interpreter, remembered on disk until that environment changes.

Starting a training interpreter (torch, the trainer's imports) costs seconds, more than the rest of a plan; its
answers stay valid until the interpreter or a watched path (a folder on its sys.path, a trainer source file)
changes: a pip install, a branch switch in an editable checkout.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from gpuwizard.core import paths
from gpuwizard.core.yamlio import atomic_write

MAX_ENTRIES = 200
"""Oldest answers are dropped past this many, so the file stays small whatever the history."""


def interpreter(python: str) -> str:
    """The interpreter's absolute path as the cache knows it (a bare name is looked up on PATH)."""
    return os.path.abspath(shutil.which(python) or python)


def stamps(watched: list[str]) -> list[int | None]:
    """Modification times that change when the environment's packages do."""
    found: list[int | None] = []
    for path in watched:
        try:
            found.append(os.stat(path).st_mtime_ns)
        except OSError:
            found.append(None)
    return found


def is_binary(exe: str) -> bool:
    """A real interpreter, not a wrapper script (pyenv shim, sh) that may pick another one next time."""
    try:
        with open(exe, "rb") as handle:
            return handle.read(2) != b"#!"
    except OSError:
        return False


class EnvCache:
    """One JSON file of answers, each kept with the stamps of the paths it depends on."""

    def __init__(self, name: str):
        self.file = paths.data_dir() / "cache" / f"{name}.json"

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.file.read_text())
        except (OSError, ValueError, RecursionError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str, exe: str) -> dict[str, Any] | None:
        """The answer stored under `key`, if the interpreter and every path it watched are unchanged."""
        entry = self._read().get(key)
        if not isinstance(entry, dict) or not isinstance(answer := entry.get("answer"), dict):
            return None
        watch = entry.get("watch")
        if not isinstance(watch, list) or entry.get("stamp") != stamps([exe, *map(str, watch)]):
            return None
        return answer

    def put(self, key: str, exe: str, answer: dict[str, Any], watch: list[str]) -> None:
        """Remember an answer; nothing is kept for a wrapper script, which may run another interpreter next time."""
        if not is_binary(exe):
            return
        data = self._read()
        data.pop(key, None)
        data[key] = {"answer": answer, "watch": watch, "stamp": stamps([exe, *watch])}
        for old in list(data)[: max(0, len(data) - MAX_ENTRIES)]:
            del data[old]
        try:
            atomic_write(self.file, json.dumps(data, indent=1))
        except OSError:
            pass  # only a cache: the next call asks the interpreter again
