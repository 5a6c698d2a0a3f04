"""The wizard runs nothing from a preset it only opened (issue 29, item 1) and keeps unsaved edits (issue 25, item
8): `gpuwizard --preset FILE` for someone else's preset shows what it would run and asks, at 80x24; "not now" leaves
its interpreter unrun through the plan and the Preview's trainer check; ctrl+r asks again and a yes is remembered.
The step line names the open preset and marks unsaved edits; ctrl+o and ctrl+q ask before they lose them."""

from __future__ import annotations

import json

from gpuwizard.core import paths
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.dialogs.modals import Confirm
from gpuwizard.tui.dialogs.trust import TrustQuestion
from gpuwizard.tui.wizard.screen import STEPS
from support.presets import demo_preset, their_preset
from support.tui import goto, settle, text_of, type_into, wait_until

PREVIEW = len(STEPS) - 1


async def test_an_opened_preset_of_someone_else_runs_nothing_until_trusted(tmp_path):
    path, python, marker = their_preset(tmp_path)
    app = GpuWizardApp(preset=str(path))
    async with app.run_test(size=(80, 24)) as pilot:
        asked = lambda: isinstance(app.screen, TrustQuestion) and bool(app.screen.query(".trust-line"))  # noqa: E731
        assert await wait_until(pilot, asked, 60)
        shown = " ".join(text_of(w) for w in app.screen.query(".trust-line"))
        assert f"launch.python = {python}" in shown
        await pilot.press("n")
        await settle(pilot, app)
        await goto(pilot, app, PREVIEW)
        line = lambda: text_of(app.screen.query_one("#trainer-check"))  # noqa: E731
        assert await wait_until(pilot, lambda: "have not trusted" in line(), 60), line()
        assert not marker.exists(), "the plan or the trainer check ran the preset's interpreter"

        await pilot.press("ctrl+r")
        assert await wait_until(pilot, lambda: isinstance(app.screen, TrustQuestion), 30), "ctrl+r asks first"
        await pilot.press("y")
        assert await wait_until(pilot, lambda: marker.exists(), 120), "once trusted, its interpreter is asked"
        stored = json.loads((paths.config_dir() / "trusted.json").read_text())
        assert [entry["source"] for entry in stored.values()] == [str(path)]


async def test_unsaved_edits_are_named_and_asked_about_before_open_and_quit():
    demo_preset("mine", "optim: {lr: 1.0e-3, steps: 120}")
    app = GpuWizardApp(preset="mine")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        crumbs = lambda: text_of(app.screen.query_one("#steps"))  # noqa: E731
        assert "mine" in crumbs() and "edited" not in crumbs()
        await goto(pilot, app, [name for name, _ in STEPS].index("trainer"))
        await type_into(pilot, "#f-optim-lr", "2e-3")
        assert await wait_until(pilot, lambda: "mine (edited)" in crumbs(), 30), crumbs()
        assert len(crumbs()) <= 80

        await pilot.press("ctrl+o")
        assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 30), "ctrl+o asks first"
        assert "unsaved edits to mine" in text_of(app.screen.query_one(".dialog-title"))
        await pilot.press("n")
        await pilot.press("ctrl+q")
        assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 30), "ctrl+q asks first"
        assert "Quit and lose your unsaved edits to mine" in text_of(app.screen.query_one(".dialog-title"))
        await pilot.press("n")
        await pilot.pause()
        assert app.is_running and not isinstance(app.screen, Confirm)
        await pilot.press("ctrl+q")
        await pilot.press("y")
        assert await wait_until(pilot, lambda: not app.is_running, 30)


async def test_save_as_takes_a_description_and_leaves_the_originals_output_folder(tmp_path):
    """Save-as (issue 25, item 1): the copy gets the description typed beside its name and, under a new name, no
    fixed output_dir of the original's, so its runs never write where the original's do; the step line names it."""
    from gpuwizard.model.preset_files import load_preset_file, user_preset_files
    from gpuwizard.tui.dialogs.modals import SaveAs

    demo_preset("fixed", f"optim: {{steps: 40}}\noutput_dir: {tmp_path / 'fixed-out'}")
    app = GpuWizardApp(preset="fixed")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, SaveAs), 10)
        await pilot.press("ctrl+a", "ctrl+k", *"copy", "tab", "ctrl+a", "ctrl+k", *"my copy", "enter")
        assert await wait_until(pilot, lambda: "copy" in user_preset_files(), 10)
        saved = load_preset_file(user_preset_files()["copy"])
        assert (saved.description, saved.output_dir) == ("my copy", None)
        assert load_preset_file(user_preset_files()["fixed"]).output_dir == str(tmp_path / "fixed-out")
        assert await wait_until(pilot, lambda: "copy" in text_of(app.screen.query_one("#steps")), 10)
        assert "edited" not in text_of(app.screen.query_one("#steps"))
