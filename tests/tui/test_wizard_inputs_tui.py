"""What the wizard does with text a field does not take, driven with Pilot: no action uses values other than the
screen's, every invalid field is listed with the plan's errors, refusals found at launch are listed whole, and the
summary keeps to two lines where the plan cannot start here."""

from __future__ import annotations

import pytest
from textual.widgets import Select

from gpuwizard.model.preset_files import load_preset, load_preset_file, user_preset_files
from gpuwizard.runs.rundir import list_runs
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.dialogs.modals import SaveAs
from gpuwizard.tui.wizard.problems import ProblemsScreen
from support.data import replay
from support.tui import SIZES, goto, recorded, settle, text_of, type_into, wait_until


def summary_text(app) -> str:
    return text_of(app.screen.query_one("#summary"))


async def listed_on_refusal(pilot, key: str) -> tuple[str, str]:
    """Press `key`, which must refuse in a ProblemsScreen: its title and its list (one line), then close it."""
    app, wizard = pilot.app, pilot.app.screen
    await pilot.press(key)
    assert await wait_until(pilot, lambda: isinstance(app.screen, ProblemsScreen), 30), f"{key} lists the problems"
    title = text_of(app.screen.query_one(".dialog-title"))
    listed = " ".join(text_of(app.screen.query_one("#problems-list")).split())
    await pilot.press("escape")
    assert await wait_until(pilot, lambda: app.screen is wizard, 10)
    return title, listed


async def test_no_action_uses_other_values_than_the_screen_while_a_field_is_invalid():
    """The walk that launched `--batch-size=16 --lr=0.01` (the last values that parsed while typing, then scaled) and
    saved 16 and 0.005 while the fields read 16x and 5e-3x: now Run, Smoke run, Save, Probe, Copy and Export refuse,
    listing both fields; typed valid again, the saved preset holds what the screen shows."""
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        wizard = app.screen
        await pilot.press("ctrl+n", "ctrl+n")
        await settle(pilot, app)
        await pilot.press("tab", "ctrl+u", *"16x", "tab", "tab", "ctrl+u", *"5e-3x")
        await settle(pilot, app)
        assert app.focused is wizard.query_one("#f-optim-lr")
        assert "2 fields invalid" in summary_text(app) and summary_text(app).endswith("ctrl+r lists why")
        assert wizard.query_one("#summary").size.height <= 2
        for key, not_done in (("ctrl+r", "Not started"), ("ctrl+g", "Not started"), ("ctrl+s", "Not saved")):
            title, listed = await listed_on_refusal(pilot, key)
            assert title == f"{not_done}: 2 fields invalid", title
            assert "1. batch.size = '16x': expects a whole number. Fix: type digits only, e.g. 16." in listed, listed
            assert "2. optim.lr = '5e-3x': expects a number. Fix: type a number such as 0.0005" in listed, listed
        await goto(pilot, app, 3)
        assert (await listed_on_refusal(pilot, "f5"))[0] == "Nothing probed: 2 fields invalid"
        await goto(pilot, app, 4)
        assert (await listed_on_refusal(pilot, "ctrl+y"))[0] == "Nothing copied: 2 fields invalid"
        assert (await listed_on_refusal(pilot, "ctrl+e"))[0] == "Nothing exported: 2 fields invalid"
        assert app.clipboard == "" and list_runs() == [] and user_preset_files() == {}
        assert " launching " not in summary_text(app), "a refusal known here launches nothing"

        await goto(pilot, app, 2)
        await type_into(pilot, "#f-batch-size", "16")
        assert "1 field invalid  optim.lr = '5e-3x'" in summary_text(app)
        await type_into(pilot, "#f-optim-lr", "5e-3")
        assert "invalid" not in summary_text(app)
        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, SaveAs), 10)
        await pilot.press("ctrl+a", "ctrl+k", *"walked", "enter")
        assert await wait_until(pilot, lambda: "walked" in user_preset_files(), 10)
        saved = load_preset_file(user_preset_files()["walked"])
        assert (saved.batch.size, saved.optim.lr) == (16, 0.005)


