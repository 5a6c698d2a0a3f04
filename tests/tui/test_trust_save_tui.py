"""ctrl+s of a preset the user did not write (issue 40 item 4): a preset in the user's folder runs its code without
a question, so saving one there asks the trust question first; "not now" saves nothing, a yes saves it."""

from __future__ import annotations

from gpuwizard.core import paths
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.dialogs.modals import SaveAs
from gpuwizard.tui.dialogs.trust import TrustQuestion
from support.presets import their_preset
from support.tui import settle, wait_until


async def test_ctrl_s_of_an_untrusted_preset_asks_before_it_goes_into_the_preset_folder(tmp_path):
    path, _, marker = their_preset(tmp_path)
    app = GpuWizardApp(preset=str(path))
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, TrustQuestion), 60)
        await pilot.press("n")
        await settle(pilot, app)

        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, TrustQuestion), 30), "ctrl+s asks first"
        await pilot.press("n")
        await settle(pilot, app)
        saved = paths.user_presets_dir() / "their-act.yaml"
        assert not isinstance(app.screen, SaveAs) and not saved.exists(), "saved without the user's yes"
        assert not marker.exists()

        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, TrustQuestion), 30)
        await pilot.press("y")
        assert await wait_until(pilot, lambda: isinstance(app.screen, SaveAs), 30), "a yes goes on to the name"
        await pilot.press("enter")
        assert await wait_until(pilot, saved.exists, 30)
