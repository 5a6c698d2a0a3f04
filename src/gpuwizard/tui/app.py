"""The gpuwizard Textual app: themes, command palette, and the first screen (wizard or monitor)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.app import SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from gpuwizard.model.settings import raw_theme
from gpuwizard.tui.base.apphost import AppHost
from gpuwizard.tui.base.messages import OpenSweep
from gpuwizard.tui.base.themes import DEFAULT_THEME, load_themes

if TYPE_CHECKING:
    from pathlib import Path

    from textual.theme import Theme

    from gpuwizard.model.preset import Preset
    from gpuwizard.runs.rundir import RunDir


TERMINAL_CHECK_S = 2.0


class GpuWizardApp(AppHost):
    CSS_PATH = "app.tcss"
    TITLE = "gpuwizard"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("ctrl+t", "next_theme", "Theme"),
        Binding("ctrl+l", "runs", "Runs"),
        Binding("question_mark", "help", "Keys", key_display="?"),
        Binding("f1", "help", "Keys", show=False, priority=True),  # also while a field that takes `?` has focus
    ]

    def __init__(
        self,
        preset: Preset | str | None = None,
        run: RunDir | None = None,
        exit_on_error: bool = False,
        sweep: Path | None = None,
    ):
        super().__init__()
        self.start_preset, self.start_run, self.exit_on_error = preset, run, exit_on_error
        self.start_sweep = sweep
        self.exit_error: str | None = None
        self.quit_asked = False
        self.last_run: RunDir | None = run
        self.animation_level = "none"
        themes, self.theme_problems = load_themes()
        for theme in themes:
            self.register_theme(theme)
        self.own_themes = [t.name for t in themes]
        wanted = raw_theme() or DEFAULT_THEME
        if wanted not in self.available_themes:
            self.theme_problems.append(unknown_theme(wanted, list(self.available_themes)))
            wanted = DEFAULT_THEME
        self.theme = wanted

    def on_mount(self) -> None:
        if not self.is_headless:
            self.set_interval(TERMINAL_CHECK_S, self.exit_if_terminal_gone)
        self.theme_changed_signal.subscribe(self, self.remember_theme)
        for problem in self.theme_problems:
            self.notify(problem, severity="warning", markup=False)
        if self.start_sweep is not None:
            self.open_sweep(OpenSweep(self.start_sweep))
        elif self.start_run is not None:
            from gpuwizard.tui.monitor.screen import MonitorScreen

            self.push_screen(MonitorScreen(self.start_run))
        else:
            from gpuwizard.tui.wizard.screen import WizardScreen

            self.push_screen(WizardScreen(self.start_preset, exit_on_error=self.exit_on_error))
        self.call_after_refresh(
            self.call_after_refresh, self.check_settings
        )  # after the first screen is drawn: no GIL race

    @work(thread=True, exclusive=True, group="settings", exit_on_error=False)
    def check_settings(self) -> None:
        """Validate settings.yaml after the first frame; its mistakes are shown, never fatal."""
        from gpuwizard.model.settings import check_settings

        for paragraph in check_settings():
            self.call_from_thread(
                self.notify, paragraph, title="settings.yaml", severity="warning", timeout=10, markup=False
            )

    def remember_theme(self, theme: Theme) -> None:
        from gpuwizard.model.settings import remember

        for paragraph in remember(theme=theme.name):
            self.notify(paragraph, title="theme not remembered", severity="warning", timeout=10, markup=False)

    def open_monitor(self, run: RunDir, replace: bool = False) -> None:
        """Show a run in the monitor (screens reach each other through the app, never by importing one another)."""
        from gpuwizard.tui.monitor.screen import MonitorScreen

        self.last_run = run
        if replace:
            self.switch_screen(MonitorScreen(run))
        else:
            self.push_screen(MonitorScreen(run))

    @on(OpenSweep)
    def open_sweep(self, message: OpenSweep) -> None:
        """A sweep's screen, asked for by the Runs screen, the wizard or `gpuwizard sweep watch`."""
        from gpuwizard.tui.screens.sweep import SweepScreen

        self.push_screen(SweepScreen(message.folder))

    def sweep_under(self, screen: Screen[Any]) -> bool:
        """Whether the screen right under `screen` is a Sweep screen (a monitor opened from it goes back in one key)."""
        from gpuwizard.tui.screens.sweep import SweepScreen

        stack = self.screen_stack
        return screen in stack[1:] and isinstance(stack[stack.index(screen) - 1], SweepScreen)

    async def action_quit(self) -> None:
        """Unsaved edits in a wizard are asked about first (ctrl+q again quits); otherwise quit at once."""
        from gpuwizard.tui.dialogs.modals import Confirm
        from gpuwizard.tui.wizard.screen import WizardScreen

        edited = next((s for s in self.screen_stack if isinstance(s, WizardScreen) and s.unsaved()), None)
        if edited is None or edited.preset is None or self.quit_asked:
            await super().action_quit()
            return
        self.quit_asked = True

        def answer(yes: bool | None) -> None:
            self.quit_asked = False
            if yes:
                self.exit()

        name = edited.preset.name
        question = f"Quit and lose your unsaved edits to {name}? (n goes back; ctrl+s there saves them)"
        self.push_screen(Confirm(question), answer)

    def action_help(self) -> None:
        """The keys of the screen in front; pressed again (or escape), it closes."""
        from gpuwizard.tui.base.keys import KeysScreen

        if isinstance(self.screen, KeysScreen):
            self.screen.dismiss(None)
        else:
            self.push_screen(KeysScreen(self.screen))

    def action_runs(self) -> None:
        """The run history: open, compare, resume."""
        from gpuwizard.tui.screens.runs import RunsScreen

        if not isinstance(self.screen, RunsScreen):
            self.push_screen(RunsScreen())

    def open_wizard(self, preset: Preset) -> None:
        """Back to the wizard: the one under the monitor, or a new one on the run's preset."""
        from gpuwizard.tui.wizard.screen import WizardScreen

        if len(self.screen_stack) > 2 and isinstance(self.screen_stack[-2], WizardScreen):
            self.pop_screen()
        else:
            self.switch_screen(WizardScreen(preset))

    def exit_if_terminal_gone(self) -> None:
        """A closed terminal (SSH dropped, tmux pane killed) must end the app, never leave it spinning;
        the job itself runs on under its supervisor."""
        stderr = sys.__stderr__
        if stderr is None:
            return
        try:
            os.write(stderr.fileno(), b"")  # Textual draws on stderr; a hung-up tty answers EIO
        except OSError:
            self.exit()

    def action_next_theme(self) -> None:
        """gpuwizard's own themes only (Textual's are in the palette's "Change theme")."""
        names = self.own_themes
        self.theme = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]
        self.notify(f"Theme: {self.theme} (ctrl+t cycles {', '.join(names)}; remembered)", markup=False)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        from gpuwizard.tui.monitor.screen import MonitorScreen
        from gpuwizard.tui.wizard.lines import STEPS
        from gpuwizard.tui.wizard.screen import WizardScreen

        if isinstance(screen, WizardScreen):
            yield SystemCommand("job: Run", "Check the plan and launch the job", screen.action_run)
            yield SystemCommand("job: Smoke run", "50 steps at the smallest batch", screen.action_smoke)
            yield SystemCommand(
                "job: Probe", "Measure samples/s and memory per GPU count and batch (F5)", screen.action_probe
            )
            yield SystemCommand("job: Sweep", "Runs over a grid of values, on free devices (F6)", screen.action_sweep)
            yield SystemCommand("job: Copy command", "Copy the exact command (OSC 52)", screen.action_copy)
            yield SystemCommand("job: Export shell script", "Write the command as a bash script", screen.action_export)
            yield SystemCommand("preset: Open", "Open, duplicate or delete a preset", screen.action_open)
            yield SystemCommand("preset: Save as", "Save the wizard's state as a preset", screen.action_save)
            for index, (_, title) in enumerate(STEPS):
                yield SystemCommand(
                    f"wizard: {index + 1} {title}", "Go to this step", partial(screen.action_goto, index)
                )
        if isinstance(screen, MonitorScreen):
            yield SystemCommand("job: Stop", "Stop every process of this run", screen.action_stop)
            yield SystemCommand("job: Stack dump", "py-spy dump of every rank", screen.action_dump)
            yield SystemCommand("job: Smoke repro", "Restart as a 50-step smoke run", screen.action_smoke)
            if screen.p2p_applies():  # NCCL's peer-to-peer: CUDA runs of several processes only
                yield SystemCommand(
                    "job: Retry with NCCL_P2P_DISABLE=1",
                    "Stop and restart without peer-to-peer",
                    screen.action_retry_p2p,
                )
        yield SystemCommand("runs: History", "Every run: open, compare, resume (ctrl+l)", self.action_runs)
        for name in self.own_themes:
            yield SystemCommand(f"theme: {name}", "Switch theme (remembered)", partial(setattr, self, "theme", name))


def unknown_theme(name: str, known: list[str]) -> str:
    """settings.yaml names a theme that does not exist: refused, with the closest name."""
    import difflib

    from gpuwizard.core import paths
    from gpuwizard.core.errors import problem

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    fix = f"write theme: {close[0]}" if close else f"use one of {', '.join(sorted(known))}"
    return problem(
        "theme",
        "no such theme, so the default is used" + (f"; did you mean {close[0]}?" if close else ""),
        fix,
        value=name,
    ).paragraph(str(paths.settings_file()))
