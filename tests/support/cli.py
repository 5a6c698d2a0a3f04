"""The command line from a test: its captured result in process, the real entry point in a child, a flag's value in a
built command, and waiting on a condition (poll_until, the one wait of the tests outside the app's Pilot)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


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


def flag(argv: list[str], name: str) -> str | None:
    """The value a built command gives `name` (`--name=value` or `--name value`): the last where it is given twice, as
    the trainers' parsers read it."""
    found = [
        argv[i + 1] if arg == name else arg.split("=", 1)[1]
        for i, arg in enumerate(argv)
        if arg == name or arg.startswith(name + "=")
    ]
    return found[-1] if found else None


def poll_until(
    condition: Callable[[], T], timeout: float, what: str | Callable[[], object] | None = None, every: float = 0.2
) -> T:
    """Look at `condition` every `every` seconds until it gives a true value, and return that value: tests wait on
    conditions, never sleeps. The timeout is generous (the wait ends as soon as the condition holds); past it the
    test fails saying `what` (called then, where it is a function, to show the state the wait ended in), or else the
    condition itself."""
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what or source(condition)
            raise AssertionError(f"not within {timeout:g} s: {said}")
        time.sleep(every)
    return found


def source(condition: Callable[[], object]) -> str:
    """The line of a lambda, or the name of a function or method, to say what a wait was for."""
    try:
        return (
            inspect.getsource(condition).strip()
            if getattr(condition, "__name__", "") == "<lambda>"
            else repr(condition)
        )
    except (OSError, TypeError):  # no source to read: the interpreter's own, or a file that has gone
        return repr(condition)
