"""Text from a job, a run folder or a log, made safe for a terminal: every escape sequence removed (a job's
error line must not retitle the window, write the clipboard or talk to the terminal), every other control
character shown as a visible symbol.

Removed: CSI (colour and cursor alike), OSC (title, clipboard, links), DCS, SOS, PM and APC strings, the
other two-byte ESC sequences, a lone ESC, and the 8-bit C1 forms of all of them. Shown: other C0 controls,
DEL and C1 controls, as Unicode control pictures (U+2400...) or U+FFFD. Tab stays; newline stays in
`safe_text` and is shown in `safe_line` (one-line fields: a folder name, an event title, a table cell).
"""

from __future__ import annotations

import re

SEQUENCE = re.compile(
    r"(?:\x1b[P\]X^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # string: DCS OSC SOS PM APC
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI (unfinished at the end too)
    r"|\x1b[ -/]*[0-~]?"  # other ESC sequences, and a lone ESC
)
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
"""Every control character but tab; ESC and the C1 introducers start the sequences above."""


def _picture(match: re.Match[str]) -> str:
    code = ord(match[0])
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ ... ␟
    return "\u2421" if code == 0x7F else "\ufffd"  # ␡, or � for a C1 control


def safe_line(text: str) -> str:
    """One line for a terminal or a widget: sequences removed, controls (newline included) made visible."""
    if not CONTROL.search(text):
        return text
    return CONTROL.sub(_picture, SEQUENCE.sub("", text))


def safe_text(text: str) -> str:
    """Like safe_line, but newlines stay (a paragraph, an event with its detail)."""
    if not CONTROL.search(text):
        return text
    return "\n".join(safe_line(part) for part in text.split("\n"))


def control_characters(text: str) -> list[str]:
    """The control characters (other than tab) in `text`, each as U+XXXX, for a paragraph naming them."""
    return sorted({f"U+{ord(c):04X}" for c in CONTROL.findall(text)})
