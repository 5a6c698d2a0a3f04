"""Small widgets shared by the wizard steps: the step base, typed inputs, a form built from a trainer's options
model, and the key bar."""

from __future__ import annotations

import shlex
import typing
from typing import TYPE_CHECKING, Any, Literal

from textual import on
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Checkbox, Input, Label, Select, Static

if TYPE_CHECKING:
    from gpuwizard.core.errors import Problem
    from gpuwizard.model.preset import Preset
    from gpuwizard.model.trainer_options import TrainerOptions


class Edit(Message):
    """A step asks to change one preset field (dotted path) to a value."""

    def __init__(self, path: str, value: Any):
        super().__init__()
        self.path, self.value = path, value


class InvalidInput(Message):
    """Text that cannot be converted for its field: the field, the text, why and the fix."""

    def __init__(self, path: str, found: Problem):
        super().__init__()
        self.path, self.problem = path, found


class FieldReset(Message):
    """A step put the preset's value back into a field that held text the preset does not take."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path


KIND_HELP = {
    "int": ("expects a whole number", "type digits only, e.g. 16"),
    "float": ("expects a number", "type a number such as {example}"),
    "list": ("expects words separated by spaces (quote one with spaces)", "close every quote you open"),
    "env": (
        "expects NAME=VALUE words separated by spaces, e.g. NCCL_P2P_DISABLE=1",
        "write each word as NAME=VALUE, quoting a value that holds spaces",
    ),
    "str": ("expects text", "type text"),
}
"""Per field kind: why its text did not convert, and the fix."""
EXAMPLES = {
    "optim.lr": "0.0005 or 5e-4",
    "hardware.gpu_memory_gb": "80 or 24",
    "optim.warmup_ratio": "0.05",
    "dataset.eval_split": "0.1",
    "costs.gpu_hour": "2.5",
}
"""A number each float field takes (an lr's example was the GPU memory field's hint); others: seconds."""


def unconvertible(path: str, kind: str, text: str) -> Problem:
    """The paragraph for text that does not convert to its field's kind; an optional field may also be cleared."""
    from gpuwizard.core.errors import problem

    why, fix = KIND_HELP[kind.removeprefix("optional_")]
    fix = fix.format(example=EXAMPLES.get(path, "300"))
    if kind.startswith("optional_"):
        fix += ", or clear the field to leave it unset"
    return problem(path, why, fix, value=text)


def field_id(path: str) -> str:
    """The widget id of a preset field's input (dotted path)."""
    return "f-" + path.replace(".", "-").replace("_", "-")


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
    if base == "env":
        pairs = [word.partition("=") for word in shlex.split(text)]
        if any(not sep or not name for name, sep, _ in pairs):
            raise ValueError(text)
        return {name: value for name, _, value in pairs}
    return text


def show(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return shlex.join(value)
    if isinstance(value, dict):
        return shlex.join(f"{name}={text}" for name, text in value.items())
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


class FieldInput(Input):
    """An Input bound to one preset field; posts Edit on valid changes. Its `-invalid` class marks text the preset
    does not take: its own, not Input's validation (which would clear it when the field loses focus)."""

    def __init__(self, path: str, kind: str, value: Any, placeholder: str = "", **kw: Any):
        super().__init__(show(value), placeholder=placeholder, id=field_id(path), compact=True, validate_on=(), **kw)
        self.path, self.kind = path, kind

    def set_quietly(self, value: Any) -> None:
        """Show the preset's value; text it replaces that the preset did not take is no longer invalid."""
        if self.value == show(value):
            return
        with self.prevent(Input.Changed):
            self.value = show(value)
        if self.has_class("-invalid"):
            self.remove_class("-invalid")
            self.post_message(FieldReset(self.path))

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        event.stop()
        try:
            value = parse(self.kind, event.value)
        except ValueError:
            self.add_class("-invalid")
            self.post_message(InvalidInput(self.path, unconvertible(self.path, self.kind, event.value)))
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
            id=field_id(path),
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
        super().__init__(label, value=value, id=field_id(path), compact=True, **kw)
        self.path = path

    @on(Checkbox.Changed)
    def _changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        self.post_message(Edit(self.path, event.value))


def row(label: str, widget: Widget, hint: str = "", classes: str = "", label_width: int | None = None) -> Horizontal:
    """A labelled form row (label_width: for a form whose labels are longer than the usual column); the hint is
    `#<field id>-hint`, for a step whose hint follows the field's value."""
    name = Label(label, classes="field-label")
    if label_width is not None:
        name.styles.width = label_width
    children: list[Widget] = [name, widget]
    if hint:
        children.append(Label(hint, classes="field-hint", id=f"{widget.id}-hint" if widget.id else None))
    return Horizontal(*children, classes=f"field-row {classes}".strip())


def options_form(model: type[TrainerOptions], values: dict[str, Any]) -> list[Widget]:
    """One row per simple field of a trainer's options record (nested ones stay in the YAML)."""
    from gpuwizard.core.schema import MISSING, unwrap  # the core loads after the first frame

    rows: list[Widget] = []
    width = max([LABEL_WIDTH, *(len(name) + 2 for name in model.model_fields)])  # no label is cut
    for name, info in model.model_fields.items():
        annotation, optional = unwrap(info.annotation)
        path = f"trainer_options.{name}"
        default = None if info.default is MISSING else info.default
        current = values.get(name, default)
        label = name.replace("_", " ")
        if annotation is bool:
            check = FieldCheckbox(path, label, bool(current), classes="option-check", tooltip=info.description)
            check.styles.margin = (0, 0, 1, width)
            rows.append(check)
        elif typing.get_origin(annotation) is Literal:
            select = FieldSelect(path, list(typing.get_args(annotation)), str(current), tooltip=info.description)
            rows.append(row(label, select, label_width=width))
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
                    label_width=width,
                )
            )
    return rows


