"""The trainers' names, in the order the wizard lists them: the one list every other reads. It imports nothing, so
the command line's grammar names the trainers without loading pydantic (its start-up leaves that out); each name has
its options model in trainer_options.OPTIONS and its folder trainers/<name>/."""

from __future__ import annotations

TRAINERS: tuple[str, ...] = ("lerobot", "groot", "openpi", "hf", "demo")


def trainer_names() -> tuple[str, ...]:
    """Read when asked, never copied at import: a trainer registered later (as the tests register one) is named."""
    return TRAINERS
