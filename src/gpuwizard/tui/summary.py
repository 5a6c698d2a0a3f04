"""The wizard's summary: the plan in one line, then whether it will start here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.content import Content

if TYPE_CHECKING:
    from gpuwizard.contracts import Plan
    from gpuwizard.errors import Problem


def summary_content(plan: Plan, blockers: list[Problem] | None) -> Content:
    """The first error whole (ctrl+r lists them all), what stops the plan from starting on this machine, or ready:
    it will start here. `blockers` is None while the machine is not yet known."""
    if plan.errors:
        more = len(plan.errors) - 1
        state = [
            (f" {len(plan.errors)} error(s) ", "bold reverse $error"),
            (" " + plan.errors[0].paragraph(), "$error"),
            (f" ({more} more: ctrl+r lists them)" if more else "", "$error"),
        ]
    elif blockers:
        state = [(" cannot start here ", "bold reverse $warning"), (" " + blockers[0].paragraph(), "$warning")]
    elif blockers is None:
        state = [(" checking this machine... ", "reverse $text-muted")]
    else:
        state = [(" ready ", "bold reverse $success")] + (
            [(f" {len(plan.warnings)} warning(s): see Preview", "$warning")] if plan.warnings else []
        )
    return Content.assemble(
        f"{plan.policy} · {plan.trainer} · {plan.world_size}x{plan.device} · per device "
        f"{plan.per_device_batch} · effective {plan.effective_batch} · "
        f"lr {plan.lr:.3g} · {plan.steps} updates"
        + (f" ({plan.trainer_steps} trainer steps)" if plan.trainer_steps != plan.steps else "")
        + (f" · {plan.samples_seen} samples" if plan.samples_seen else "")
        + f" · {plan.strategy} ",
        *state,
    )
