"""The wizard's summary: the plan in one line, then whether it will start here; or the fields whose text the preset
does not take. Whatever is cut here, ctrl+r lists whole."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.content import Content

if TYPE_CHECKING:
    from gpuwizard.core.errors import Problem
    from gpuwizard.model.job import Plan

LISTS_WHY = " · ctrl+r lists why"


def summary_content(plan: Plan, blockers: list[Problem] | None, width: int) -> Content:
    """Under the plan's line: its first error (two lines at most at `width`; ctrl+r lists them all whole), what stops
    it from starting on this machine (one), or ready: it will start here. `blockers` is None while the machine is not
    yet known."""
    line = plan_line(plan)
    if plan.errors:
        more = len(plan.errors) - 1
        error = Content.assemble(
            (f" {len(plan.errors)} error(s) ", "bold reverse $error"), (" " + said(plan.errors[0], fix=False), "$error")
        )
        tail = f" ({more} more: ctrl+r lists them)" if more else ""
        return Content("\n").join([line.truncate(width, ellipsis=True), fit(error, tail, width, 2)])
    if blockers:
        blocker = Content.assemble(
            (" cannot start here ", "bold reverse $warning"), (" " + said(blockers[0]), "$warning")
        )
        return Content("\n").join([line.truncate(width, ellipsis=True), fit(blocker, LISTS_WHY, width, 1)])
    elif blockers is None:
        state = [(" checking this machine... ", "reverse $text-muted")]
    else:
        state = [(" ready ", "bold reverse $success")] + (
            [(f" {len(plan.warnings)} warning(s): see Preview", "$warning")] if plan.warnings else []
        )
    return Content.assemble(line, " ", *state)


def said(first: Problem, fix: bool = True) -> str:
    """A problem's paragraph for a status line: a long value (a path) left to its field on screen, where it cut the
    words of what is wrong ('cannot start here dataset.root =…'); without its fix (ctrl+r lists it) where a whole
    paragraph took four lines at 80 columns and pushed the Policy step's dataset below the fold."""
    from dataclasses import replace

    from gpuwizard.core.errors import show_value

    shown = replace(first, has_value=False) if first.has_value and len(show_value(first.value)) > 20 else first
    return (shown if fix else replace(shown, fix=None)).paragraph()


def launching_content(what: str, elapsed_s: float, width: int) -> Content:
    """The launch after ctrl+r, what it is doing and for how long, in two lines at most."""
    text = Content.assemble((" launching ", "bold reverse $accent"), (f" {what}... {elapsed_s:.0f} s", "$accent"))
    return fit(text, " · ctrl+q cancels it", width, 2)


def invalid_content(fields: int, first: Problem, width: int) -> Content:
    """How many fields hold text the preset does not take, and the first of them, in two lines at most."""
    badge = f" {fields} field{'s' if fields > 1 else ''} invalid "
    return fit(
        Content.assemble((badge, "bold reverse $error"), (" " + first.paragraph(), "$error")), LISTS_WHY, width, 2
    )


def plan_line(plan: Plan) -> Content:
    return Content(
        f"{plan.policy} · {plan.trainer} · {plan.world_size}x{plan.device} · per device "
        f"{plan.per_device_batch} · effective {plan.effective_batch} · "
        f"lr {plan.lr:.3g} · {plan.steps} updates"
        + (f" ({plan.trainer_steps} trainer steps)" if plan.trainer_steps != plan.steps else "")
        + (f" · {plan.samples_seen} samples" if plan.samples_seen else "")
        + f" · {plan.strategy}"
    )


def fit(content: Content, tail: str, width: int, lines: int) -> Content:
    """`content` then `tail` in at most `lines` lines of `width` cells, the content cut (…) where it does not fit."""
    whole = content + tail
    if len(whole.wrap(width)) <= lines:
        return whole
    kept = content.wrap(width)[:lines]
    room = width - len(tail) - 1
    last = kept[-1].rstrip()
    if last.cell_length > room:
        space = last.plain.rfind(" ", 0, room + 1)
        last = last.truncate(space if space > room // 2 else room).rstrip()  # a whole word where one ends near
    kept[-1] = last + "…" + tail
    return Content("\n").join(kept)
