"""Notifications of a run's end or hang: the exact terminal sequences, the settings, and a real run that rings a
headless terminal (a pty) and runs the user's command from its supervisor."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from conftest import wait_for
from gpuwizard.core import paths
from gpuwizard.model.settings import check_settings, notify_settings, settings_model
from gpuwizard.runner.notify import Notice, command_argv, desktop_sequences, start_command, terminal_text
from test_tui import quick_demo

NOTICE = Notice("finished", "20261201-000000-demo", "gpuwizard: run finished", "demo (2xcpu) finished, exit code 0")


def settings(**values):
    return settings_model()(notify=values).notify


def write_settings(text: str) -> None:
    paths.settings_file().parent.mkdir(parents=True, exist_ok=True)
    paths.settings_file().write_text(text)


def test_everything_is_off_until_settings_turn_it_on():
    assert terminal_text(NOTICE, notify_settings()) == ""
    assert notify_settings().command is None and notify_settings().on == ["finished", "failed", "hung"]


def test_the_bell_and_both_desktop_sequences_and_their_tmux_passthrough():
    on = settings(bell=True, desktop=True)
    osc9 = "\x1b]9;gpuwizard: run finished: demo (2xcpu) finished, exit code 0\x07"
    osc777 = "\x1b]777;notify;gpuwizard: run finished;demo (2xcpu) finished, exit code 0\x07"
    assert terminal_text(NOTICE, on, env={}) == "\x07" + osc9 + osc777
    wrapped = desktop_sequences(NOTICE, env={"TMUX": "/tmp/tmux-0/default,1,0"})
    assert (
        wrapped
        == (
            "\x1bPtmux;"
            + osc9.replace("\x1b", "\x1b\x1b")
            + "\x1b\\"
            + "\x1bPtmux;"
            + osc777.replace("\x1b", "\x1b\x1b")
        )
        + "\x1b\\"
    )
    assert terminal_text(NOTICE, settings(bell=True, on=["failed"]), env={}) == "", "finished is not asked for"


def test_text_from_a_job_never_becomes_a_sequence_of_its_own():
    hostile = Notice("failed", "r", "gpuwizard: run failed; x", "RuntimeError \x1b]52;c;ZXZpbA==\x07 \r\n boom")
    text = desktop_sequences(hostile, env={})
    assert "\x1b]52" not in text and "\r" not in text and "\n" not in text
    assert text.count("\x1b") == 2 and text.count("\x07") == 2, "only the two notifications' own ESC and BEL"
    assert "\x1b]777;notify;gpuwizard: run failed, x;" in text, "a ';' would split OSC 777's title from its body"


def test_the_command_is_an_argv_list_with_placeholders_each_staying_one_argument(tmp_path):
    argv = ["notify-send", "{title}", "{body} ({run_id})", "--kind={kind}", "$HOME; rm -rf /"]
    assert command_argv(argv, NOTICE) == [
        "notify-send",
        "gpuwizard: run finished",
        "demo (2xcpu) finished, exit code 0 (20261201-000000-demo)",
        "--kind=finished",
        "$HOME; rm -rf /",
    ]
    assert start_command(["/nonexistent/ntfy", "https://ntfy.sh/secret-topic"], NOTICE) == (
        "notify.command /nonexistent/ntfy could not start: No such file or directory"
    ), "the failure names the program, never its arguments (a webhook's secret)"


def test_a_mistake_in_the_notify_settings_is_one_paragraph_and_leaves_notifications_off():
    write_settings("notify:\n  command: curl -d done https://ntfy.sh/x\n  bell: yes please\n")
    problems = check_settings()
    assert any("notify.command" in p for p in problems) and any("notify.bell" in p for p in problems), problems
    assert notify_settings().command is None and not notify_settings().bell


def read_until_exit(master: int, proc: subprocess.Popen, timeout: float) -> bytes:
    seen, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                seen += os.read(master, 1 << 16)
            except OSError:
                break
        elif proc.poll() is not None:
            break
    return seen


@pytest.mark.slow
def test_a_headless_run_rings_its_terminal_and_its_supervisor_runs_the_command(tmp_path):
    told = tmp_path / "told.txt"
    write_settings(
        "notify:\n  bell: true\n  desktop: true\n  command: ["
        + ", ".join(
            f'"{a}"' for a in (sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write(' '.join(sys.argv[2:]))")
        )
        + f', "{told}", "{{kind}}", "{{run_id}}", "{{title}}"]\n'
    )
    assert check_settings() == []
    quick_demo(tmp_path, "told", "trainer_options: {log_every: 5}", steps=20)
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    run = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", "told", "--headless"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "TMUX": ""},
        start_new_session=True,
    )
    os.close(slave)
    try:
        out = read_until_exit(master, run, 180)
    finally:
        os.close(master)
    assert run.wait(timeout=30) == 0, out.decode(errors="replace")
    assert b"\x07\x1b]9;gpuwizard: run finished: told (2xcpu) finished, exit code 0\x07" in out
    assert b"\x1b]777;notify;gpuwizard: run finished;told (2xcpu) finished, exit code 0\x07" in out
    assert wait_for(told.exists, 30)
    kind, run_id, *title = told.read_text().split(" ")
    assert kind == "finished" and run_id.endswith("-told") and " ".join(title) == "gpuwizard: run finished"


@pytest.mark.slow
def test_the_monitor_sends_the_desktop_notification_when_it_sees_the_run_end(tmp_path):
    """The TUI in a real pty, attached while the run goes: the OSC sequences arrive once the run has finished."""
    from gpuwizard.model.preset_files import load_preset
    from gpuwizard.runner.launch import start_run
    from gpuwizard.runner.prepare import prepare_run

    write_settings("notify: {desktop: true}\n")
    quick_demo(tmp_path, "seen", "trainer_options: {step_time_s: 0.1, log_every: 5}", steps=60)
    run = start_run(prepare_run(load_preset("seen")))
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    tui = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "attach", run.run_id],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "TERM": "xterm-256color", "TMUX": ""},
        start_new_session=True,
    )
    os.close(slave)
    wanted = b"\x1b]777;notify;gpuwizard: run finished;seen (2xcpu) finished, exit code 0\x07"
    seen, deadline = b"", time.monotonic() + 180
    try:
        while wanted not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                seen += os.read(master, 1 << 16)
    finally:
        tui.kill()
        tui.wait()
        os.close(master)
    assert run.status().state == "finished"
    assert wanted in seen and b"\x1b]9;gpuwizard: run finished: seen (2xcpu)" in seen
    assert b"\x07\x1b]9" not in seen, "the bell stays off unless asked for"
