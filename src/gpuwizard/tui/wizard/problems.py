"""A dialog listing problems whole (the errors that block a run), one paragraph each, with the field's step."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from gpuwizard.core.errors import Problem

STEP_OF_FIELD = (
    ("hardware.", "1 GPUs"),
    ("launch.scheduler", "1 GPUs"),
    ("slurm.", "1 GPUs"),
    ("policy", "2 Policy & data"),
    ("dataset.", "2 Policy & data"),
    ("scaling.", "4 Scaling"),
    ("costs.", "4 Scaling"),
    ("optim.warmup_ratio", "4 Scaling"),
)
"""Where a field is edited in the wizard (by dotted prefix); anything else is on 3 Trainer & batch."""


def step_of(field: str | None) -> str | None:
    if field is None or field.startswith("-"):
        return None
    return next((step for prefix, step in STEP_OF_FIELD if field.startswith(prefix)), "3 Trainer & batch")


class ProblemsScreen(ModalScreen[None]):
    """Every problem, whole, so nothing that blocks a run is cut off in a one-line summary."""

    BINDINGS = [Binding("escape,enter", "close", "Close")]

    def __init__(self, title: str, problems: list[Problem]):
        super().__init__()
        self.title_text, self.problems = title, problems

    def compose(self) -> ComposeResult:
        parts: list[tuple[str, str] | str] = []
        for index, found in enumerate(self.problems):
            step = step_of(found.field)
            parts += [
                (f"{index + 1}. ", "bold $error"),
                found.paragraph(),
                (f" (step {step})" if step else "", "$text-muted"),
                "\n\n" if index < len(self.problems) - 1 else "",
            ]
        with Vertical(classes="dialog wide", id="problems-dialog"):
            yield Label(self.title_text, classes="dialog-title")
            with VerticalScroll(id="problems-body"):
                yield Static(Content.assemble(*parts), id="problems-list")
            yield Label("esc: close · up/down: scroll", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#problems-body").focus()

    def action_close(self) -> None:
        self.dismiss(None)
