"""The wizard's plan is numbered on the event loop and made off it from its inputs alone (issue 34 item 4): a replan
takes its number at once, the worker never writes the screen's state, and a plan that comes back after a newer one
was asked for is dropped by its number."""

from __future__ import annotations

import copy

from gpuwizard.model.preset_files import load_preset
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.base.messages import PlanReady
from gpuwizard.tui.wizard.screen import WizardScreen
from support.tui import SIZE, settle


async def test_a_replan_is_numbered_on_the_event_loop_and_an_older_plan_is_dropped():
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = app.screen
        assert isinstance(screen, WizardScreen) and screen.plan is not None and screen.ctx is not None
        seq, shown = screen.plan_seq, screen.plan
        screen.replan()
        screen.replan()
        assert screen.plan_seq == seq + 2, "numbered when asked for, not when a worker thread gets to it"
        await settle(pilot, app)
        assert screen.plan_seq == seq + 2, "the workers left the number alone"
        assert screen.plan is not shown, "the newest plan is shown"
        stale = copy.copy(screen.plan)
        screen.post_message(PlanReady(seq + 1, screen.preset, stale, screen.ctx, None, None))
        await settle(pilot, app)
        assert screen.plan is not stale and screen.spec is not None, "a plan older than the newest is dropped"
