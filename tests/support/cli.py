"""The command line from a test: its captured result in process, the real entry point in a child, and waiting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


class CliResult:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def json(self):
        return json.loads(self.out)


def gw_subprocess(
    *args: str, env: dict | None = None, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run the real console entry point in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "gpuwizard", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def wait_for(predicate, timeout: float = 60.0, every: float = 0.2) -> bool:
    """Poll a condition until it holds or the (generous) timeout passes: tests wait on conditions, never sleeps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False