async def test_a_value_the_preset_refuses_counts_and_a_field_the_run_does_not_use_waits(monkeypatch):
    """A number the preset refuses (batch size 0) is invalid like text that is no number; a field whose text a step
    puts back from the preset (the GPU count, after choosing devices) is valid again; one on a row hidden for this
    preset (FSDP's with strategy ddp) is not counted until the row shows again."""
    replay(monkeypatch, "workstation_2x4090")
    app = GpuWizardApp(preset=load_preset("so100-act-ddp2"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        wizard = app.screen
        await type_into(pilot, "#f-hardware-gpus", "2x")
        assert "1 field invalid  hardware.gpus = '2x'" in summary_text(app)
        devices = wizard.query_one("#gpu-select")
        devices.focus()
        devices.highlighted = 0
        await pilot.press("space")  # GPU0 off: the job takes GPU1 alone
        await settle(pilot, app)
        gpus = wizard.query_one("#f-hardware-gpus")
        assert (wizard.preset.hardware.gpus, wizard.preset.hardware.devices, gpus.value) == (1, [1], "1")
        assert "invalid" not in summary_text(app) and not gpus.has_class("-invalid")

        await goto(pilot, app, 2)
        await type_into(pilot, "#f-batch-size", "0")
        assert "1 field invalid  batch.size = 0: must be 1 or more" in summary_text(app)
        assert wizard.query_one("#f-batch-size").has_class("-invalid")
        wizard.query_one("#f-strategy", Select).value = "fsdp"
        await settle(pilot, app)
        await type_into(pilot, "#f-fsdp-min-num-params", "many")
        assert "2 fields invalid" in summary_text(app)
        assert wizard.query_one("#f-batch-size").has_class("-invalid"), "still marked once focus has left it"
        wizard.query_one("#f-strategy", Select).value = "ddp"
        await settle(pilot, app)
        assert not wizard.query_one("#f-fsdp-min-num-params").parent.display
        title, listed = await listed_on_refusal(pilot, "ctrl+s")
        assert title == "Not saved: 1 field invalid" and "fsdp" not in listed and "batch.size = 0" in listed
        wizard.query_one("#f-strategy", Select).value = "fsdp"
        await settle(pilot, app)
        assert "2 fields invalid  fsdp.min_num_params = 'many'" in summary_text(app)
        await type_into(pilot, "#f-fsdp-min-num-params", "")
        await type_into(pilot, "#f-batch-size", "8")
        assert "invalid" not in summary_text(app) and wizard.preset.batch.size == 8


async def test_refusals_found_at_launch_are_listed_whole_and_known_ones_at_once(monkeypatch):
    """On 4 H100s GR00T's plan has no error, but what the launch would refuse (no Isaac-GR00T checkout, no dataset
    folder) is known before ctrl+r: the status says `cannot start here`, and ctrl+r lists each problem at once in the
    scrollable list, from its start, with "not set" for an unset value, never in a toast. An invalid field and a
    plan error are listed together with them."""
    replay(monkeypatch, "h100_nvswitch_4")
    app = GpuWizardApp(preset=load_preset("groot-n17-accum"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        assert " cannot start here  launch.workdir (not set)" in summary_text(app), summary_text(app)
        toasts = recorded(app)
        await pilot.press("ctrl+r")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ProblemsScreen), 60)
        await pilot.pause()
        dialog, body = app.screen.query_one("#problems-dialog"), app.screen.query_one("#problems-body")
        assert app.screen.region.contains_region(dialog.region), "the list fits the screen; it scrolls"
        listed = " ".join(text_of(app.screen.query_one("#problems-list")).split())
        assert listed.startswith("1. ") and "2. " in listed, listed
        assert "launch.workdir (not set): gr00t/experiment/launch_finetune.py is not in" in listed, listed
        assert "dataset.root = 'demo_data/cube_to_bowl_5': " in listed and "does not exist on this machine" in listed
        assert "None" not in listed and body.scroll_y == 0
        assert text_of(app.screen.query_one(".dialog-title")) == "Not started: it cannot start on this machine"
        assert toasts == [], "the refusal is not a toast, and nothing is launched to find it"
        await pilot.press("escape")
        await pilot.pause()

        await goto(pilot, app, 2)
        await type_into(pilot, "#f-batch-size", "30")
        await type_into(pilot, "#f-optim-lr", "1e-4,")
        toasts.clear()
        title, listed = await listed_on_refusal(pilot, "ctrl+r")
        assert title == "Not started: 1 field invalid, the plan has 1 error(s)", title
        assert listed.startswith("1. optim.lr = '1e-4,': expects a number") and "2. batch.size = 30: " in listed
        assert toasts == [], "nothing is checked before a refusal known here"


@pytest.mark.parametrize("size", SIZES)
async def test_cannot_start_here_keeps_the_summary_to_two_lines(monkeypatch, size):
    """GR00T on 8 GPUs on a machine without any once took 5 summary lines at 80x24: now the plan line and the first
    blocker, cut to fit; ctrl+r lists it whole at once."""
    replay(monkeypatch, "no_driver")
    app = GpuWizardApp(preset=load_preset("groot-n17-8gpu"))
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app)
        summary = app.screen.query_one("#summary")
        lines = text_of(summary).splitlines()
        assert summary.size.height == 2 and len(lines) == 2, lines
        assert all(len(line) <= summary.content_region.width for line in lines), lines
        assert lines[0].startswith("groot · groot · 8xcuda · per device 8 · effective 64")
        assert lines[1].startswith(" cannot start here  hardware.gpus = 8: this job needs"), lines
        assert lines[1].endswith(" · ctrl+r lists why")
        toasts = recorded(app)
        title, listed = await listed_on_refusal(pilot, "ctrl+r")
        assert title == "Not started: it cannot start on this machine"
        assert listed.startswith("1. hardware.gpus = 8: this job needs 8 GPU(s) per node but 0 are visible here")
        assert "or run it on the training machine. (step 1 GPUs)" in listed and toasts == []


async def test_an_unset_value_reads_not_set_in_a_problem():
    """Two nodes and no rendezvous endpoint: the paragraph once read `hardware.rdzv_endpoint = None: ...`."""
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await type_into(pilot, "#f-hardware-nodes", "2")
        summary = " ".join(summary_text(app).split())
        assert "1 error(s) hardware.rdzv_endpoint (not set): " in summary and "None" not in summary, summary
        title, listed = await listed_on_refusal(pilot, "ctrl+r")
        assert listed.startswith("1. hardware.rdzv_endpoint (not set): ") and "None" not in listed
