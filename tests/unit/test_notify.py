"""Notifications of a run's end or hang: the exact terminal sequences, the settings and the user's command (real runs
that ring a terminal: tests/system/test_notify_jobs.py)."""

from __future__ import annotations

from gpuwizard.model.settings import check_settings, notify_settings, settings_model
from gpuwizard.runner.supervise.notify import Notice, command_argv, desktop_sequences, start_command, terminal_text
from support.presets import write_settings

NOTICE = Notice("finished", "20261201-000000-demo", "gpuwizard: run finished", "demo (2xcpu) finished, exit code 0")


def settings(**values):
    return settings_model()(notify=values).notify


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
