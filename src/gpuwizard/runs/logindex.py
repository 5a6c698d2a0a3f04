"""A sparse line index over a growing log file, so any line of a multi-gigabyte log is read on demand.

The index keeps one entry per block of about a mebibyte (its byte offset and the number of lines
before it), so memory stays flat however long the log grows; a block is read and split when one
of its lines is shown or searched. Lines are complete lines only: the unfinished last line (a
progress bar being redrawn) is left to the follower.
"""

from __future__ import annotations

import bisect
import os
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from gpuwizard.core.safetext import safe_line
from gpuwizard.core.yamlio import open_regular

BLOCK_BYTES = 1 << 20
READ_BYTES = 8 << 20
CACHED_BLOCKS = 8
NEWLINE = 10


def newline_counter(data: bytearray, length: int) -> Callable[[int, int], int]:
    """Counts newlines in slices of a buffer; numpy's vectorised compare is ~2x bytes.count and releases the GIL
    (the UI thread keeps drawing while a large log is indexed)."""
    import numpy as np

    newlines = np.frombuffer(data, np.uint8, length) == NEWLINE

    def count(start: int, end: int) -> int:
        return int(np.count_nonzero(newlines[start:end]))

    return count


def display_line(raw: bytes) -> str:
    """One stored line as shown: the last carriage-return state (tqdm redraws), tabs expanded, no escape
    sequences and other controls made visible (safetext)."""
    if b"\r" in raw:
        raw = raw.rstrip(b"\r").rsplit(b"\r", 1)[-1]
    return safe_line(raw.decode("utf-8", errors="replace").expandtabs(8))


class LogIndex:
    """Line offsets of one log file; `extend()` indexes what was appended, `lines()` and `search()` read on demand."""

    def __init__(self, path: Path):
        self.path = path
        self.block_starts = array("Q", [0])
        self.block_first_line = array("Q", [0])
        self.indexed_bytes = 0
        self.line_count = 0
        self._cache: OrderedDict[int, list[bytes]] = OrderedDict()
        self._lock = threading.Lock()

    # -- indexing (one thread) -------------------------------------------------------------------
    def extend(self, limit_bytes: int | None = None) -> bool:
        """Index complete lines appended since the last call (at most `limit_bytes`); True if any were added."""
        try:
            fh = os.fdopen(open_regular(self.path), "rb", buffering=0)  # a FIFO in its place never blocks the poll
        except OSError:
            return False
        added = False
        with fh:
            size = os.fstat(fh.fileno()).st_size
            if size < self.indexed_bytes:
                self.reset()  # truncated or replaced: start over
            budget = min(size - self.indexed_bytes, limit_bytes if limit_bytes is not None else size)
            buffer = bytearray(
                min(READ_BYTES, max(budget, 0))
            )  # a live tail reads a few bytes: no 8 MB buffer each poll
            while budget > 0:
                fh.seek(self.indexed_bytes)
                got = fh.readinto(memoryview(buffer)[: min(len(buffer), budget)])
                if not got:
                    break
                cut = buffer.rfind(b"\n", 0, got)
                if cut < 0:
                    break  # no complete line yet
                self._index(buffer, cut + 1)
                added = True
                budget -= cut + 1
        return added

    def _index(self, data: bytearray, length: int) -> None:
        """Count the lines of whole-line `data[:length]` starting at `indexed_bytes`, opening a block at the first
        line start past each boundary."""
        base, pos, lines = self.indexed_bytes, 0, self.line_count
        counts = newline_counter(data, length)
        while True:
            boundary = self.block_starts[-1] + BLOCK_BYTES - base
            if boundary >= length:
                break
            newline = data.find(b"\n", max(boundary - 1, pos), length)
            if newline < 0 or newline + 1 >= length:
                break
            lines += counts(pos, newline + 1)
            pos = newline + 1
            with self._lock:
                self.block_starts.append(base + pos)
                self.block_first_line.append(lines)
        lines += counts(pos, length)
        with self._lock:
            self.indexed_bytes = base + length
            self.line_count = lines
            last = len(self.block_starts) - 1
            self._cache.pop(last, None)  # the open block grew

    def reset(self) -> None:
        with self._lock:
            self.block_starts = array("Q", [0])
            self.block_first_line = array("Q", [0])
            self.indexed_bytes = 0
            self.line_count = 0
            self._cache.clear()

    # -- reading (any thread) ------------------------------------------------------------------------
    def _block_range(self, block: int) -> tuple[int, int]:
        start = self.block_starts[block]
        end = self.block_starts[block + 1] if block + 1 < len(self.block_starts) else self.indexed_bytes
        return start, end

    def _read(self, start: int, end: int) -> bytes:
        """The bytes of an indexed range; none when the file was replaced by something that cannot be read."""
        try:
            fh = os.fdopen(open_regular(self.path), "rb")
        except OSError:
            return b""
        with fh:
            fh.seek(start)
            return fh.read(end - start)

    def _block_lines(self, block: int) -> list[bytes]:
        with self._lock:
            cached = self._cache.get(block)
            if cached is not None:
                self._cache.move_to_end(block)
                return cached
            start, end = self._block_range(block)
        raw = self._read(start, end)
        lines = raw.split(b"\n")[:-1] if raw.endswith(b"\n") else raw.split(b"\n")
        with self._lock:
            self._cache[block] = lines
            while len(self._cache) > CACHED_BLOCKS:
                self._cache.popitem(last=False)
        return lines

    def block_of(self, line: int) -> int:
        return bisect.bisect_right(self.block_first_line, line) - 1

    def lines(self, first: int, count: int) -> list[str]:
        """Up to `count` display lines starting at line `first` (0-based)."""
        out: list[str] = []
        total = self.line_count
        line = max(0, first)
        while len(out) < count and line < total:
            block = self.block_of(line)
            stored = self._block_lines(block)
            offset = line - self.block_first_line[block]
            take = stored[offset : offset + count - len(out)]
            if not take:
                break
            out.extend(display_line(raw) for raw in take)
            line += len(take)
        return out

    def search(self, needle: str, start_line: int, cancelled: threading.Event | None = None) -> int | None:
        """The first line from `start_line` on holding `needle` (ASCII case-insensitive), wrapping round once."""
        wanted = needle.encode("utf-8").lower()
        total = self.line_count
        if not wanted or not total:
            return None
        start_line = start_line % total
        blocks = len(self.block_starts)
        first = self.block_of(start_line)
        begin, end = self._block_range(first)
        skip = self._offset_of_line(self._read(begin, end), start_line - self.block_first_line[first])
        order = [
            (first, skip, None),
            *((b, 0, None) for b in range(first + 1, blocks)),
            *((b, 0, None) for b in range(first)),
            (first, 0, skip),
        ]
        for block, lo, hi in order:
            if cancelled is not None and cancelled.is_set():
                return None
            begin, end = self._block_range(block)
            data = self._read(begin, end).lower()
            at = data.find(wanted, lo, len(data) if hi is None else hi + len(wanted) - 1)
            if at >= 0:
                return self.block_first_line[block] + data.count(b"\n", 0, at)
        return None

    @staticmethod
    def _offset_of_line(data: bytes, line: int) -> int:
        pos = 0
        for _ in range(line):
            pos = data.find(b"\n", pos) + 1
            if pos <= 0:
                return len(data)
        return pos
