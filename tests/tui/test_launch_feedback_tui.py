"""After ctrl+r the wizard says what it is doing, with its elapsed time, until the monitor or a refusal appears; the
Preview's trainer-check line counts its seconds too; a refusal the plan already knows (an output folder LeRobot
would refuse) makes the status `cannot start here`, not `ready` (issue 25, item 5). Pilot at 80x24."""

from __future__ import annotations

import re

from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.monitor.screen import MonitorScreen
from gpuwizard.tui.wizard.screen import STEPS
from support.presets import demo_preset, user_preset
from support.trainers import fake_env
from support.tui import SIZE, goto, settle, text_of, wait_until

PREVIEW = len(STEPS) - 1


async def test_ctrl_r_says_what_the_launch_is_doing_until_the_monitor_shows():
    demo_preset("feedback", "optim: {steps: 40}", hardware="{gpus: 1, device: cpu}")
    app = GpuWizardApp(preset="feedback")
    seen: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        summary = app.screen.query_one("#summary")
        await pilot.press("ctrl+r")

        def launching() -> bool:
            text = text_of(summary) if app.screen.is_current and not isinstance(app.screen, MonitorScreen) else ""
            if "launching" in text:
                seen.append(text)
            return isinstance(app.screen, MonitorScreen)

        assert await wait_until(pilot, launching, 180), "the monitor never showed"
    assert seen, "nothing was said between ctrl+r and the monitor"
    assert re.search(r"launching .*\.\.\. \d+ s", seen[0]), seen[0]


async def test_the_trainer_check_line_counts_its_seconds():
    demo_preset("counted", "optim: {steps: 40}", hardware="{gpus: 1, device: cpu}")
    app = GpuWizardApp(preset="counted")
    async with app.run_test(size=SIZE) as pilot:
        await goto(pilot, app, PREVIEW)
        line = lambda: text_of(app.screen.query_one("#trainer-check"))  # noqa: E731
        assert await wait_until(pilot, lambda: "as planned" in line(), 180), line()
        step = app.screen.built("preview")
        assert step is not None and step.shown is not None
        step.checked = None  # the same command asked again, as after an edit
        step.ask_trainer(step.shown[1], step.shown[2])
        said = line()
        assert re.fullmatch(r"trainer check: asking the installed trainer's own parser\.\.\. \d+ s", said), said
        assert await wait_until(pilot, lambda: "as planned" in line(), 180), line()


async def test_a_refusal_the_plan_already_knows_is_not_ready(tmp_path):
    """An output folder LeRobot refuses is a plan error; a local dataset folder that is not there is what the launch
    refuses on this machine: neither reads `ready`."""
    python = fake_env(tmp_path / "env", "0.6.1", parallelism=False)
    out = tmp_path / "out"
    out.mkdir()
    text = (
        "name: NAME\ntrainer: lerobot\npolicy: act\ndataset: DATASET\nhardware: {gpus: 1, device: cpu}\n"
        f"optim: {{steps: 20}}\nlaunch: {{python: {python}}}\n"
    )
    user_preset(
        "taken", text.replace("NAME", "taken").replace("DATASET", "{repo_id: lerobot/pusht}") + f"output_dir: {out}\n"
    )
    missing = "{repo_id: lerobot/pusht, root: /nonexistent/gpuwizard-dataset}"
    user_preset("nodata", text.replace("NAME", "nodata").replace("DATASET", missing))
    for name, said in (("taken", "1 error(s)"), ("nodata", "cannot start here")):
        app = GpuWizardApp(preset=name)
        async with app.run_test(size=SIZE) as pilot:

            def summary(app: GpuWizardApp = app) -> str:
                return text_of(app.screen.query_one("#summary"))

            assert await wait_until(pilot, lambda said=said: said in summary(), 120), summary()
            assert " ready " not in summary()
