"""Real callers for campaign tests: the command line in a child process and the TUI on a pseudo-terminal, each
bounded by a timeout and killed whole when it hangs, and optionally without root's file-permission override; a
process on a pseudo-terminal of its own, and what it draws read back."""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass

CALL_TIMEOUT_S = 60
"""A command on a damaged folder answers in about a second; this bounds one that hangs (a blocking FIFO)."""


def drop_root_overrides() -> None:
    """In the child, before exec: take root's permission overrides (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) out of
    the bounding set, so the command reads files as their owner would: a mode-000 file is unreadable even to root."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def unprivileged_reader_available() -> str | None:
    """None where a child can be made to obey file modes; else why not (the reason a test skips)."""
    if os.geteuid() != 0:
        return None
    probe = subprocess.run(
        [sys.executable, "-c", "import os; os.open('/proc/self/mem', os.O_RDONLY)"], preexec_fn=drop_root_overrides
    )
    return None if probe.returncode == 0 else "cannot drop root's file-permission override here (no CAP_SETPCAP)"


@dataclass
class Outcome:
    argv: tuple[str, ...]
    code: int | None
    output: str
    seconds: float

    @property
    def hung(self) -> bool:
        return self.code is None

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.output


def gw_call(*args: str, unprivileged: bool = False, timeout: float = CALL_TIMEOUT_S) -> Outcome:
    """The real command line in a child process (its own session, so a hang is killed whole)."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,
        preexec_fn=drop_root_overrides if unprivileged and os.geteuid() == 0 else None,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    return Outcome(args, code, out, time.monotonic() - started)


ESCAPE = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]")


def drawn(output: bytes | bytearray, words: str) -> bool:
    """Whether every word was drawn: the terminal gets only changed cells, so a phrase may arrive in pieces."""
    text = ESCAPE.sub(b"", bytes(output))
    return all(word.encode() in text for word in words.split())


def on_terminal(args: list[str], env: dict[str, str] | None = None, **popen) -> tuple[subprocess.Popen, int]:
    """`gpuwizard ARGS` on a real 80x24 pseudo-terminal, in its own session; returns the process and the terminal's
    end (the caller closes it). `env` is added to this environment, whose TERM is xterm-256color unless it says."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "TERM": "xterm-256color", **(env or {})},
        start_new_session=True,
        **popen,
    )
    os.close(slave)
    return proc, master


def read_terminal(master: int, output: bytearray, until: Callable[[], bool], seconds: float) -> bool:
    """Read what the process draws into `output` (it blocks once the terminal is full) until `until()` holds or the
    time is up, then what is left waiting; whether it held."""
    end = time.monotonic() + seconds
    held = until()
    while not held and time.monotonic() < end:
        if select.select([master], [], [], 0.1)[0] and not read_into(output, master):
            time.sleep(0.1)  # every end of the terminal is closed: the process has gone
        held = until()
    while select.select([master], [], [], 0)[0] and read_into(output, master):
        pass
    return held


def read_into(output: bytearray, master: int) -> bool:
    """One read of the terminal into `output`; False once the terminal is closed."""
    try:
        chunk = os.read(master, 1 << 16)
    except OSError:
        return False
    output.extend(chunk)
    return bool(chunk)


def gw_tui(*args: str, shows: str = "View", unprivileged: bool = False, timeout: float = CALL_TIMEOUT_S) -> Outcome:
    """The TUI on a real 80x24 pseudo-terminal: wait until it shows `shows` (by default the monitor's "v View" key),
    press ctrl+q, and wait for it to exit."""
    started = time.monotonic()
    low = unprivileged and os.geteuid() == 0
    proc, master = on_terminal(list(args), preexec_fn=drop_root_overrides if low else None)
    output = bytearray()
    read_terminal(master, output, lambda: proc.poll() is not None or drawn(output, shows), timeout)
    if proc.poll() is None:
        os.write(master, b"\x11")  # ctrl+q
    read_terminal(master, output, lambda: proc.poll() is not None, timeout)
    code = proc.poll()
    if code is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    os.close(master)
    return Outcome(("tui", *args), code, output.decode("utf-8", errors="replace"), time.monotonic() - started)
