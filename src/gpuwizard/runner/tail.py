"""Follows a growing log file: complete lines, plus the latest carriage-return (tqdm) state as it changes."""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO


@dataclass
class Segment:
    text: str
    transient: bool = False


TQDM_THEN_TEXT = re.compile(r"^(?P<bar>.*?\d+%\|[^|]*\|\s*\d+/\d+ \[[^\]]*\])(?P<rest>\S.*)$")


def split_bar(line: str) -> list[Segment]:
    """A log message written right after a tqdm bar (no newline between them) becomes its own line."""
    match = TQDM_THEN_TEXT.match(line) if "|" in line else None
    if match:
        return [Segment(match["bar"], transient=True), Segment(match["rest"])]
    return [Segment(line)]


def collapse(line: str) -> str:
    """A line holding tqdm redraws shows only its last state."""
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p]
    return parts[-1] if parts else ""


class LogTail:
    """Reads what was appended since the last call; never blocks, never re-reads."""

    def __init__(self, path: Path, offset: int = 0, chunk: int = 4 << 20):
        self.path, self.offset, self.chunk = path, offset, chunk
        self.partial = ""
        self.last_bar = ""
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.fh: IO[bytes] | None = None

    def _open(self) -> IO[bytes] | None:
        if self.fh is None:
            try:
                self.fh = open(self.path, "rb")
            except FileNotFoundError:
                return None
            self.fh.seek(self.offset)
        return self.fh

    def read(self) -> list[Segment]:
        fh = self._open()
        if fh is None:
            return []
        data = fh.read(self.chunk)
        if not data:
            return []
        self.offset += len(data)
        text = self.partial + self.decoder.decode(data)
        out: list[Segment] = []
        cut = text.rfind("\n")
        if cut >= 0:
            out = [seg for line in text[:cut].split("\n") for seg in split_bar(collapse(line))]
            text = text[cut + 1 :]
        bar = text.rfind("\r")
        if bar >= 0:
            state = collapse(text)
            if state and state != self.last_bar:
                out.append(Segment(state, transient=True))
                self.last_bar = state
            text = text[bar:]
        self.partial = text
        return out

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None
