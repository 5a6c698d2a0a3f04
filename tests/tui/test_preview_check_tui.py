"""The wizard's preview asks the installed trainer (issue 18): a background worker fills the trainer-check line
with the real demo parser's answer (gpuwizard/demo/train.py's argparse, in the training interpreter), and each
edited command is asked again, a refusal quoting the parser's own message."""

from __future__ import annotations

from gpuwizard.model.preset_files import load_preset
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.wizard.screen import STEPS
from support.presets import demo_preset
from support.tui import goto, text_of, type_into, wait_until

PREVIEW = len(STEPS) - 1
TRAINER = [name for name, _ in STEPS].index("trainer")


async def test_the_preview_line_says_what_the_trainers_own_parser_read_and_follows_each_edit():
    demo_preset("checked", "optim: {lr: 1.0e-3, steps: 120}")
    app = GpuWizardApp(preset=load_preset("checked"))
    async with app.run_test(size=(80, 24)) as pilot:
        await goto(pilot, app, PREVIEW)
        line = lambda: text_of(app.screen.query_one("#trainer-check"))  # noqa: E731
        assert await wait_until(pilot, lambda: "as planned" in line(), 180), line()
        assert line().startswith("trainer check: accepted by gpuwizard.demo.train's own parser:")
        assert "120 steps" in line()
        await goto(pilot, app, TRAINER)
        await type_into(pilot, "#f-launch-extra-args", "--no-such-flag")
        await goto(pilot, app, PREVIEW)
        assert await wait_until(pilot, lambda: "refused" in line(), 180), line()
        assert "refused by gpuwizard.demo.train's own parser" in line()
        assert "train.py: error: unrecognized arguments: --no-such-flag" in line(), line()
