"""The wizard's two status lines: the steps with the open preset (marked while edits are unsaved), and the summary
of the plan, of what stops it here, or of the launch under way; and what the plan already knows the launch would
refuse."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol, TypeVar

from textual.content import Content
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Static

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpuwizard.core.errors import Problem
    from gpuwizard.model.job import BuildContext, Plan
    from gpuwizard.model.preset import Preset

W = TypeVar("W", bound=Widget)
STEPS = [
    ("gpus", "GPUs"),
    ("policy", "Policy & data"),
    ("trainer", "Trainer & batch"),
    ("scaling", "Scaling"),
    ("preview", "Preview"),
]


def known_refusals(ctx: BuildContext) -> list[Problem]:
    """What the launch would refuse that the plan already knows (the trainer's own preflight refusals, a local
    dataset folder that is not there), so the status says `cannot start` before ctrl+r, not `ready`."""
    if ctx.plan.errors or ctx.preset.launch.scheduler != "local":
        return []
    from gpuwizard.core.kinds import ProblemLevel
    from gpuwizard.planning.checks import missing_dataset
    from gpuwizard.trainers.registry import get_trainer

    trainer = get_trainer(ctx.preset.trainer)
    refused = [p for p in trainer.preflight(ctx) if p.level == ProblemLevel.ERROR]
    return refused + missing_dataset(ctx.preset, trainer, ctx.workdir)


class LinesHost(Protocol):
    """The wizard screen, as its status lines see it: what they draw, and where."""

    @property
    def preset(self) -> Preset | None: ...
    @property
    def plan(self) -> Plan | None: ...
    @property
    def blockers(self) -> list[Problem] | None: ...
    @property
    def step(self) -> int: ...

    def unsaved(self) -> bool: ...
    def invalid_fields(self) -> dict[str, list[Problem]]: ...
    def query_one(self, selector: str, expect_type: type[W]) -> W: ...
    def set_interval(self, interval: float, callback: Callable[[], object]) -> Timer: ...


class WizardLines:
    """The wizard's step line and summary line, and the launch under way that the summary shows while it lasts."""

    def __init__(self, host: LinesHost):
        self.host = host
        self.launching: tuple[str, float] | None = None
        """What the launch after ctrl+r is doing and since when (monotonic), until the monitor or a refusal shows."""
        self.launch_timer: Timer | None = None

    def launch_phase(self, what: str) -> None:
        """The launch says what it is doing now: the summary shows it, with the time since the launch began."""
        since = self.launching[1] if self.launching else time.monotonic()
        self.launching = (what, since)
        if self.launch_timer is None:
            self.launch_timer = self.host.set_interval(1.0, self.refresh_summary)
        self.refresh_summary()

    def launch_ended(self) -> None:
        """The monitor or the refusal is on screen: the summary is the plan's again."""
        self.launching = None
        if self.launch_timer is not None:
            self.launch_timer.stop()
            self.launch_timer = None
        self.refresh_summary()

    def refresh_summary(self) -> None:
        from gpuwizard.tui.wizard.summary import invalid_content, launching_content, summary_content

        host = self.host
        summary = host.query_one("#summary", Static)
        width = summary.content_region.width or 78  # before the first layout: 80 columns
        invalid = host.invalid_fields()
        if self.launching is not None:
            what, since = self.launching
            summary.update(launching_content(what, time.monotonic() - since, width))
        elif invalid:
            summary.update(invalid_content(len(invalid), list(invalid.values())[-1][0], width))
        elif host.plan is None:
            summary.update("Planning...")
        else:
            summary.update(summary_content(host.plan, host.blockers, width))

    def preset_label(self) -> str:
        """The open preset's name for the step line, marked while it has unsaved edits."""
        preset = self.host.preset
        if preset is None:
            return ""
        name = preset.name if len(preset.name) <= 24 else preset.name[:23] + "…"
        return f"  {name}{' (edited)' if self.host.unsaved() else ''}"

    def draw_crumbs(self) -> None:
        """The steps, the current one named, then the open preset; where all names do not fit, the other steps
        show their short name (the words before "&"), and where those do not fit either, their number only."""
        crumbs, step = self.host.query_one("#steps", Static), self.host.step
        label = self.preset_label()
        room = (crumbs.size.width or 80) - 2 - len(label) - (len(STEPS) - 1)  # the '>'s and the preset
        short = [title.split(" &")[0] for _, title in STEPS]
        names = [title if i == step else "" for i, (_, title) in enumerate(STEPS)]
        for others in ([t for _, t in STEPS], short):
            if sum(len(t) + 4 for t in others) - len(others[step]) + len(STEPS[step][1]) <= room:
                names = [STEPS[step][1] if i == step else t for i, t in enumerate(others)]
                break
        parts: list[tuple[str, str]] = []
        for i, name in enumerate(names):
            parts.append(
                (f" {i + 1} {name} " if name else f" {i + 1} ", "bold reverse $accent" if i == step else "$text-muted")
            )
            if i < len(STEPS) - 1:
                parts.append((">", "$text-muted"))
        parts.append((label, "bold $warning" if self.host.unsaved() else "$text-muted"))
        crumbs.update(Content.assemble(*parts))
