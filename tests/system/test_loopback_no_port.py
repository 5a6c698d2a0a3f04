"""A machine with no loopback port free for torchrun's rendezvous store: the run fails saying so (the port range
exhausted, and what to do), not with a bare `Address already in use`. The training interpreter is wrapped so that
binding 127.0.0.1 port 0 fails as it does when every ephemeral port is taken (EADDRINUSE); everything else is real
(torchrun, its agent loading gpuwizard's loopback rendezvous)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuwizard.runs.rundir import RunDir
from support.cli import gw_subprocess, poll_until
from support.launches import demo_run_preset, marked_under, run_dirs, status_of
from support.runs import events_of

pytestmark = pytest.mark.slow

NO_PORT = """\
import errno, os, runpy, socket, sys
bind = socket.socket.bind
def no_port(self, address):
    if isinstance(address, tuple) and address[:2] == ("127.0.0.1", 0):
        raise OSError(errno.EADDRINUSE, "Address already in use")
    return bind(self, address)
socket.socket.bind = no_port
args = sys.argv[1:]
if args[:1] == ["-m"]:
    sys.argv = args[1:]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
elif args[:1] == ["-c"]:
    sys.argv = ["-c", *args[2:]]
    exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
else:
    sys.argv = args
    sys.path.insert(0, os.path.dirname(args[0]))
    runpy.run_path(args[0], run_name="__main__")
"""


def python_without_ports(tmp_path: Path) -> Path:
    """An interpreter in which no process can bind a loopback port the kernel picks."""
    (tmp_path / "no_port.py").write_text(NO_PORT)
    wrapper = tmp_path / "noport" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "no_port.py"} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_no_free_loopback_port_fails_the_run_saying_why(tmp_path):
    data = tmp_path / "data"
    preset = demo_run_preset(tmp_path, "noport", steps=20, python=str(python_without_ports(tmp_path)))
    result = gw_subprocess("run", "--trust", preset, "--headless", timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    (folder,) = run_dirs(data)
    status = status_of(folder)
    assert status is not None and status.state == "failed"
    last = (folder / "log.txt").read_text().strip().splitlines()[-1]
    assert last == (
        "OSError: [Errno 98] gpuwizard-loopback: no port on 127.0.0.1 is free for torchrun's rendezvous store "
        "(Address already in use): every local port is taken; end the processes that hold them (`ss -tanp` lists "
        "them) or widen the range the kernel hands out (sysctl net.ipv4.ip_local_port_range), then run again"
    )
    said = [e for e in events_of(RunDir(folder)) if e.kind == "rendezvous_failed"]
    assert [e.title for e in said] == ["torchrun's rendezvous store could not start on this machine"], said
    assert "no port on 127.0.0.1 is free" in said[0].detail and "ss -tanp" in said[0].suggestion
    assert "rendezvous store could not start" in result.stdout + result.stderr, "the headless run says it"
    poll_until(lambda: marked_under(data) == [], 60, lambda: marked_under(data))
