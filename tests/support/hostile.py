"""Hostile terminal control: sequences a job, a log or a run folder might print to take over the user's terminal."""

from __future__ import annotations

OSC_TITLE = "\x1b]0;PWNED-TITLE\x07"
OSC_CLIPBOARD = "\x1b]52;c;cHduZWQ=\x07"
DCS = "\x1bP+q544e\x1b\\"
HOSTILE = f"{OSC_TITLE} {OSC_CLIPBOARD} {DCS} \x9b2J\x1b[?1049h"
"""Retitles the window, writes the clipboard, queries the terminal, clears it (8-bit CSI), switches screens."""
PAYLOADS = ("PWNED-TITLE", "cHduZWQ=", "+q544e")
"""The bodies of the control strings above: shown anywhere, the string was not removed whole."""
