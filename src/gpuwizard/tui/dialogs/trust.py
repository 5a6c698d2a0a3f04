"""The trust question: before anything runs from a preset the user did not write, what it would run, and a yes
that is remembered by the hash of those lines (model/trust.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

if TYPE_CHECKING:
    from gpuwizard.model.preset import Preset


class TrustQuestion(ModalScreen[bool]):
    """y trusts the preset's interpreter, environment and files (remembered); n keeps it from running anything."""

    BINDINGS = [Binding("y", "answer(True)", "Trust"), Binding("n,escape", "answer(False)", "Not now")]
    DEFAULT_CSS = """
    #trust-dialog { height: auto; max-height: 90%; }
    #trust-body { height: auto; max-height: 12; margin: 1 0; }
    """

    def __init__(self, preset: Preset, source: str, doing: str):
        super().__init__()
        self.preset, self.source, self.doing = preset, source, doing

    def compose(self) -> ComposeResult:
        from gpuwizard.model.trust import question_lines

        with Vertical(classes="dialog wide", id="trust-dialog"):
            yield Label(f"Trust preset {self.preset.name}?", classes="dialog-title")
            yield Static(
                f"{self.source} is not in your preset folder (or its code changed since you trusted it). "
                f"{self.doing} would run what it names:",
                markup=False,
            )
            with VerticalScroll(id="trust-body"):
                for line in question_lines(self.preset):
                    yield Static(f"  {line}", markup=False, classes="trust-line")
            yield Static(
                "Until you trust it nothing of it runs: the plan reads only what gpuwizard remembers of that "
                "interpreter, and the trainer check waits.",
                markup=False,
                classes="dialog-hint",
            )
            yield Label("y: trust it (remembered) · n / esc: not now", classes="dialog-hint")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
