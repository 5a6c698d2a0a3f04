"""The wizard's two status lines: the steps with the open preset (marked while edits are unsaved), and the summary
of the plan, of what stops it here, or of the launch under way; and what the plan already knows the launch would
refuse."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from textual.content import Content
from textual.timer import Timer
from textual.widgets import Static

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpuwizard.core.errors import Problem
    from gpuwizard.model.job import BuildContext, Plan
    from gpuwizard.model.preset import Preset

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
    from gpuwizard.planning.checks import missing_dataset
    from gpuwizard.trainers.registry import get_trainer

    trainer = get_trainer(ctx.preset.trainer)
    refused = [p for p in trainer.preflight(ctx) if p.level == "error"]
    return refused + missing_dataset(ctx.preset, trainer, ctx.workdir)


class WizardLines:
    """Mixed into the wizard screen, whose preset, plan, step and launch state it draws."""

    preset: Preset | None
    saved: Preset | None
    plan: Plan | None
    blockers: list[Problem] | None
    step: int
    launching: tuple[str, float] | None
    launch_timer: Timer | None
    query_one: Callable[..., Any]
    invalid_fields: Callable[[], dict[str, list[Problem]]]

    def launch_ended(self) -> None:
        """The monitor or the refusal is on screen: the summary is the plan's again."""
        self.launching = None
        if self.launch_timer is not None:
            self.launch_timer.stop()
            self.launch_timer = None
        self.refresh_summary()

    def refresh_summary(self) -> None:
        from gpuwizard.tui.wizard.summary import invalid_content, launching_content, summary_content

        summary = self.query_one("#summary", Static)
        width = summary.content_region.width or 78  # before the first layout: 80 columns
        invalid = self.invalid_fields()
        if self.launching is not None:
            what, since = self.launching
            summary.update(launching_content(what, time.monotonic() - since, width))
        elif invalid:
            summary.update(invalid_content(len(invalid), list(invalid.values())[-1][0], width))
        elif self.plan is None:
            summary.update("Planning...")
        else:
            summary.update(summary_content(self.plan, self.blockers, width))

    def unsaved(self) -> bool:
        """The wizard's preset differs from the file it was opened from or last saved to."""
        return self.preset is not None and self.preset != self.saved

    def preset_label(self) -> str:
        """The open preset's name for the step line, marked while it has unsaved edits."""
        if self.preset is None:
            return ""
        name = self.preset.name if len(self.preset.name) <= 24 else self.preset.name[:23] + "…"
        return f"  {name}{' (edited)' if self.unsaved() else ''}"

    def draw_crumbs(self) -> None:
        """The steps, the current one named, then the open preset; where all names do not fit, the other steps
        show their number only."""
        crumbs = self.query_one("#steps", Static)
        label = self.preset_label()
        full = sum(len(title) + 4 for _, title in STEPS) + len(STEPS) - 1 + len(label)  # names, '>'s, preset
        fits = full <= (crumbs.size.width or 80) - 2
        parts: list[tuple[str, str]] = []
        for i, (_, title) in enumerate(STEPS):
            name = f" {i + 1} {title} " if fits or i == self.step else f" {i + 1} "
            parts.append((name, "bold reverse $accent" if i == self.step else "$text-muted"))
            if i < len(STEPS) - 1:
                parts.append((">", "$text-muted"))
        parts.append((label, "bold $warning" if self.unsaved() else "$text-muted"))
        crumbs.update(Content.assemble(*parts))
