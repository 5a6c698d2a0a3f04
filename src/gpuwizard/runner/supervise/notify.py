"""Telling the user that a run finished, failed or hung: the terminal bell and an OSC 9 / OSC 777 desktop
notification (escape sequences that travel over SSH to the user's own terminal), and a command of the user's (an argv
list, run without a shell: a phone push, a chat webhook through curl).

The supervisor runs the command (it sees every run end, with nobody attached); whoever shows the run on a terminal
(the monitor, a headless `run` or `attach`) sends the sequences. Everything is off until settings.yaml turns it on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from gpuwizard.model.settings_schema import NotifySettings
    from gpuwizard.runs.records import Event, Status

KINDS = ("finished", "failed", "hung", "stopped")
PLACEHOLDERS = ("{kind}", "{title}", "{body}", "{run_id}", "{folder}")


@dataclass(frozen=True)
class Notice:
    """One thing to tell the user: what happened to which run, as a title and a one-line body."""

    kind: str
    run_id: str
    title: str
    body: str
    folder: str = ""


def final_notice(status: Status, folder: str = "") -> Notice:
    """The run ended: finished, failed (with why), stopped, or stopped after a hang."""
    kind = {"finished": "finished", "hung": "hung", "stopped": "stopped"}.get(str(status.state), "failed")
    why = f": {status.error}" if status.error and kind == "failed" else ""
    body = f"{status.preset} ({status.world_size}x{status.device}) {status.state}, exit code {status.exit_code}{why}"
    return Notice(kind, status.run_id, f"gpuwizard: run {status.state}", body, folder)


def hang_notice(run_id: str, event: Event, folder: str = "") -> Notice:
    return Notice("hung", run_id, "gpuwizard: hang suspected", event.title, folder)


def wanted(notice: Notice, settings: NotifySettings) -> bool:
    """Does the user want to hear of this kind (settings.notify.on)?"""
    return notice.kind in settings.on


def clean(text: str, limit: int = 200) -> str:
    """One line without control characters: nothing of a job's own output reaches the terminal as a sequence."""
    return "".join(ch if ch.isprintable() else " " for ch in text)[:limit]


def wrap_for_multiplexer(sequence: str, env: Mapping[str, str]) -> str:
    """Inside tmux (with `allow-passthrough on`) or GNU screen an OSC reaches the outer terminal only wrapped in a DCS
    passthrough, every ESC inside doubled for tmux."""
    if env.get("TMUX"):
        return "\x1bPtmux;" + sequence.replace("\x1b", "\x1b\x1b") + "\x1b\\"
    if env.get("STY"):
        return "\x1bP" + sequence + "\x1b\\"
    return sequence


def desktop_sequences(notice: Notice, env: Mapping[str, str] | None = None) -> str:
    """OSC 9 (iTerm2, Ghostty, kitty, WezTerm, VS Code...) and OSC 777 (foot, VTE terminals, urxvt, WezTerm...): a
    terminal that knows neither ignores both. The OSC 9 text never starts with `4;` (a progress bar there)."""
    env = os.environ if env is None else env
    title, body = clean(notice.title).replace(";", ","), clean(notice.body)
    osc9 = f"\x1b]9;{title}: {body}\x07"
    osc777 = f"\x1b]777;notify;{title};{body}\x07"
    return wrap_for_multiplexer(osc9, env) + wrap_for_multiplexer(osc777, env)


def terminal_text(notice: Notice, settings: NotifySettings, env: Mapping[str, str] | None = None) -> str:
    """What to write to the user's terminal for this notice: the bell, the desktop sequences, or nothing."""
    if not wanted(notice, settings):
        return ""
    return ("\x07" if settings.bell else "") + (desktop_sequences(notice, env) if settings.desktop else "")


def terminal_stream() -> TextIO | None:
    """The headless follower's terminal: stderr, else stdout, when one of them is a tty."""
    for stream in (sys.stderr, sys.stdout):
        try:
            if stream is not None and stream.isatty():
                return stream
        except ValueError:  # closed
            continue
    return None


def tell_terminal(notice: Notice, settings: NotifySettings, stream: TextIO | None = None) -> None:
    stream = stream or terminal_stream()
    text = terminal_text(notice, settings)
    if stream is None or not text:
        return
    write = getattr(stream, "write_control", stream.write)  # the command line's SafeStream would show BEL as a glyph
    try:
        write(text)
        stream.flush()
    except (OSError, ValueError):
        pass  # the terminal went away; the run goes on


def command_argv(argv: list[str], notice: Notice) -> list[str]:
    """The user's argv with {kind}, {title}, {body}, {run_id} and {folder} replaced (each element stays one
    argument: no shell ever sees them)."""
    values = dict(zip(PLACEHOLDERS, (notice.kind, notice.title, notice.body, notice.run_id, notice.folder)))
    out = []
    for arg in argv:
        for key, value in values.items():
            arg = arg.replace(key, value)
        out.append(arg)
    return out


def start_command(argv: list[str] | None, notice: Notice) -> str | None:
    """Start settings.notify.command for a notice, detached (a slow webhook never holds up a run's end); returns why
    it could not start, in one line naming only the program (its arguments may hold a webhook secret), or None."""
    if not argv:
        return None
    env = {
        **os.environ,
        "GPUWIZARD_NOTICE_KIND": notice.kind,
        "GPUWIZARD_NOTICE_TITLE": notice.title,
        "GPUWIZARD_NOTICE_BODY": notice.body,
        "GPUWIZARD_RUN_ID": notice.run_id,
    }
    try:
        subprocess.Popen(
            command_argv(argv, notice),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        return f"notify.command {argv[0]} could not start: {exc.strerror or exc}"
    return None
