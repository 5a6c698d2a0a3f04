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

C1_AS_ESC = str.maketrans({"\x90": "\x1bP", "\x98": "\x1bX", "\x9b": "\x1b[", "\x9c": "\x1b\\", "\x9d": "\x1b]"})
C1_AS_ESC |= str.maketrans({"\x9e": "\x1b^", "\x9f": "\x1b_"})
"""The 8-bit introducers as their ESC forms, so one pattern (starting with ESC: a fast scan) removes both."""
C1_INTRODUCER = re.compile(r"[\x90\x98\x9b-\x9f]")
SEQUENCE = re.compile(
    r"\x1b(?:"
    r"[P\]X^_][^\x07\x1b]*(?:\x07|\x1b\\)?"  # a string: DCS, OSC, SOS, PM, APC (unfinished: to the end)
    r"|\[[0-?]*[ -/]*[@-~]?"  # CSI (unfinished at the end too)
    r"|[ -/]*[0-~]?"  # other ESC sequences, and a lone ESC
    r")"
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
    if text.isprintable():  # no control character at all (one C-level pass)
        return text
    if C1_INTRODUCER.search(text):
        text = text.translate(C1_AS_ESC)
    return CONTROL.sub(_picture, SEQUENCE.sub("", text))


def safe_text(text: str) -> str:
    """Like safe_line, but newlines stay (a paragraph, an event with its detail)."""
    if text.isprintable():
        return text
    return "\n".join(safe_line(part) for part in text.split("\n"))


def control_characters(text: str) -> list[str]:
    """The control characters (other than tab) in `text`, each as U+XXXX, for a paragraph naming them."""
    return sorted({f"U+{ord(c):04X}" for c in CONTROL.findall(text)})
