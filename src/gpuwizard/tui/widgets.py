"""Small widgets shared by the wizard steps: typed inputs and a form built from a trainer's options model."""

from __future__ import annotations

import shlex
import typing
from typing import TYPE_CHECKING, Any, Literal

from textual import on
from textual.containers import Horizontal
from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Checkbox, Input, Label, Select, Static

if TYPE_CHECKING:
    from gpuwizard.trainers.base import TrainerOptions


class Edit(Message):
    """A step asks to change one preset field (dotted path) to a value."""

    def __init__(self, path: str, value: Any):
        super().__init__()
        self.path, self.value = path, value


class InvalidInput(Message):
    """Text that cannot be converted for its field; shown in the summary line."""

    def __init__(self, path: str, text: str, reason: str):
        super().__init__()
        self.path, self.text, self.reason = path, text, reason


KIND_WORDS = {
    "int": "expects a whole number",
    "float": "expects a number, e.g. 1e-4",
    "list": "expects words separated by spaces (quote one with spaces)",
    "str": "expects text",
}


def parse(kind: str, text: str) -> Any:
    """Text from an Input to the field's type; '' means null for optional fields."""
    text = text.strip()
    if kind.startswith("optional_") and text == "":
        return None
    base = kind.removeprefix("optional_")
    if base == "int":
        return int(text)
    if base == "float":
        return float(text)
    if base == "list":
        return shlex.split(text)
    return text


def show(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return shlex.join(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


class FieldInput(Input):
    """An Input bound to one preset field; posts Edit on valid changes."""

    def __init__(self, path: str, kind: str, value: Any, placeholder: str = "", **kw: Any):
        super().__init__(
            show(value), placeholder=placeholder, id="f-" + path.replace(".", "-").replace("_", "-"), compact=True, **kw
        )
        self.path, self.kind = path, kind

    def set_quietly(self, value: Any) -> None:
        with self.prevent(Input.Changed):
            self.value = show(value)

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        event.stop()
        try:
            value = parse(self.kind, event.value)
        except ValueError:
            self.add_class("-invalid")
            self.post_message(InvalidInput(self.path, event.value, KIND_WORDS[self.kind.removeprefix("optional_")]))
            return
        self.remove_class("-invalid")
        self.post_message(Edit(self.path, value))


class FieldSelect(Select[str]):
    """A Select bound to one preset field."""

    def __init__(self, path: str, options: list[str], value: str, **kw: Any):
        super().__init__(
            [(o, o) for o in options],
            value=value,
            allow_blank=False,
            id="f-" + path.replace(".", "-").replace("_", "-"),
            compact=True,
            **kw,
        )
        self.path = path

    def set_quietly(self, value: Any) -> None:
        with self.prevent(Select.Changed):
            self.value = value

    @on(Select.Changed)
    def _changed(self, event: Select.Changed) -> None:
        event.stop()
        if event.value is not Select.NULL:
            self.post_message(Edit(self.path, event.value))


class FieldCheckbox(Checkbox):
    def __init__(self, path: str, label: str, value: bool, **kw: Any):
        super().__init__(label, value=value, id="f-" + path.replace(".", "-").replace("_", "-"), compact=True, **kw)
        self.path = path

    @on(Checkbox.Changed)
    def _changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        self.post_message(Edit(self.path, event.value))


def row(label: str, widget: Widget, hint: str = "") -> Horizontal:
    """A labelled form row."""
    children: list[Widget] = [Label(label, classes="field-label"), widget]
    if hint:
        children.append(Label(hint, classes="field-hint"))
    return Horizontal(*children, classes="field-row")


def options_form(model: type[TrainerOptions], values: dict[str, Any]) -> list[Widget]:
    """One row per simple field of a trainer's options record (nested ones stay in the YAML)."""
    from gpuwizard.schema import MISSING, unwrap  # the core loads after the first frame

    rows: list[Widget] = []
    for name, info in model.model_fields.items():
        annotation, optional = unwrap(info.annotation)
        path = f"trainer_options.{name}"
        default = None if info.default is MISSING else info.default
        current = values.get(name, default)
        label = name.replace("_", " ")
        if annotation is bool:
            rows.append(FieldCheckbox(path, label, bool(current), classes="option-check", tooltip=info.description))
        elif typing.get_origin(annotation) is Literal:
            rows.append(
                row(label, FieldSelect(path, list(typing.get_args(annotation)), current, tooltip=info.description))
            )
        elif annotation in (int, float, str) or typing.get_origin(annotation) is list:
            kind = {int: "int", float: "float", str: "str"}.get(annotation, "list")
            required = (
                "required" if (info.is_required() or (optional and default is None and name in REQUIRED_HINTS)) else ""
            )
            rows.append(
                row(
                    label,
                    FieldInput(
                        path,
                        ("optional_" if optional or kind == "list" else "") + kind,
                        current,
                        placeholder=required or "default",
                        tooltip=info.description,
                    ),
                )
            )
    return rows


REQUIRED_HINTS = {"base_model_path", "embodiment_tag", "config_name", "script"}


class KeyBar(Static):
    """The footer: every active key and what it does, as one widget.

    Textual's Footer rebuilds a widget per key whenever the bindings change (each focus or step
    change); redrawing one line of text keeps those changes fast on slow machines and SSH.
    """

    DEFAULT_CSS = """
    KeyBar { dock: bottom; height: auto; max-height: 2; background: $panel; padding: 0 1; }
    """

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.redraw)
        self.redraw()

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def redraw(self, screen: object = None) -> None:
        parts: list[Any] = []
        seen: set[str] = set()
        for active in self.screen.active_bindings.values():
            binding = active.binding
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            key_style, text_style = (
                ("bold $accent", "$foreground") if active.enabled else ("$text-disabled", "$text-disabled")
            )
            parts += [(self.app.get_key_display(binding), key_style), " ", (binding.description, text_style), " "]
        if self.app.ENABLE_COMMAND_PALETTE:
            parts += [("^p", "bold $accent"), " palette"]
        self.update(Content.assemble(*parts))
