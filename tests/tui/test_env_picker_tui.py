"""F6 on the Trainer step lists the training environments found on this machine, those with the preset's trainer
first, and puts the chosen interpreter into launch.python (driven with Pilot at 80x24)."""

from __future__ import annotations

from gpuwizard.model.preset_files import load_preset
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.dialogs.envpicker import EnvPicker
from gpuwizard.tui.widgets.fields import FieldInput
from support.trainers import metadata_venv
from support.tui import goto, key_bar_fits, settle, text_of, wait_until


async def test_f6_picks_the_training_interpreter_from_the_environments_found(tmp_path, monkeypatch):
    home = tmp_path / "home"
    wanted = metadata_venv(home / ".venvs" / "train", {"gpuwizard": "0.1.0", "torch": "2.13.0"})
    metadata_venv(home / ".venvs" / "plain", {})
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GPUWIZARD_ENV_CACHE", str(tmp_path / "no-cache"))
    monkeypatch.chdir(tmp_path)
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await goto(pilot, app, 2)
        app.screen.query_one("#f-batch-size").focus()
        await pilot.pause()
        assert "f6" in key_bar_fits(app.screen)
        await pilot.press("f6")
        assert await wait_until(pilot, lambda: isinstance(app.screen, EnvPicker) and app.screen.pythons, 60)
        picker = app.screen
        assert picker.pythons[0] == str(wanted), "the environment with the trainer comes first"
        assert "1 with demo" in text_of(picker.query_one("#env-note"))
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: not isinstance(app.screen, EnvPicker), 10)
        await settle(pilot, app)
        assert app.screen.query_one("#f-launch-python", FieldInput).value == str(wanted)
        assert app.screen.preset.launch.python == str(wanted)
