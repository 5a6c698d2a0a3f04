"""The keys of the current screen (`?` or F1): every active binding, the ones the key bar leaves out too."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.dom import DOMNode
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Checkbox, DataTable, Input, Label, OptionList, RadioSet, Select, SelectionList, Static

KINDS: tuple[tuple[type[Widget], str], ...] = (
    (Input, "text field"),
    (Select, "drop-down"),
    (Checkbox, "check box"),
    (RadioSet, "set of options"),
    (DataTable, "table"),
    (SelectionList, "list"),
    (OptionList, "list"),
)
"""What a user calls each kind of widget that takes keys (SelectionList is an OptionList: it comes first)."""


def where(node: DOMNode, screen: Screen[Any]) -> str:
    """Where a group of keys acts, in the words of what the user sees: the field by the label beside it, the
    step, the log, the table; never a class name."""
    kind = getattr(node, "help_name", None) or next((name for cls, name in KINDS if isinstance(node, cls)), None)
    label = field_label(node)
    if label and kind:
        return f"in the field {label} ({kind})"
    if kind:
        return f"in this {kind}"
    return "in this pane" if node is screen.focused else "in the pane around it"


def field_label(node: DOMNode) -> str:
    """The label a form row shows beside the field, or a check box's own text; '' elsewhere."""
    if isinstance(node, Checkbox):
        return str(node.label)
    parent = node.parent
    if parent is None:
        return ""
    found = [child for child in parent.children if isinstance(child, Label) and child.has_class("field-label")]
    return str(found[0].render()) if found else ""


def binding_rows(screen: Screen[Any]) -> list[tuple[str, list[tuple[str, str, bool]]]]:
    """The screen's active bindings grouped by where they act (the focused widget, the screen, everywhere), each
    action once with all its keys: (group title, [(keys, description, enabled)])."""
    groups: dict[DOMNode, dict[str, tuple[list[str], str, bool]]] = {}
    app = screen.app
    for active in screen.active_bindings.values():
        binding = active.binding
        if binding.system and not binding.description:
            continue
        actions = groups.setdefault(active.node, {})
        keys, description, enabled = actions.get(binding.action, ([], binding.description or binding.action, False))
        keys.append(app.get_key_display(binding))
        actions[binding.action] = (keys, description, enabled or active.enabled)
    rows = []
    for node, actions in groups.items():
        if node is app:
            title = "everywhere"
        elif node is screen:
            title = "on this screen"
        else:
            title = where(node, screen)
        rows.append((title, [(" / ".join(keys), text, enabled) for keys, text, enabled in actions.values()]))
    order = {"on this screen": 0, "everywhere": 2}
    return sorted(rows, key=lambda row: order.get(row[0], 1))


class KeysScreen(ModalScreen[None]):
    """A generic help screen: what each key of the screen below does right now."""

    BINDINGS = [Binding("escape,question_mark,q", "close", "Close")]

    def __init__(self, below: Screen[Any]):
        super().__init__()
        self.below = below

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide", id="keys-dialog"):
            yield Label("Keys", classes="dialog-title")
            with VerticalScroll(id="keys-body"):
                intro = getattr(self.below, "HELP", None)
                if intro:
                    yield Static(intro, id="keys-intro", markup=False)
                yield Static(self.keys_text(), id="keys-list")
            yield Label("esc: close · up/down: scroll · dim keys do nothing right now", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#keys-body").focus()

    def keys_text(self) -> Content:
        parts: list[tuple[str, str] | str] = []
        for title, rows in binding_rows(self.below):
            parts.append((f"{title}\n", "bold $accent"))
            width = max(len(keys) for keys, _, _ in rows)
            for keys, text, enabled in rows:
                style = "" if enabled else "$text-disabled"
                parts += [(f"  {keys:<{width}}  ", "bold" if enabled else style), (f"{text}\n", style)]
        return Content.assemble(*parts)

    def action_close(self) -> None:
        self.dismiss(None)
