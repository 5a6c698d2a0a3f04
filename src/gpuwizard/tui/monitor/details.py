"""An event in full, with the stack of every rank when it carries a dump: what the banner has no room for."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from gpuwizard.core.kinds import EventKind
from gpuwizard.core.safetext import safe_line, safe_text
from gpuwizard.runs.events import Hang, Stacks
from gpuwizard.runs.records import Event

FRAMES_SHOWN = 20
"""Innermost frames per rank; the files hold every frame of every thread."""


def stacks_of(event: Event) -> Stacks | None:
    """The stack report an event carries: a dump asked for with `d`, or the one taken on a suspected hang."""
    if event.kind == EventKind.STACK_DUMP:
        return Stacks.of(event)
    hang = Hang.of(event)
    return hang.stacks if hang is not None else None


def details_text(event: Event, title: str) -> Content:
    parts: list[Any] = [(safe_line(title), "bold")]
    if event.detail:
        parts += ["\n\n", safe_text(event.detail)]
    if event.suggestion:
        parts += ["\n\n", ("next: " + safe_text(event.suggestion), "bold")]
    report = stacks_of(event)
    if report is not None:
        if report.note and event.kind != EventKind.STACK_DUMP:
            parts += ["\n\n", ("stacks: ", "bold"), report.note]
        for rank, frames in sorted(report.per_rank.items()):
            outside = rank in report.outside_collective
            head = f"rank {rank} main thread, innermost first" + (" (not in a collective)" if outside else "")
            parts += ["\n\n", (head, "bold $accent")]
            for frame in frames[:FRAMES_SHOWN]:
                parts += ["\n  ", safe_line(str(frame))]
            if len(frames) > FRAMES_SHOWN:
                parts += ["\n  ", (f"... {len(frames) - FRAMES_SHOWN} more frames in the file", "$text-muted")]
        for rank in report.unreadable:
            parts += ["\n\n", (f"rank {rank}: its stack could not be read", "bold $error")]
        if report.files:
            parts += ["\n\n", ("every frame of every thread (py-spy --json):", "$text-muted")]
            for path in report.files:
                parts += ["\n  ", path]
    return Content.assemble(*parts)


class EventDetails(ModalScreen[None]):
    """Scrollable with the arrow keys and page up/down; escape closes."""

    BINDINGS = [Binding("escape,q,e", "close", "Close")]

    def __init__(self, event: Event, title: str):
        super().__init__()
        self.event, self.title_text = event, title

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide details"):
            with VerticalScroll(id="details-body"):
                yield Static(details_text(self.event, self.title_text), id="details-text")
            yield Label("↑↓ pgup pgdn: scroll · esc: close", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#details-body").focus()

    def action_close(self) -> None:
        self.dismiss(None)
