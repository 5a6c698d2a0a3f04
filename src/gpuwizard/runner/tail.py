"""Follows a growing log file: complete lines, plus the newest carriage-return (tqdm) state as it changes.

Whole chunks are handled with C-level string and regex operations so a flooding job costs
almost nothing per line.
"""

from __future__ import annotations

import codecs
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO

CR_BEFORE_NL = re.compile(r"\r+\n")
UP_TO_LAST_CR = re.compile(r"[^\n]*\r")
BAR = r"[^\n|]*\d+%\|[^|\n]*\|\s*\d+/\d+ \[[^\]\n]*\]"
BAR_BEFORE_TEXT = re.compile(r"(?m)^" + BAR + r"(?=\S)")


@dataclass
class Chunk:
    """What was appended since the last read: complete lines (as one text, in order, bar states included)
    and the state of a bar still being redrawn on the unfinished last line."""

    text: str | None = None
    bar: str | None = None

    @functools.cached_property
    def lines(self) -> list[str]:
        return self.text.split("\n") if self.text is not None else []

    @property
    def line_count(self) -> int:
        return self.text.count("\n") + 1 if self.text is not None else 0

    def __bool__(self) -> bool:
        return self.text is not None or self.bar is not None


def collapse(text: str) -> str:
    """Keep only the last carriage-return state of each line (tqdm redraws)."""
    if "\r" not in text:
        return text
    return UP_TO_LAST_CR.sub("", CR_BEFORE_NL.sub("\n", text)).rstrip("\r")


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

    def read(self) -> Chunk:
        fh = self._open()
        if fh is None:
            return Chunk()
        data = fh.read(self.chunk)
        if not data:
            return Chunk()
        self.offset += len(data)
        text = self.partial + self.decoder.decode(data)
        out = Chunk()
        cut = text.rfind("\n")
        if cut >= 0:
            body = collapse(text[: cut + 1])[:-1]
            if "%|" in body:
                # a message written right after a bar (no newline between): two lines, in the order written
                body = BAR_BEFORE_TEXT.sub(lambda m: m.group(0) + "\n", body)
            out.text = body
            text = text[cut + 1 :]
        bar = text.rfind("\r")
        if bar >= 0:
            state = collapse(text)
            if state and state != self.last_bar:
                out.bar = state
                self.last_bar = state
            text = text[bar:]
        self.partial = text
        return out

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None
