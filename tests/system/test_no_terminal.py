"""Without a terminal (cron, a pipe, `ssh host cmd | tee`) nothing draws the TUI: `run` goes headless and says so in
one line on stderr; the wizard and the monitor refuse in one line naming `--headless` (exit 2); a preset's own
mistakes still come first. Real `gpuwizard` processes, real demo runs."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

from support.callers import gw_call
from support.launches import demo_run_preset, stop_everything
from support.runs import copy_runs

pytestmark = pytest.mark.slow

ESC = "\x1b"
RUN_TIMEOUT_S = 300


def run_with_stdout_piped(argv: list[str], terminal: bool) -> tuple[int | None, str, str]:
    """The command with stdout a pipe; stdin and stderr a pseudo-terminal (`ssh host cmd | tee`) or not (cron)."""
    master = slave = None
    if terminal:
        master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", *argv],
        stdin=slave if terminal else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave if terminal else subprocess.PIPE,
        env={**os.environ, "TERM": "xterm-256color"},
        start_new_session=True,
    )
    if slave is not None:
        os.close(slave)
    out, err = bytearray(), bytearray()
    streams = {proc.stdout.fileno(): out, **({master: err} if master is not None else {proc.stderr.fileno(): err})}
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while streams and time.monotonic() < deadline:
        ready, _, _ = select.select(list(streams), [], [], 0.2)
        for fd in ready:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:  # the pseudo-terminal's other end is closed: the command has gone
                chunk = b""
            if chunk:
                streams[fd].extend(chunk)
            else:
                del streams[fd]
    try:
        code: int | None = proc.wait(timeout=max(deadline - time.monotonic(), 1))  # its outputs closed as it exits
    except subprocess.TimeoutExpired:
        code = None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if master is not None:
        os.close(master)
    return code, out.decode(errors="replace"), err.decode(errors="replace")


@pytest.mark.parametrize("terminal", [False, True], ids=["cron", "stdout-piped"])
def test_run_without_a_terminal_runs_headless_and_says_so_in_one_line(tmp_path, terminal):
    data = tmp_path / "data"
    try:
        code, out, err = run_with_stdout_piped(
            ["run", "--trust", str(demo_run_preset(tmp_path, "piped", steps=20))], terminal
        )
        assert ESC not in out and ESC not in err, "no escape sequences reach the pipe or the terminal"
        said = [line for line in err.splitlines() if "terminal" in line]
        assert said == ["gpuwizard run: no terminal here (stdin, stdout or stderr is not one): running headless"], err
        assert code == 0 and "finished green" in out, (code, out, err)
    finally:
        stop_everything(data)


WIZARD_FIX = "`gpuwizard run PRESET --headless` to run a preset without one"


@pytest.mark.parametrize(
    "argv, fix",
    [
        ([], WIZARD_FIX),
        (["--preset", "demo-cpu"], WIZARD_FIX),
        (["attach", "20261201-005642-demo-cmp"], "`gpuwizard attach 20261201-005642-demo-cmp --headless`"),
    ],
    ids=["wizard", "wizard-preset", "attach"],
)
def test_the_wizard_and_the_monitor_refuse_without_a_terminal_in_one_line_naming_headless(tmp_path, argv, fix):
    copy_runs(tmp_path / "data", "20261201-005642-demo-cmp")
    outcome = gw_call(*argv)
    assert outcome.code == 2, outcome
    assert ESC not in outcome.output and not outcome.traceback
    (line,) = outcome.output.splitlines()
    assert "needs a terminal" in line and "--headless" in line and fix in line, line


@pytest.mark.parametrize("argv", [["--preset", "no-such-preset"], ["run", "no-such-preset"]], ids=["wizard", "run"])
def test_a_bad_preset_gets_its_own_paragraph_before_any_question_of_a_terminal(argv):
    outcome = gw_call(*argv)
    assert outcome.code == 2 and not outcome.traceback, outcome
    assert "PRESET" in outcome.output and "no-such-preset" in outcome.output
    assert "terminal" not in outcome.output, outcome.output
