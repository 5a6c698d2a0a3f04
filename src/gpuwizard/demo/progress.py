"""The demo's progress bar, drawn as tqdm draws it, so the monitor reads it as it reads the real trainers'."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    """A tqdm-style bar on stderr, redrawn with carriage returns at most 10 times a second."""

    def __init__(self, total: int, initial: int = 0):
        self.total, self.initial, self.start, self.drawn = total, initial, time.monotonic(), 0.0

    def update(self, n: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.drawn < 0.1:
            return
        self.drawn = now
        elapsed = now - self.start
        rate = (n - self.initial) / elapsed if elapsed > 0 else 0.0
        remaining = (self.total - n) / rate if rate > 0 else 0.0
        filled = int(10 * n / self.total)
        bar = "\u2588" * filled + " " * (10 - filled)
        sys.stderr.write(
            f"\rTraining: {100 * n // self.total:3d}%|{bar}| {n}/{self.total} [{_clock(elapsed)}<{_clock(remaining)}, "
            f"{rate:.2f}step/s]"
        )
        sys.stderr.flush()

    def close(self) -> None:
        self.update(self.total, force=True)
        sys.stderr.write("\n")
        sys.stderr.flush()


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"
