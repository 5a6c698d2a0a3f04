"""Follows a growing log file: complete lines, plus the newest carriage-return (tqdm) state as it changes.

Whole chunks are handled with C-level string and regex operations so a flooding job costs
almost nothing per line.
"""

from __future__ import annotations

import codecs
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gpuwizard.core.yamlio import open_regular

BAR_BEFORE_TEXT = re.compile(r"^[^|]*\d+%\|[^|]*\|\s*\d+/\d+ \[[^\]]*\](?=\S)")
MAX_BAR_LINE = 1000
"""A tqdm bar is a short line; longer lines are never searched for one (a regex over a huge line costs its square)."""
MAX_LINE_CHARS = 1 << 20
"""A line longer than this (binary output, a runaway print) keeps its head, with CUT_NOTE; the rest of it is dropped
as it is read, so memory stays flat however long the line grows."""
CUT_NOTE = " [gpuwizard: line cut here, longer than {} characters]"


@dataclass
class Chunk:
    """What was appended since the last read: complete lines (as one text, in order, bar states included)
    and the state of a bar still being redrawn on the unfinished last line."""

    text: str | None = None
    bar: str | None = None
    skipped: int = 0
    """Bytes of a cut line dropped by this read (it read something, even with nothing to show)."""

    @functools.cached_property
    def lines(self) -> list[str]:
        return self.text.split("\n") if self.text is not None else []

    @property
    def line_count(self) -> int:
        return self.text.count("\n") + 1 if self.text is not None else 0

    def __bool__(self) -> bool:
        return self.text is not None or self.bar is not None or self.skipped > 0


def collapse(text: str, redrawn_bars: bool = False) -> str:
    """Keep only the last carriage-return state of each line (tqdm redraws), in one pass over the text; with
    `redrawn_bars`, also the bar a message's line starts with, as a line of its own before the message."""
    if "\r" not in text:
        return text
    pieces, done = [], 0
    cr = text.find("\r")
    while cr >= 0:
        start = text.rfind("\n", 0, cr) + 1
        end = text.find("\n", cr)
        if end < 0:
            end, line = len(text), text[start:]  # at the very end, a return starts a line still to come
        else:
            line = text[start:end].rstrip("\r")  # before a newline, trailing returns are line ends (\r\n)
        last = line[line.rfind("\r") + 1 :]
        if redrawn_bars and "%|" in line and len(line) <= 4 * MAX_BAR_LINE:
            last = bar_before(line, last)
        pieces += [text[done:start], last]
        done = end
        cr = text.find("\r", end)
    pieces.append(text[done:])
    return "".join(pieces)


def bar_before(line: str, last: str) -> str:
    """The bar as redrawn after the message before (tqdm.write: clear, message, redraw) names that message's step;
    where the whole line arrives in one read, only this line's message would be left of it."""
    states = [state for state in line.split("\r") if state.strip()]
    if len(states) >= 2 and "%|" in states[0] and "%|" not in last:
        return f"{states[0]}\n{last}"
    return last


def split_bars(body: str) -> str:
    """A message written right after a bar (no newline between) becomes two lines, in the order written."""
    lines = body.split("\n")
    for i, line in enumerate(lines):
        if "%|" in line and len(line) <= MAX_BAR_LINE:
            lines[i] = BAR_BEFORE_TEXT.sub(lambda m: m.group(0) + "\n", line)
    return "\n".join(lines)


class LogTail:
    """Reads what was appended since the last call; never blocks, never re-reads. A file that is there but cannot
    be read (a FIFO or folder in its place, no permission) reads as empty, `problem` saying why."""

    def __init__(self, path: os.PathLike[str], offset: int = 0, chunk: int = 4 << 20, redrawn_bars: bool = False):
        self.path, self.offset, self.chunk = Path(path), offset, chunk
        self.redrawn_bars = redrawn_bars
        """Keep each bar a message cleared as a line of its own (the monitor's steps); a display wants only the last."""
        self.partial = ""
        self.cutting = False
        self.last_bar = ""
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.fh: IO[bytes] | None = None
        self.problem: str | None = None

    def _open(self) -> IO[bytes] | None:
        if self.fh is None:
            try:
                self.fh = os.fdopen(open_regular(self.path), "rb")
            except FileNotFoundError:
                return None
            except OSError as exc:
                self.problem = f"{self.path.name} cannot be read: {exc.strerror or exc}"
                return None
            self.problem = None
            self.fh.seek(self.offset)
        return self.fh

    def check(self) -> None:
        """Open the file if it is there, so `problem` says why it cannot be read even where nothing reads it."""
        self._open()

    def read(self) -> Chunk:
        fh = self._open()
        if fh is None:
            return Chunk()
        data = fh.read(self.chunk)
        if not data:
            return Chunk()
        self.offset += len(data)
        out = Chunk()
        if self.cutting:  # the rest of a line already cut: dropped up to its newline, without decoding it
            end = data.find(b"\n")
            if end < 0:
                out.skipped = len(data)
                return out
            out.skipped, data, self.cutting = end + 1, data[end + 1 :], False
            self.decoder.reset()
        text = self.partial + self.decoder.decode(data)
        cut = text.rfind("\n")
        if cut >= 0:
            body = collapse(text[: cut + 1], self.redrawn_bars)[:-1]
            out.text = split_bars(body) if "%|" in body else body
            text = text[cut + 1 :]
        bar = text.rfind("\r")
        if bar >= 0:
            state = collapse(text)
            if state and state != self.last_bar:
                out.bar = state
                self.last_bar = state
            text = text[bar:]
        if len(text) > MAX_LINE_CHARS:  # an unfinished line this long: keep its head, drop the rest as it comes
            head = collapse(text)[:MAX_LINE_CHARS] + CUT_NOTE.format(MAX_LINE_CHARS)
            out.text = head if out.text is None else out.text + "\n" + head
            text, self.cutting = "", True
        self.partial = text
        return out

    def backlog(self) -> int:
        """Bytes appended that this tail has not read yet."""
        fh = self._open()
        if fh is None:
            return 0
        try:
            return max(0, os.fstat(fh.fileno()).st_size - self.offset)
        except OSError:
            return 0

    def skip_to(self, offset: int) -> int:
        """Jump ahead to `offset` without reading what lies before it; the line cut there is dropped up to its
        newline, as a cut line is. Returns the bytes left unread."""
        fh = self._open()
        if fh is None or offset <= self.offset:
            return 0
        skipped, self.offset = offset - self.offset, offset
        fh.seek(offset)
        self.partial, self.cutting = "", True
        self.decoder.reset()
        return skipped

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None
