"""What a listing read of each file in a folder, remembered by the file's identity (inode, size, change times), so
listing thousands of presets or runs reads only the files changed since. Any reader rebuilds it; a damaged, foreign
or unwritable cache costs the full reads, never an error, and each reader validates what it takes back."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from gpuwizard import __version__
from gpuwizard.core import paths
from gpuwizard.core.yamlio import atomic_write, read_regular

RACY_S = 2.0
"""A file changed this recently may change again within one tick of the file system's clock, keeping its identity:
it is read, not remembered."""
MAX_CACHE_BYTES = 64 << 20

Stamp = list[int]


def stamp(*files: str | Path) -> Stamp | None:
    """The identity of some files as one list (zeros for a missing one); None when one cannot be looked at or has
    changed too recently to be trusted."""
    out: Stamp = []
    fresh = time.time_ns() - int(RACY_S * 1e9)
    for file in files:
        try:
            st = os.stat(file)
        except FileNotFoundError:
            out += [0, 0, 0, 0]
            continue
        except OSError:
            return None
        if max(st.st_mtime_ns, st.st_ctime_ns) > fresh:
            return None
        out += [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    return out


class StatCache:
    """One folder's remembered summaries, kept in the user's data folder (the folder listed may be read-only)."""

    def __init__(self, kind: str, folder: Path):
        self.folder = str(folder.absolute())
        digest = hashlib.sha256(f"{kind}\0{self.folder}".encode()).hexdigest()[:16]
        self.file = paths.data_dir() / "cache" / f"{kind}-{digest}.json"
        self.entries = self.load()
        self.seen: set[str] = set()
        self.changed = False

    def load(self) -> dict[str, Any]:
        try:
            data = json.loads(read_regular(self.file, MAX_CACHE_BYTES))
        except (OSError, ValueError, RecursionError):
            return {}
        ours = isinstance(data, dict) and data.get("version") == __version__ and data.get("folder") == self.folder
        entries = data.get("entries") if ours else None
        return entries if isinstance(entries, dict) else {}

    def get(self, name: str, key: Stamp | None) -> Any:
        """The summary remembered for a file (or files) of this name, if they are unchanged since; else None."""
        self.seen.add(name)
        entry = self.entries.get(name)
        if key is None or not isinstance(entry, list) or len(entry) != 2 or entry[0] != key:
            return None
        return entry[1]

    def put(self, name: str, key: Stamp | None, summary: Any) -> None:
        self.seen.add(name)
        if key is not None:
            self.entries[name] = [key, summary]
            self.changed = True

    def save(self) -> None:
        """Write back what changed, forgetting names not asked for this time; a cache that cannot be written is only
        not remembered."""
        gone = self.entries.keys() - self.seen
        if not (self.changed or gone):
            return
        for name in gone:
            del self.entries[name]
        text = json.dumps({"version": __version__, "folder": self.folder, "entries": self.entries})
        with contextlib.suppress(OSError):
            self.file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            atomic_write(self.file, text)
