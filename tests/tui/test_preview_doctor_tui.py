"""The wizard's Preview shows the preflight (issue 36): a background worker asks `doctor` about the environment the
previewed command will run in and fills its line; an edited command is asked again."""

from __future__ import annotations

from gpuwizard.model.preset_files import load_preset
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.wizard.screen import STEPS
from support.presets import demo_preset
from support.tui import goto, text_of, type_into, wait_until

PREVIEW = len(STEPS) - 1
TRAINER = [name for name, _ in STEPS].index("trainer")


async def test_the_preview_shows_the_preflight_and_asks_again_for_an_edited_command():
    demo_preset("doctored", "optim: {lr: 1.0e-3, steps: 120}")
    app = GpuWizardApp(preset=load_preset("doctored"))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, app, PREVIEW)
        line = lambda: text_of(app.screen.query_one("#doctor"))  # noqa: E731
        assert await wait_until(pilot, lambda: line() == "doctor: ready", 180), line()
        first = app.screen.query_one("#doctor").asked
        await goto(pilot, app, TRAINER)
        await type_into(pilot, "#f-launch-extra-args", "--log-every=7")
        await goto(pilot, app, PREVIEW)
        assert await wait_until(pilot, lambda: app.screen.query_one("#doctor").asked not in (None, first), 60)
        assert await wait_until(pilot, lambda: line() == "doctor: ready", 180), line()
