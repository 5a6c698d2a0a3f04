"""Notifications of a real run's end: a headless run rings its terminal (a pty) and its supervisor runs the user's
command, and the TUI attached to a run sends the desktop notification when it sees the run end."""

from __future__ import annotations

import os
import sys

import pytest

from gpuwizard.model.settings import check_settings
from support.callers import on_terminal, read_terminal
from support.cli import poll_until
from support.presets import quick_demo, write_settings


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
    run, master = on_terminal(["run", "--trust", "told", "--headless"], env={"TMUX": ""})
    out = bytearray()
    try:
        read_terminal(master, out, lambda: run.poll() is not None, 180)
    finally:
        os.close(master)
    assert run.wait(timeout=30) == 0, out.decode(errors="replace")
    assert b"\x07\x1b]9;gpuwizard: run finished: told (2xcpu) finished, exit code 0\x07" in out
    assert b"\x1b]777;notify;gpuwizard: run finished;told (2xcpu) finished, exit code 0\x07" in out
    poll_until(told.exists, 30)
    kind, run_id, *title = told.read_text().split(" ")
    assert kind == "finished" and run_id.endswith("-told") and " ".join(title) == "gpuwizard: run finished"


@pytest.mark.slow
def test_the_monitor_sends_the_desktop_notification_when_it_sees_the_run_end(tmp_path):
    """The TUI in a real pty, attached while the run goes: the OSC sequences arrive once the run has finished."""
    from gpuwizard.model.preset_files import load_preset
    from gpuwizard.runner.launch.prepare import prepare_run
    from gpuwizard.runner.launch.start import start_run

    write_settings("notify: {desktop: true}\n")
    quick_demo(tmp_path, "seen", "trainer_options: {step_time_s: 0.1, log_every: 5}", steps=60)
    run = start_run(prepare_run(load_preset("seen")))
    tui, master = on_terminal(["attach", run.run_id], env={"TMUX": ""})
    wanted = b"\x1b]777;notify;gpuwizard: run finished;seen (2xcpu) finished, exit code 0\x07"
    seen = bytearray()
    try:
        read_terminal(master, seen, lambda: wanted in seen, 180)
    finally:
        tui.kill()
        tui.wait()
        os.close(master)
    assert run.status().state == "finished"
    assert wanted in seen and b"\x1b]9;gpuwizard: run finished: seen (2xcpu)" in seen
    assert b"\x07\x1b]9" not in seen, "the bell stays off unless asked for"
