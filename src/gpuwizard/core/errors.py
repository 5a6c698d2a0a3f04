"""Errors a user can fix, rendered as one paragraph each that names the field, the value and the fix."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuwizard.core.kinds import ProblemLevel


def show_value(value: Any) -> str:
    """Short, quoted rendering of a user value for messages."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def sentence(text: str) -> str:
    """End a message with one full stop unless it already ends with punctuation."""
    text = text.rstrip()
    return text if text.endswith((".", "?", "!")) else text + "."


def closest(value: Any, choices: Iterable[Any]) -> str | None:
    """The choice a mistyped word was probably meant to be ("lerobt": lerobot), if one is close enough to say."""
    import difflib  # only a mistake needs it

    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    return close[0] if close else None


def unknown(what: str, value: Any, choices: Iterable[Any]) -> str:
    """A what-is-wrong phrase with the choice it was probably meant to be ("did you mean lerobot?"), as for keys."""
    close = closest(value, choices)
    return f"{what}; did you mean {close}?" if close else what


@dataclass(frozen=True)
class Problem:
    """One thing wrong (or worth a warning) with a preset or a plan."""

    field: str | None
    message: str
    fix: str | None = None
    value: Any = None
    has_value: bool = False
    level: ProblemLevel = ProblemLevel.ERROR

    def paragraph(self, source: str | None = None) -> str:
        parts = []
        if source:
            parts.append(f"{source}:")
        if self.field and self.has_value and self.value is None:
            parts.append(f"{self.field} (not set):")
        elif self.field and self.has_value:
            parts.append(f"{self.field} = {show_value(self.value)}:")
        elif self.field:
            parts.append(f"{self.field}:")
        parts.append(sentence(self.message))
        if self.fix:
            parts.append("Fix: " + sentence(self.fix))
        return " ".join(parts)


def problem(
    field: str | None, message: str, fix: str | None = None, *, level: ProblemLevel = ProblemLevel.ERROR, **kw: Any
) -> Problem:
    """Build a Problem (level error, warning or note); pass value=... to show the offending value."""
    if "value" in kw:
        return Problem(field, message, fix, kw["value"], True, level)
    return Problem(field, message, fix, level=level)


def warning(field: str | None, message: str, fix: str | None = None, **kw: Any) -> Problem:
    return problem(field, message, fix, level=ProblemLevel.WARNING, **kw)


def note(message: str) -> Problem:
    return Problem(None, message, level=ProblemLevel.NOTE)


class UserError(Exception):
    """Bad input; the command line prints one paragraph per problem on stderr and exits 2."""

    def __init__(self, problems: Problem | list[Problem], source: str | None = None):
        self.problems = problems if isinstance(problems, list) else [problems]
        self.source = source
        super().__init__(self.paragraph())

    def paragraphs(self) -> list[str]:
        return [p.paragraph(self.source) for p in self.problems]

    def paragraph(self) -> str:
        """Every problem, one paragraph (line) each."""
        return "\n".join(self.paragraphs())
