"""What the wizard's keys do with its preset: run, smoke run, probe, sweep, open, save, copy and export. Each refuses
while a field holds text the preset does not take (the preset still has the field's last valid value), listing every
such field, with the plan's errors where they stop the action too, in one ProblemsScreen."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpuwizard.tui.base.messages import LaunchPhase, OpenSweep, RunStarted, SweepStarted

LAUNCHES: list[str] = []
"""What became of launches the app was quit during, one line each, for the command line to say once the app is gone
(the launch worker outlives the app's screen; tui.entry.run_app prints and clears these)."""

if TYPE_CHECKING:
    from textual.message import Message
    from textual.notifications import SeverityLevel
    from textual.worker import Worker

    from gpuwizard.core.errors import Problem
    from gpuwizard.gpus.inventory import Inventory
    from gpuwizard.model.job import LaunchSpec, Plan
    from gpuwizard.model.preset import Preset
    from gpuwizard.tui.base.apphost import AppHost


class ActionsHost(Protocol):
    """The wizard screen, as its actions see it: the preset and its plan, the fields it does not take, and the
    screen's own means (notices, dialogs, messages, workers)."""

    @property
    def preset(self) -> Preset | None: ...
    @property
    def planned(self) -> Preset | None: ...
    @property
    def plan(self) -> Plan | None: ...
    @property
    def spec(self) -> LaunchSpec | None: ...
    @property
    def blockers(self) -> list[Problem] | None: ...
    @property
    def inventory(self) -> Inventory | None: ...
    @property
    def source_file(self) -> str | None: ...
    @property
    def app(self) -> AppHost: ...

    def invalid_fields(self) -> dict[str, list[Problem]]: ...
    def replan(self) -> None: ...
    def was_saved(self, preset: Preset, path: Path) -> None: ...
    def unsaved(self) -> bool: ...
    async def reopen(self, preset: Preset) -> None: ...
    def notify(
        self, message: str, *, severity: SeverityLevel = ..., timeout: float | None = ..., markup: bool = ...
    ) -> None: ...
    def post_message(self, message: Message) -> bool: ...
    def run_worker(
        self, work: Callable[[], None], *, group: str, exit_on_error: bool, exclusive: bool, thread: bool
    ) -> Worker[None]: ...


def offered(preset: Preset, source: str | None, plan: Plan | None) -> tuple[str, str]:
    """The name and description the save dialog offers: the preset's own, except a shipped preset's, whose name would
    shadow it among the user's and whose words tell of the shipped job (an example's "one GPU"), not this one."""
    from gpuwizard.core import paths
    from gpuwizard.core.units import counted

    if source is None or Path(source).resolve().parent != paths.shipped_presets_dir().resolve():
        return preset.name, preset.description
    device = plan.device if plan is not None else "cpu" if preset.hardware.device == "cpu" else "cuda"
    on = counted(plan.world_size if plan is not None else preset.hardware.gpus, device)
    return (
        f"my-{preset.name.removeprefix('example-')}",
        f"{preset.policy} with {preset.trainer} on {on}, from {preset.name}",
    )


class WizardActions:
    """What the wizard's keys do, for the screen that holds it: each action reads the screen's state through
    ActionsHost, and changes it only through the screen's own methods."""

    def __init__(self, host: ActionsHost):
        self.host = host

    def ask_trust(self, doing: str, then: Callable[[], None]) -> None:
        """Go on with `then` at once for a trusted preset; for any other, show what it would run and go on only after
        the user's yes, remembered by its hash (model/trust.py); a no runs nothing of it."""
        from gpuwizard.model import trust

        preset = self.host.preset
        if preset is None or trust.is_trusted(preset):
            then()
            return
        from gpuwizard.tui.dialogs.trust import TrustQuestion

        source = self.host.source_file or preset.name

        def answered(yes: bool | None) -> None:
            if not yes or self.host.preset is None:
                self.host.notify("Not trusted: nothing of this preset runs; the plan uses what gpuwizard remembers.")
                return
            trust.trust(self.host.preset, source)
            self.host.replan()  # the installed trainer may now be asked what the plan assumed
            then()

        self.host.app.push_screen(TrustQuestion(preset, source, doing), answered)

    def plan_is_current(self) -> bool:
        """The plan on screen was made from the preset as it is now (an edit re-plans 120 ms later)."""
        return self.host.plan is not None and self.host.planned is self.host.preset

    def refused(self, not_done: str, plan_errors: bool = False, blockers: bool = False) -> bool:
        """Show why an action cannot go ahead: every invalid field, and where asked the plan's errors and what stops it
        on this machine; False when nothing stands in its way."""
        invalid = self.host.invalid_fields()
        problems = [found for problems in invalid.values() for found in problems]
        why = [f"{len(invalid)} field{'s' if len(invalid) > 1 else ''} invalid"] if invalid else []
        plan = self.host.plan if self.plan_is_current() else None
        if plan_errors and plan is not None and plan.errors:
            problems += plan.errors
            why.append(f"the plan has {len(plan.errors)} error(s)")
        more = [found for found in self.host.blockers or [] if found not in problems]  # a CPU plan's errors hold them
        if blockers and plan is not None and more:
            problems += more
            why.append("it cannot start on this machine")
        if not problems:
            return False
        from gpuwizard.tui.wizard.problems import ProblemsScreen

        self.host.app.push_screen(ProblemsScreen(f"{not_done}: {', '.join(why)}", problems))
        return True

    def command_refused(self, not_done: str) -> bool:
        """Copy and export take the command on screen: none while the plan has errors or is being remade."""
        if self.refused(not_done):
            return True
        if self.host.spec is None:
            self.host.notify(f"{not_done}: the plan has errors.", severity="error")
            return True
        if not self.plan_is_current():
            self.host.notify(f"{not_done}: the command is being updated after your edit; press the key again.")
            return True
        return False

    def copy(self) -> None:
        if self.command_refused("Nothing copied") or self.host.spec is None:
            return
        self.host.app.copy_to_clipboard(self.host.spec.shell())
        self.host.notify("Command copied to the clipboard (OSC 52: works over SSH in most terminals).")

    def export(self) -> None:
        if self.command_refused("Nothing exported") or self.host.spec is None or self.host.preset is None:
            return
        from gpuwizard.tui.dialogs.modals import AskText

        spec = self.host.spec

        def write(path: str | None) -> None:
            if not path:
                return
            from gpuwizard.core.yamlio import atomic_write

            target = Path(path).expanduser()
            try:
                atomic_write(target, spec.script())
                target.chmod(0o755)
            except OSError as exc:
                self.host.notify(f"Could not write {target}: {exc}", severity="error")
                return
            self.host.notify(f"Wrote {target}")

        self.host.app.push_screen(AskText("Export as a shell script", "file", f"./{self.host.preset.name}.sh"), write)

    def open(self) -> None:
        """Open another preset; unsaved edits to this one are asked about first."""
        from gpuwizard.tui.dialogs.modals import Confirm, PresetPicker

        async def opened(preset: Preset | None) -> None:
            if preset:
                await self.host.reopen(preset)

        def pick(yes: bool | None = True) -> None:
            if yes:
                current = self.host.preset
                self.host.app.push_screen(PresetPicker(current.name if current else None), opened)

        preset = self.host.preset
        if self.host.unsaved() and preset is not None:
            question = f"Open another preset and lose your unsaved edits to {preset.name}?"
            self.host.app.push_screen(Confirm(question), pick)
        else:
            pick()

    def save(self) -> None:
        """Save as a user preset with its name and description, after the trust question for a preset the user did not
        write; a copy under a new name gets no fixed output_dir of the original's (each of its runs writes a folder of
        its own), so it never writes where the original does."""
        from gpuwizard.core.errors import UserError
        from gpuwizard.model.preset import saved_as
        from gpuwizard.model.preset_files import save_user_preset
        from gpuwizard.tui.dialogs.modals import Confirm, SaveAs

        if self.host.preset is None or self.refused("Not saved"):
            return

        def save(answer: tuple[str, str] | None, overwrite: bool = False) -> None:
            current = self.host.preset
            if not answer or current is None:
                return
            name, description = answer
            try:
                preset = saved_as(current, name, description)
                path = save_user_preset(preset, overwrite=overwrite)
            except UserError as exc:
                if "already exists" in exc.paragraph() and not overwrite:
                    self.host.app.push_screen(
                        Confirm(f"Replace your preset '{name}'?"), lambda yes: save(answer, True) if yes else None
                    )
                    return
                self.host.notify(exc.paragraph(), severity="error", timeout=8)
                return
            moved = " (its runs write folders of their own)" if preset.output_dir != current.output_dir else ""
            self.host.was_saved(preset, path)
            self.host.notify(f"Saved preset {name} to {path}{moved}")

        def ask_name() -> None:
            if self.host.preset is not None:
                offer = offered(self.host.preset, self.host.source_file, self.host.plan)
                self.host.app.push_screen(SaveAs(*offer), save)

        # a preset in the user's folder runs its code without a question: only one the user trusted goes there
        self.ask_trust("Saved among your presets, it", ask_name)

    def run(self, smoke: bool = False) -> None:
        """Refusals known here (invalid fields, the plan's errors, this machine) are listed at once; the checks that
        need the trainer and the disks run in the launch."""
        if self.host.preset is None or self.refused("Not started", plan_errors=True, blockers=True):
            return

        def go() -> None:
            if self.host.preset is not None:
                # the summary line says what the launch is doing, and since when
                self.in_worker(self.launch, self.host.preset, smoke, self.host.inventory)

        self.ask_trust("Running it", go)

    def probe(self) -> None:
        """Short real runs per GPU count and batch (`gpuwizard probe`); a kept result re-plans the estimates."""
        if self.host.preset is None or self.refused("Nothing probed", plan_errors=True):
            return
        from gpuwizard.tui.screens.probe import ProbeScreen

        def probed(kept: bool | None) -> None:
            if kept:
                self.host.replan()

        def go() -> None:
            if self.host.preset is not None:
                self.host.app.push_screen(ProbeScreen(self.host.preset), probed)

        self.ask_trust("Probing it", go)

    def sweep(self) -> None:
        """Several runs of this preset over a grid asked in one dialog (`gpuwizard sweep`'s --set and --seeds), after
        the trust question; a bad grid is refused in one paragraph per mistake before anything starts."""
        if self.host.preset is None or self.refused("No sweep started", plan_errors=True):
            return
        from gpuwizard.tui.dialogs.modals import AskGrid

        def asked(answer: tuple[str, str] | None) -> None:
            if answer is not None:
                self.start_sweep(*answer)

        def ask() -> None:
            if self.host.preset is not None:
                lr = self.host.preset.optim.lr or (self.host.plan.base_lr if self.host.plan is not None else None)
                grid = f"optim.lr={lr:g},{2 * lr:g}" if lr else ""  # the lr the preset (or its policy) trains at
                self.host.app.push_screen(AskGrid(self.host.preset.name, grid), asked)

        self.ask_trust("Sweeping it", ask)

    def start_sweep(self, words: str, seeds_text: str) -> None:
        """The dialog's text as `gpuwizard sweep` reads --set and --seeds; every mistake in it listed at once."""
        import shlex

        from gpuwizard.core.errors import UserError, problem
        from gpuwizard.model.sweep import parse_sets

        problems: list[Problem] = []
        grid: dict[str, list[object]] = {}
        try:
            grid = parse_sets([w for w in shlex.split(words) if w != "--set"])
        except ValueError:
            problems.append(problem("--set", "has a quote it does not close", "close the quote", value=words))
        except UserError as exc:
            problems += exc.problems
        seeds = int(seeds_text) if seeds_text.strip().isdigit() else None
        if seeds_text.strip() and not seeds:
            fix = "give a whole number such as 2, or leave it empty"
            problems.append(problem("--seeds", "expects a whole number of 1 or more", fix, value=seeds_text))
        if problems:
            self.host.post_message(SweepStarted(None, problems))
        elif self.host.preset is not None:
            source = self.host.source_file or self.host.preset.name
            self.in_worker(self.create_sweep, self.host.preset, source, grid, seeds)

    def in_worker(self, work: Callable[..., None], *args: Any) -> None:
        """A launch or a sweep off the event loop, one at a time; what it finds comes back as messages."""
        self.host.run_worker(partial(work, *args), group="launch", exit_on_error=False, exclusive=True, thread=True)

    def create_sweep(self, preset: Preset, source: str, grid: dict[str, list[object]], seeds: int | None) -> None:
        """runner/sweep.create_sweep off the event loop: it plans every run and detaches the scheduler."""
        import os

        from gpuwizard.core.errors import UserError
        from gpuwizard.runner.sweep.manage import create_sweep
        from gpuwizard.runs.sweeps import sweeps_dir

        self.host.post_message(LaunchPhase("planning every run of the sweep and starting its scheduler"))
        try:
            made = create_sweep(preset, source, grid, seeds, "final_loss", os.getcwd())
        except UserError as exc:
            self.host.post_message(SweepStarted(None, exc.problems))
            return
        self.host.post_message(SweepStarted(sweeps_dir() / made.sweep_id))

    def sweep_started(self, message: SweepStarted) -> None:
        if message.folder is None:
            from gpuwizard.tui.wizard.problems import ProblemsScreen

            found = len(message.problems)
            title = f"No sweep started: its grid has {found} problem{'s' if found > 1 else ''}"
            self.host.app.push_screen(ProblemsScreen(title, message.problems))
        else:
            self.host.post_message(OpenSweep(message.folder))  # the app opens it (tui/app.py)

    def launch(self, preset: Preset, smoke: bool, inventory: Inventory | None) -> None:
        """Check and start the run off the event loop. Quitting the app meanwhile cancels the worker: the start is
        then undone wherever it is (nothing left running, the run recorded as stopped, or no run folder at all), and
        the command line says so once the app is gone (LAUNCHES)."""
        from textual.worker import get_current_worker

        from gpuwizard.core.errors import UserError
        from gpuwizard.runner.host.interrupt import StartCancelled
        from gpuwizard.runner.launch.prepare import prepare_run
        from gpuwizard.runner.launch.start import start_run

        cancelled = get_current_worker().cancelled_event.is_set
        checking = "checking the plan, the disks and the command with the trainer's own parser"
        try:
            self.host.post_message(LaunchPhase(checking))
            prepared = prepare_run(preset, smoke=smoke, inventory=inventory)
            if cancelled():
                LAUNCHES.append(f"the launch of {preset.name} was cancelled before anything was started")
                return
            self.host.post_message(LaunchPhase("starting the job under its supervisor"))
            run = start_run(prepared, on_hang="report", cancelled=cancelled)
        except UserError as exc:
            self.host.post_message(RunStarted(None, exc.paragraph(), [], exc.problems))
            return
        except StartCancelled as exc:
            done = f"run {exc.recorded.run_id} is recorded as stopped" if exc.recorded else "nothing was started"
            LAUNCHES.append(f"the launch of {preset.name} was cancelled: {done}, and nothing of it runs")
            return
        if cancelled():  # started just as the app went: it runs on, like any run whose monitor was closed
            LAUNCHES.append(
                f"run {run.run_id} started as the app closed and keeps running; `gpuwizard attach {run.run_id}` to "
                "watch it, `gpuwizard stop` to stop it"
            )
        self.host.post_message(RunStarted(run.path, None, [w.paragraph() for w in prepared.warnings]))

    def run_started(self, message: RunStarted) -> None:
        if message.run_path is None:
            from gpuwizard.tui.wizard.problems import ProblemsScreen

            found = len(message.problems)
            title = f"Not started: the checks before launch found {found} problem{'s' if found > 1 else ''}"
            self.host.app.push_screen(ProblemsScreen(title, message.problems))
            return
        for warning in message.warnings:
            self.host.notify(warning, severity="warning", timeout=8, markup=False)
        from gpuwizard.runs.rundir import RunDir

        self.host.app.open_monitor(RunDir(message.run_path))
