"""Small modal dialogs: ask for text, confirm, and pick / duplicate / delete presets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.css.styles import RulesMap
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from gpuwizard.core.errors import UserError
from gpuwizard.core.safetext import safe_line
from gpuwizard.model.preset import Preset, with_field
from gpuwizard.model.preset_files import (
    delete_user_preset,
    load_preset_file,
    preset_listing,
    save_user_preset,
    shipped_preset_files,
    user_preset_files,
)
from gpuwizard.tui.widgets.fields import KeyBar


class AskText(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, label: str, value: str = ""):
        super().__init__()
        self.title_text, self.label, self.value = title, label, value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Input(self.value, placeholder=self.label, id="answer")
            yield Label("enter: confirm · esc: cancel", classes="dialog-hint")

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class SaveAs(ModalScreen[tuple[str, str] | None]):
    """The name and the one-line description of a saved preset; enter in either field saves, tab moves between."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, name: str, description: str):
        super().__init__()
        self.name_value, self.description = name, description

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Save preset as", classes="dialog-title")
            yield Input(self.name_value, placeholder="name", id="answer")
            yield Input(self.description, placeholder="one line saying what this job is", id="description")
            yield Label("enter: save · tab: the description · esc: cancel", classes="dialog-hint")

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        name = self.query_one("#answer", Input).value.strip()
        self.dismiss((name, self.query_one("#description", Input).value.strip()) if name else None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class Confirm(ModalScreen[bool]):
    """A yes or no; a question given as a function is asked again each second (a stop's step goes on under it)."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str | Callable[[], str]):
        super().__init__()
        self.question = question

    def asked(self) -> str:
        return self.question() if callable(self.question) else self.question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.asked(), classes="dialog-title", id="question")
            yield Label("y: yes · n / esc: no", classes="dialog-hint")

    def on_mount(self) -> None:
        if callable(self.question):
            self.set_interval(1.0, lambda: self.query_one("#question", Label).update(self.asked()))

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class AskGrid(ModalScreen[tuple[str, str] | None]):
    """A sweep's grid in one dialog: the `--set FIELD=V1,V2` words and the seeds; enter in either field starts it."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, preset: str, grid: str):
        super().__init__()
        self.preset, self.grid = preset, grid

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label(f"Sweep {self.preset}: one run per combination, each on free devices", classes="dialog-title")
            yield Label("the grid, as --set takes it: FIELD=V1,V2, a space between fields", classes="dialog-hint")
            yield Input(self.grid, placeholder="e.g. optim.lr=1e-4,2e-4 batch.size=8,16", id="answer")
            yield Label("seeds: runs per combination, seeded 0..N-1", classes="dialog-hint")
            yield Input("", placeholder="empty: one run per combination", id="seeds")
            yield Label("enter: start the sweep · tab: the seeds · esc: cancel", classes="dialog-hint")

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        self.dismiss((self.query_one("#answer", Input).value, self.query_one("#seeds", Input).value))

    def action_cancel(self) -> None:
        self.dismiss(None)


class SweepPicker(ModalScreen[str | None]):
    """The sweeps, newest first (their ids start with the time they began and name the preset)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, sweep_ids: list[str]):
        super().__init__()
        self.sweep_ids = sweep_ids

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label("Sweeps, newest first", classes="dialog-title")
            yield OptionList(*(Option(OneLine(safe_line(s)), id=s) for s in self.sweep_ids), id="sweep-list")
            yield Label("enter: open · esc: cancel", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#sweep-list", OptionList).focus()

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class OneLine(Content):
    """An option drawn on one line at any width (#presets is cut with an ellipsis, never wrapped), so 10,000 of
    them are laid out without wrapping each one at every width the dialog passes through."""

    def get_height(self, rules: RulesMap, width: int) -> int:
        return 1


class PresetPicker(ModalScreen[Preset | None]):
    """Your presets and the shipped ones: open, duplicate, delete."""

    BINDINGS = [
        Binding("enter", "open", "Open", priority=True),
        Binding("ctrl+d", "duplicate", "Duplicate"),
        Binding("delete,ctrl+x", "delete", "Delete"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, current: str | None = None):
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide", id="picker"):
            yield Label("Presets", classes="dialog-title")
            yield OptionList(id="presets")
            with VerticalScroll(id="picker-problems"):
                yield Static("", id="picker-error", classes="dialog-hint", markup=False)
        yield KeyBar()

    def on_mount(self) -> None:
        self.reload()

    def reload(self) -> None:
        """One line per preset; the wizard's preset (else the first) is highlighted, so the first Down moves on."""
        options = self.query_one("#presets", OptionList)
        options.clear_options()
        listed = []
        for preset in preset_listing():
            source = "yours" if preset.source == "user" else preset.source
            text = (
                f"{preset.name:<22} {source:<8} (invalid: enter shows why)"
                if preset.problem is not None
                else f"{preset.name:<22} {source:<8} {preset.trainer:<8} {preset.workers():<11}  {preset.description}"
            )
            listed.append(Option(OneLine(safe_line(text)), id=f"{source}:{preset.name}"))  # text, never markup
        options.add_options(listed)  # at once: one layout for 10,000 presets, not one each
        ids = [options.get_option_at_index(i).id for i in range(options.option_count)]
        current = next(
            (i for i, option_id in enumerate(ids) if option_id is not None and option_id.endswith(f":{self.current}")),
            0,
        )
        options.highlighted = current if ids else None
        options.focus()

    def show_error(self, exc: UserError) -> None:
        """Each problem whole, the file named once above them (not in front of every line)."""
        lines = [f"{exc.source}:"] if exc.source else []
        lines += [f"- {found.paragraph()}" for found in exc.problems]
        self.query_one("#picker-error", Static).update("\n".join(lines))

    def selected(self) -> tuple[str, str] | None:
        options = self.query_one("#presets", OptionList)
        if options.highlighted is None:
            return None
        option_id = options.get_option_at_index(options.highlighted).id
        if option_id is None:  # every option is added with one
            return None
        source, name = option_id.split(":", 1)
        return source, name

    def path_of(self, source: str, name: str) -> Path | None:
        """The file of a listed preset; None, the list refreshed and a line shown, when it is gone (deleted from
        another terminal since the list was shown)."""
        path = (user_preset_files() if source == "yours" else shipped_preset_files()).get(name)
        if path is None:
            self.gone(source, name)
        return path

    def gone(self, source: str, name: str) -> None:
        """One line saying the preset is gone, over a list read again (the row would only fail once more)."""
        whose = "Your preset" if source == "yours" else "The shipped preset"
        self.reload()
        self.query_one("#picker-error", Static).update(
            f"{whose} '{name}' no longer exists (deleted since this list was shown)."
        )

    def action_open(self) -> None:
        chosen = self.selected()
        if chosen and (path := self.path_of(*chosen)):
            try:
                self.dismiss(load_preset_file(path))
            except UserError as exc:
                self.show_error(exc)

    @on(OptionList.OptionSelected)
    def _selected(self) -> None:
        self.action_open()

    def action_duplicate(self) -> None:
        chosen = self.selected()
        if not chosen:
            return

        def copy(name: str | None) -> None:
            if not name or not (path := self.path_of(*chosen)):
                return
            try:
                preset = with_field(load_preset_file(path), "name", name)
                save_user_preset(preset, overwrite=False)
            except UserError as exc:
                self.show_error(exc)
                return
            self.reload()

        self.app.push_screen(AskText(f"Duplicate {chosen[1]} as", "name", f"{chosen[1]}-copy"), copy)

    def action_delete(self) -> None:
        chosen = self.selected()
        if not chosen:
            return
        if chosen[0] != "yours":
            self.query_one("#picker-error", Static).update(
                "Shipped presets cannot be deleted; duplicate one to change it."
            )
            return

        def delete(yes: bool | None) -> None:
            if not yes or not self.path_of(*chosen):
                return
            try:
                delete_user_preset(chosen[1])
            except (UserError, FileNotFoundError):  # deleted elsewhere between the look and the unlink
                self.gone(*chosen)
                return
            self.reload()

        self.app.push_screen(Confirm(f"Delete your preset '{chosen[1]}'?"), delete)

    def action_cancel(self) -> None:
        self.dismiss(None)
