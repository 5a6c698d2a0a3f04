"""Pick the training interpreter from the environments found on this machine (`gpuwizard envs`), instead of typing
its path into launch.python: those that have the preset's trainer first, each with where it was found."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from gpuwizard.tui.base.messages import EnvsFound
from gpuwizard.tui.widgets.fields import KeyBar


def env_line(python: str, where: str, trainers: dict[str, str]) -> str:
    has = ", ".join(f"{name} {version}" for name, version in sorted(trainers.items())) or "no trainer"
    return f"{python}\n    {has} · {where}"


class EnvPicker(ModalScreen[str | None]):
    """The environments that have `trainer`, then the rest; enter puts the chosen interpreter into launch.python."""

    BINDINGS = [Binding("enter", "pick", "Use it", priority=True), Binding("escape", "cancel", "Cancel")]

    def __init__(self, trainer: str, workdir: str | None):
        super().__init__()
        self.trainer, self.workdir = trainer, workdir
        self.pythons: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide", id="env-picker"):
            yield Label(f"Training environments for {self.trainer}", classes="dialog-title")
            yield Static("looking in PATH, virtual and conda environments, checkouts, ~/.venvs…", id="env-note")
            yield OptionList(id="envs")
        yield KeyBar()

    def on_mount(self) -> None:
        self.search()

    @work(thread=True, exclusive=True)
    def search(self) -> None:
        from gpuwizard.trainers.envs import envs_for, find_envs

        found = find_envs(workdirs=[self.workdir] if self.workdir else [])
        fitting = envs_for(self.trainer, found)
        others = [e for e in found if e not in fitting]
        self.post_message(
            EnvsFound(
                [(e.python, e.where, e.trainers) for e in fitting], [(e.python, e.where, e.trainers) for e in others]
            )
        )

    def on_envs_found(self, message: EnvsFound) -> None:
        options = self.query_one("#envs", OptionList)
        options.clear_options()
        self.pythons = []
        for python, where, trainers in message.fitting + message.others:
            options.add_option(Option(env_line(python, where, trainers)))
            self.pythons.append(python)
        note = (
            f"{len(message.fitting)} with {self.trainer}, {len(message.others)} without"
            if self.pythons
            else "no Python environment found; type the interpreter's path into launch.python"
        )
        self.query_one("#env-note", Static).update(note)
        if self.pythons:
            options.highlighted = 0
            options.focus()

    def action_pick(self) -> None:
        options = self.query_one("#envs", OptionList)
        if options.highlighted is not None and options.highlighted < len(self.pythons):
            self.dismiss(self.pythons[options.highlighted])

    @on(OptionList.OptionSelected)
    def _selected(self) -> None:
        self.action_pick()

    def action_cancel(self) -> None:
        self.dismiss(None)
