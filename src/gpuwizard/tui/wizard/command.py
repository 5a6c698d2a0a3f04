"""The Preview's command as the shell reads it back when copied from the screen: continuation lines within the
width, a flag beside its value, and an argument wider than a line cut where the shell joins it again."""

from __future__ import annotations

import shlex


def pretty_command(argv: list[str], width: int = 74) -> str:
    """The argv packed into continuation lines, keeping each flag next to its value; an argument wider than a line
    (a long path) is split over lines of its own, whose ` \\` went past the screen's edge."""
    tokens: list[tuple[str, str | None]] = []  # the shell text, and the one argument it is, where it is one
    for arg in argv:
        quoted = shlex.quote(arg)
        last = tokens[-1][0] if tokens else ""
        if last.startswith("-") and "=" not in last and not arg.startswith("-"):
            tokens[-1] = (last + " " + quoted, None)
        else:
            tokens.append((quoted, arg))
    lines: list[str] = []
    current = ""
    for token, whole in tokens:
        if current and ("\n" in current or len(current) + 1 + len(token) > width):
            lines.append(current)
            current = "  " + token
        else:
            current = f"{current} {token}" if current else token
        if whole is not None and current == "  " + token and len(current) + 2 > width:
            current = split_argument(whole, width)
    return " \\\n".join([*lines, current])


def split_argument(arg: str, width: int) -> str:
    """One argument too wide for a line, its pieces each quoted on its own and each line but the last ending in a
    backslash right after its piece: the shell removes it with the newline and reads the pieces as one word again
    (the next piece starts its line, as a space on either side would split the word)."""
    pieces: list[str] = []
    rest = arg
    while rest:
        room = width - 2 - (2 if not pieces else 0)  # the closing backslash and a spare; the first line's indent
        size = len(rest)
        while size > 1 and len(shlex.quote(rest[:size])) > room:
            size -= 1
        pieces.append(shlex.quote(rest[:size]))
        rest = rest[size:]
    return "  " + "\\\n".join(pieces)
