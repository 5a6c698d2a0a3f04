"""The wizard's fields whose text on screen the preset does not take (it did not convert, or the preset refused it):
the preset keeps their last valid value, so nothing runs or saves while one is left."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gpuwizard.tui.widgets.fields import Step, field_id

if TYPE_CHECKING:
    from textual.dom import DOMNode

    from gpuwizard.core.errors import Problem


class InvalidFields:
    """The invalid fields by path, the latest last, marked `-invalid` on screen; `changed` redraws the summary."""

    def __init__(self, screen: DOMNode, changed: Callable[[], None]):
        self.screen, self.changed = screen, changed
        self.by_path: dict[str, list[Problem]] = {}

    def mark(self, path: str, problems: list[Problem]) -> None:
        self.by_path.pop(path, None)
        self.by_path[path] = problems
        for widget in self.screen.query("#" + field_id(path)):
            widget.add_class("-invalid")
        self.changed()

    def forget(self, *paths: str) -> None:
        """The fields show values the preset holds again (typed valid, reset, or rebuilt)."""
        forgotten = [path for path in paths if self.by_path.pop(path, None) is not None]
        for path in forgotten:
            for widget in self.screen.query("#" + field_id(path)):
                widget.remove_class("-invalid")
        if forgotten:
            self.changed()

    def forget_options(self) -> None:
        """The trainer's option fields were rebuilt for another trainer or policy: none of their text is left."""
        self.forget(*[path for path in self.by_path if path.startswith("trainer_options.")])

    def counting(self) -> dict[str, list[Problem]]:
        """The invalid fields that count: one on a row hidden for this preset (the run does not use it) waits there."""
        return {
            path: problems
            for path, problems in self.by_path.items()
            if all(Step.shows(widget) for widget in self.screen.query("#" + field_id(path)))
        }
