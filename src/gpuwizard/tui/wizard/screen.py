"""The wizard: five steps over one Preset model, with a live plan and the exact command.

The first frame is a light shell (step names, footer); the core (preset records, catalog,
trainers) is imported and the preset loaded right after it, and each step is built when first shown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import ContentSwitcher, Static

from gpuwizard.tui.base.messages import InventoryReady, LaunchPhase, PlanReady, PresetLoaded, RunStarted, SweepStarted
from gpuwizard.tui.widgets.fields import Edit, FieldReset, InvalidInput, KeyBar, Step
from gpuwizard.tui.wizard.actions import WizardActions
from gpuwizard.tui.wizard.edits import PresetEditor
from gpuwizard.tui.wizard.invalid import InvalidFields
from gpuwizard.tui.wizard.lines import STEPS, WizardLines, known_refusals

if TYPE_CHECKING:
    from pathlib import Path

    from textual import getters
    from textual.widget import AwaitMount

    from gpuwizard.core.errors import Problem
    from gpuwizard.gpus.inventory import Inventory
    from gpuwizard.model.job import BuildContext, LaunchSpec, Plan
    from gpuwizard.model.preset import Preset
    from gpuwizard.tui.base.apphost import AppHost

StepT = TypeVar("StepT", bound=Step)
REPLAN_DELAY_S = 0.12


class WizardScreen(Screen[None]):
    """Steps, a live plan summary, the main keys in the footer (`?` lists them all); its status lines and what its
    keys do are parts it holds (`lines`, `actions`)."""

    if TYPE_CHECKING:
        app = getters.app(AppHost)  # gpuwizard's app, beyond Textual's (tui/base/apphost.py)

    HELP = (
        "Five steps over one preset: ctrl+n and escape move between them, Tab between fields. In the policy list "
        "enter chooses a policy (moving the cursor only describes it). The line above the keys is the plan and "
        "whether it will start here; ctrl+r lists the errors that stop it. On the Scaling step F5 probes: short "
        "real runs measure samples/s and memory per GPU count and batch, and the estimates then use them. There and "
        "on the Preview step F6 starts a sweep: one run of the preset per combination of the values you give."
    )
    BINDINGS = [
        Binding("ctrl+n", "next", "Next", priority=True),
        Binding("escape", "back", "Back"),
        Binding("ctrl+r", "run", "Run", priority=True),
        Binding("ctrl+s", "save", "Save", priority=True),
        Binding("ctrl+o", "open", "Open", priority=True),
        Binding("ctrl+y", "copy", "Copy", priority=True),
        Binding("ctrl+e", "export", "Export", priority=True),
        Binding("ctrl+g", "smoke", "Smoke run", show=False, priority=True),
        Binding("f5", "probe", "Probe", priority=True),
        Binding("f6", "sweep", "Sweep", priority=True),
    ]
    step = reactive(0, bindings=True)

    def __init__(self, preset: Preset | str | None = None, exit_on_error: bool = False):
        super().__init__()
        self.source = preset if preset is not None else "demo-cpu"
        self.exit_on_error = exit_on_error
        self.preset: Preset | None = None
        self.inventory: Inventory | None = None
        self.plan: Plan | None = None
        self.planned: Preset | None = None
        """The preset that self.plan was made from."""
        self.ctx: BuildContext | None = None
        self.spec: LaunchSpec | None = None
        self.blockers: list[Problem] | None = None
        """What stops the plan from starting on this machine (None until the machine is known)."""
        self.plan_seq = 0
        self.replan_timer: Timer | None = None
        self.editor = PresetEditor()
        self.saved: Preset | None = None
        """The preset as it was opened or last saved: the wizard's state differs from it while edits are unsaved."""
        self.trust_pending = False
        """A preset read from a file: whether it may run its code is asked once its first step is built."""
        self.source_file: str | None = None
        """The file the preset was read from, for the trust question."""
        self.lines = WizardLines(self)
        self.invalid = InvalidFields(self, self.lines.refresh_summary)
        self.actions = WizardActions(self)

    def compose(self) -> ComposeResult:
        yield Static("", id="steps")
        with ContentSwitcher(initial="step-gpus", id="switcher"):
            for name, _ in STEPS:
                yield Vertical(id=f"step-{name}", classes="step-slot")
        yield Static("Loading the preset...", id="summary")
        yield KeyBar()

    def on_mount(self) -> None:
        self.lines.draw_crumbs()
        self.call_after_refresh(self.load_preset)  # a loading thread would compete with the first frame for the GIL

    # -- loading: off the event loop, so the first frame reaches the terminal at once -----------
    @work(thread=True, group="load", exit_on_error=False)
    def load_preset(self) -> None:
        from gpuwizard.core.errors import UserError
        from gpuwizard.model.preset_files import find_preset, load_preset_file

        if not isinstance(self.source, str):
            self.post_message(PresetLoaded(self.source, None))
            return
        try:
            path = find_preset(self.source)
            preset = load_preset_file(path)
        except UserError as exc:
            self.post_message(PresetLoaded(None, exc.paragraph()))
            return
        self.post_message(PresetLoaded(preset, None, str(path)))

    @on(PresetLoaded)
    def _loaded(self, message: PresetLoaded) -> None:
        if message.error:
            if self.exit_on_error:
                self.app.exit_error = message.error
                self.app.exit(return_code=2)
            else:
                self.notify(message.error, severity="error", timeout=10, markup=False)
            return
        self.preset = self.saved = message.preset
        self.source_file = message.source
        self.show_step(self.step)
        self.lines.draw_crumbs()
        self.detect_gpus()
        self.replan()
        self.trust_pending = message.preset is not None and message.source is not None

    def slot(self, name: str) -> Vertical:
        return self.query_one(f"#step-{name}", Vertical)

    def built(self, name: str) -> Step | None:
        """The step widget once its children exist: a message handled between its mount and its compose (a plan,
        an inventory, an edit) leaves it to finish_build, which draws it from the state as it is then."""
        children = self.slot(name).children
        child = children[0] if children else None
        return child if isinstance(child, Step) and child.built else None

    def built_as(self, name: str, kind: type[StepT]) -> StepT | None:
        """The step widget if it has been built, as its own class (each step draws from its own arguments)."""
        widget = self.built(name)
        return widget if isinstance(widget, kind) else None

    def show_step(self, step: int) -> None:
        """Build the step on first visit, then draw it from the current plan."""
        from gpuwizard.tui.wizard.steps import STEP_CLASSES

        if self.preset is None:
            return  # shown once the preset is loaded
        name = STEPS[step][0]
        widget = self.built(name)
        if widget is None:
            if self.slot(name).children:
                return  # mounting: finish_build draws and focuses it
            widget = STEP_CLASSES[name](self.preset, id=f"{name}-step")
            self.call_later(self.finish_build, self.slot(name).mount(widget), widget)
        else:
            self.render_step()
            self.call_after_refresh(widget.focus_first)

    async def finish_build(self, mounted: AwaitMount, widget: Step) -> None:
        """Draw and focus a new step once its children exist (a refresh alone does not guarantee that)."""
        from gpuwizard.tui.wizard.steps import GpusStep

        await mounted
        widget.built = True
        if self.preset is not None and widget.preset != self.preset:  # edited while it was mounting
            widget.preset = self.preset
            widget.sync(self.preset)
        if isinstance(widget, GpusStep) and self.preset is not None and self.inventory is not None:
            widget.show(self.preset, self.inventory)
        self.render_step()
        if self.built(STEPS[self.step][0]) is widget:
            widget.focus_first()
        if self.trust_pending:  # asked over a step whose widgets all exist: a modal first leaves them half-built
            self.trust_pending = False
            self.call_after_refresh(self.actions.ask_trust, "Planning and checking it", lambda: None)

    # -- background work: workers post messages, handlers own the state ------------------------
    @work(thread=True, group="inventory", exit_on_error=False)
    def detect_gpus(self) -> None:
        from gpuwizard.gpus.inventory import read_inventory

        self.post_message(InventoryReady(read_inventory()))

    def replan(self) -> None:
        """A plan of the preset as it is now: numbered here, on the event loop, and made off it (an older plan that
        comes back later is dropped by its number)."""
        if self.preset is None:
            return  # planned once the preset is loaded
        self.plan_seq += 1
        self.make_plan(self.plan_seq, self.preset, self.inventory)

    @work(thread=True, exclusive=True, group="plan", exit_on_error=False)
    def make_plan(self, seq: int, preset: Preset, inventory: Inventory | None) -> None:
        """The plan, the command and what stops it on this machine, from its inputs alone; posted, never stored."""
        from gpuwizard.planning.machine import machine_problems
        from gpuwizard.planning.plan import build_command, plan_here

        plan, ctx = plan_here(preset, inventory)
        blockers = None if inventory is None else machine_problems(preset, plan, inventory) + known_refusals(ctx)
        self.post_message(PlanReady(seq, preset, plan, ctx, None if plan.errors else build_command(ctx), blockers))

    def replan_soon(self) -> None:
        """Typing fast plans once, 120 ms after the last key."""
        if self.replan_timer is not None:
            self.replan_timer.stop()
        self.replan_timer = self.set_timer(REPLAN_DELAY_S, self.replan)

    @on(InventoryReady)
    def _inventory(self, message: InventoryReady) -> None:
        from gpuwizard.tui.wizard.steps import GpusStep

        self.inventory = message.inventory
        gpus = self.built_as("gpus", GpusStep)
        if gpus is not None and self.preset is not None:
            gpus.show(self.preset, self.inventory)
        self.replan()

    @on(PlanReady)
    def _plan(self, message: PlanReady) -> None:
        if message.seq != self.plan_seq:
            return
        had_command = self.spec is not None
        self.planned, self.plan, self.ctx = message.preset, message.plan, message.ctx
        self.spec, self.blockers = message.spec, message.blockers
        self.render_step()
        self.lines.refresh_summary()
        if had_command != (self.spec is not None):
            self.refresh_bindings()  # the footer is rebuilt only when Copy and Export turn on or off

    def render_step(self) -> None:
        """Only the visible step is redrawn; the others are drawn when entered (keeps typing fast)."""
        widget = self.built(STEPS[self.step][0])
        if widget is None or self.plan is None:
            return
        from gpuwizard.tui.wizard.job_steps import PreviewStep, ScalingStep, TrainerStep
        from gpuwizard.tui.wizard.steps import PolicyStep

        if isinstance(widget, PreviewStep):
            widget.show(self.plan, self.spec, self.ctx)
        elif isinstance(widget, PolicyStep | TrainerStep | ScalingStep) and self.preset is not None:
            widget.show(self.preset, self.plan)

    @on(Edit)
    async def _edit(self, message: Edit) -> None:
        from gpuwizard.core.errors import UserError

        message.stop()
        old = self.preset
        if old is None:
            return
        try:
            new, toast = self.editor.apply(old, message.path, message.value)
        except UserError as exc:
            self.invalid.mark(message.path, exc.problems)
            return
        if toast is not None:
            self.notify(toast.text, severity=toast.severity, markup=False)
        self.invalid.forget(message.path)
        from gpuwizard.model import trust

        if trust.is_trusted(old):  # the user's own edit to a trusted preset is theirs: no question for it
            trust.grant_for_session(new)
        self.preset = new
        if (new == self.saved) != (old == self.saved):
            self.lines.draw_crumbs()
        for name in ("gpus", "policy", "trainer", "scaling", "preview"):
            widget = self.built(name)
            if widget is not None:
                widget.preset = new
                widget.sync(new)
        from gpuwizard.tui.wizard.job_steps import TrainerStep
        from gpuwizard.tui.wizard.steps import GpusStep

        trainer_step = self.built_as("trainer", TrainerStep)
        if trainer_step is not None and (new.trainer != old.trainer or new.policy != old.policy):
            await trainer_step.rebuild_options(new)
            self.invalid.forget_options()
        gpus_step = self.built_as("gpus", GpusStep)
        if gpus_step is not None and new.hardware != old.hardware and self.inventory:
            gpus_step.show(new, self.inventory)
        self.replan_soon()

    @on(InvalidInput)
    def _invalid(self, message: InvalidInput) -> None:
        self.invalid.mark(message.path, [message.problem])

    @on(FieldReset)
    def _reset(self, message: FieldReset) -> None:
        self.invalid.forget(message.path)

    def invalid_fields(self) -> dict[str, list[Problem]]:
        """The invalid fields that count (invalid.InvalidFields.counting)."""
        return self.invalid.counting()

    @on(LaunchPhase)
    def _launch_phase(self, message: LaunchPhase) -> None:
        self.lines.launch_phase(message.what)

    @on(RunStarted)
    def _run_started(self, message: RunStarted) -> None:
        self.lines.launch_ended()
        self.actions.run_started(message)

    @on(SweepStarted)
    def _sweep_started(self, message: SweepStarted) -> None:
        self.lines.launch_ended()
        self.actions.sweep_started(message)

    def unsaved(self) -> bool:
        """The wizard's preset differs from the file it was opened from or last saved to."""
        return self.preset is not None and self.preset != self.saved

    def was_saved(self, preset: Preset, path: Path) -> None:
        """Saved (ctrl+s) as `preset` in `path`: the preset the wizard now edits, and compares its edits with."""
        self.preset = self.saved = preset
        self.source_file = str(path)
        self.lines.draw_crumbs()
        self.replan()  # the name is in the default output folder

    # -- steps ---------------------------------------------------------------------------------
    def on_resize(self) -> None:
        self.lines.draw_crumbs()
        self.call_after_refresh(self.lines.refresh_summary)  # the summary is cut to its new width

    def watch_step(self, step: int) -> None:
        if not self.is_mounted:
            return
        self.query_one("#switcher", ContentSwitcher).current = f"step-{STEPS[step][0]}"
        self.lines.draw_crumbs()
        if self.preset is not None:
            self.show_step(step)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "next":
            return self.step < len(STEPS) - 1
        if action == "back":
            return self.step > 0
        if action == "probe":
            return STEPS[self.step][0] == "scaling"
        if action == "sweep":
            return STEPS[self.step][0] in ("scaling", "preview")
        if action in ("copy", "export"):
            return None if self.step == len(STEPS) - 1 and self.spec is None else self.step == len(STEPS) - 1
        return True  # run and smoke always answer: with errors they list them

    def action_next(self) -> None:
        self.step = min(self.step + 1, len(STEPS) - 1)

    def action_back(self) -> None:
        self.step = max(self.step - 1, 0)

    def action_goto(self, step: int) -> None:
        self.step = step

    def action_run(self) -> None:
        self.actions.run()

    def action_smoke(self) -> None:
        self.actions.run(smoke=True)

    def action_probe(self) -> None:
        self.actions.probe()

    def action_sweep(self) -> None:
        self.actions.sweep()

    def action_save(self) -> None:
        self.actions.save()

    def action_copy(self) -> None:
        self.actions.copy()

    def action_export(self) -> None:
        self.actions.export()

    def action_open(self) -> None:
        self.actions.open()

    async def reopen(self, preset: Preset) -> None:
        """Another preset opened: a wizard of its own in this one's place."""
        await self.app.switch_screen(WizardScreen(preset))
