"""The wizard's refusal of more CPU processes than cores at 80x24 (issue 25): its one paragraph is listed once, not
once as the plan's error and again as what stops it on this machine."""

from __future__ import annotations

import os

from gpuwizard.model.preset_files import load_preset
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.wizard.problems import ProblemsScreen
from support.presets import demo_preset
from support.tui import SIZE, settle, text_of, wait_until


async def test_too_many_cpu_processes_are_refused_in_one_paragraph():
    cores = os.cpu_count() or 1
    demo_preset("too-many", hardware=f"{{gpus: {cores * 2}, device: cpu}}")
    app = GpuWizardApp(preset=load_preset("too-many"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+r")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ProblemsScreen), 30), "ctrl+r lists why"
        listed = " ".join(text_of(app.screen.query_one("#problems-list")).split())
        said = f"hardware.gpus = {cores * 2}: a CPU run starts one process per GPU slot, and this machine has {cores}"
        assert listed.count(said) == 1, listed
        assert listed.startswith(f"1. {said}") and "2. " not in listed, listed