LABEL_WIDTH = 14
"""The label column of the wizard's forms (app.tcss .field-label); a trainer's longer option names widen its form."""
REQUIRED_HINTS = {"base_model_path", "embodiment_tag", "config_name", "script"}


class Step(VerticalScroll):
    """A wizard step, built when first shown from the wizard's current preset."""

    help_name = "step"
    """What the keys screen calls it (tui/base/keys.py)."""

    def __init__(self, preset: Preset, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.preset = preset
        self.built = False
        """Its children exist (set by the wizard once its mount completed): before that nothing may draw into it."""

    def sync(self, preset: Preset) -> None:
        """After any edit: show the fields that apply to the preset as it now is."""

    def focus_first(self) -> None:
        """The first field that Tab reaches (never a hidden one), else the step itself so the arrow and page keys
        scroll it (the preview)."""
        first = next((w for w in self.screen.focus_chain if self in w.ancestors), None)
        (first or self).focus()

    @staticmethod
    def shows(widget: Widget) -> bool:
        """No row or box between a field and its step is hidden (the step itself is shown when entered)."""
        for node in widget.ancestors_with_self:
            if isinstance(node, Step):
                return True
            if not node.display:
                return False
        return True

    def keep_focus_reachable(self) -> None:
        """After a field is hidden: focus never stays on a widget that Tab cannot reach."""
        focused = self.screen.focused
        if focused is not None and self in focused.ancestors and focused not in self.screen.focus_chain:
            self.focus_first()


class KeyBar(Static):
    """The footer: the active keys that fit on one line, the focused widget's first, then the screen's, then the
    app's; the help key (which lists every key, hidden ones too) is always shown.

    Textual's Footer rebuilds a widget per key whenever the bindings change (each focus or step
    change) and wraps when they do not fit; redrawing one line of text keeps those changes fast on slow
    machines and SSH and never takes a second line.
    """

    DEFAULT_CSS = """
    KeyBar { dock: bottom; height: 1; background: $panel; padding: 0 1; }
    """

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.redraw)
        self.redraw()

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def on_resize(self) -> None:
        self.redraw()

    def entries(self) -> tuple[list[tuple[str, str, bool]], tuple[str, str, bool] | None]:
        """(key, description, enabled) of each shown binding, once per action, and the help key's own entry."""
        found: list[tuple[str, str, bool]] = []
        help_entry = None
        seen: set[str] = set()
        for active in self.screen.active_bindings.values():
            binding = active.binding
            if binding.action == "help":
                help_entry = help_entry or (self.app.get_key_display(binding), binding.description, True)
                continue
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            found.append((self.app.get_key_display(binding), binding.description, active.enabled))
        if self.app.ENABLE_COMMAND_PALETTE:
            found.append(("^p", "palette", True))
        if help_entry is None and callable(getattr(self.app, "action_help", None)):
            help_entry = ("f1", "Keys", True)  # a modal screen hides the app's `?`; its F1 is a priority binding
        return found, help_entry

    def redraw(self, screen: object = None) -> None:
        found, help_entry = self.entries()
        room = max(self.size.width - 2, 0) or 78  # before the first layout: assume 80 columns
        help_width = len(f"{help_entry[0]} {help_entry[1]}") if help_entry else 0
        parts: list[Any] = []
        used = 0
        for key, description, enabled in found:
            width = len(key) + 1 + len(description) + 1
            if used + width + help_width > room:
                break
            key_style, text_style = ("bold $accent", "$foreground") if enabled else ("$text-disabled", "$text-disabled")
            parts += [(key, key_style), " ", (description, text_style), " "]
            used += width
        if help_entry is not None:
            parts += [(help_entry[0], "bold $accent"), " ", (help_entry[1], "$foreground")]
        self.update(Content.assemble(*parts))
