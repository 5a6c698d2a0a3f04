"""The wizard, the Runs screen, the keys screen and the preset picker at 80x24 and 120x40, driven with Pilot:
browsing never changes the preset, every field is reachable, no key bar wraps, run ids stay whole, errors are
shown whole (issue 20)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from pydantic import BaseModel
from textual.widgets import DataTable, Input, Select
from textual.widgets._select import SelectOverlay

from gpuwizard.core import paths
from gpuwizard.model.preset import Preset
from gpuwizard.model.preset_files import load_preset
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.base.keys import KeysScreen
from gpuwizard.tui.dialogs.modals import Confirm
from gpuwizard.tui.wizard.problems import ProblemsScreen
from gpuwizard.tui.wizard.screen import STEPS, WizardScreen
from support.data import replay
from support.presets import demo_preset, user_preset
from support.runs import CMP_RUNS, copied_run, copy_runs
from support.tui import SIZE, SIZES, goto, key_bar_fits, monitor_on, recorded, settle, text_of, type_into, wait_until


async def test_browsing_the_policy_list_keeps_the_preset_and_a_trainer_change_is_undone():
    """Moving the cursor over policies of another trainer and back changes nothing; choosing one (enter) does, says
    which options are set aside, and choosing the old policy again brings them back."""
    demo_preset("browse", "trainer_options: {save_every: 100, log_every: 5}")
    app = GpuWizardApp(preset=load_preset("browse"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        screen = app.screen
        before = screen.preset
        toasts = recorded(app)
        await goto(pilot, app, 1)
        table = screen.query_one("#policies", DataTable)
        table.focus()
        await pilot.pause()
        assert table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == "demo"
        await pilot.press("up")  # xvla: a LeRobot policy
        await settle(pilot, app)
        assert screen.preset == before, "moving the cursor does not choose"
        assert "enter chooses xvla" in text_of(screen.query_one("#policy-summary"))
        await pilot.press("down")
        await settle(pilot, app)
        assert screen.preset == before and "--save-every=100" in screen.spec.argv
        await pilot.press("up", "enter")
        await settle(pilot, app)
        assert (screen.preset.policy, screen.preset.trainer, screen.preset.trainer_options) == ("xvla", "lerobot", {})
        said = " ".join(toasts)
        assert "save_every: 100" in said and "choose policy demo again" in said, said
        await pilot.press("down", "enter")
        await settle(pilot, app)
        assert (screen.preset.policy, screen.preset.trainer) == ("demo", "demo")
        assert screen.preset.trainer_options == {"save_every": 100, "log_every": 5}, "choosing the old one undoes it"
        assert "--save-every=100" in screen.spec.argv


def every_field_preset() -> None:
    """A preset that shows the wizard's conditional fields too (multi-node, SLURM, FSDP wrapping)."""
    demo_preset(
        "every-field",
        "launch: {scheduler: slurm}\nstrategy: fsdp",
        hardware="{gpus: 2, device: cpu, nodes: 2, rdzv_endpoint: '127.0.0.1:29500'}",
    )


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("preset", ["demo-cpu", "groot-n17-accum", "every-field"])
async def test_every_field_of_every_step_is_reached_by_tab_and_never_hidden(size, preset):
    every_field_preset()
    app = GpuWizardApp(preset=load_preset(preset))
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app)
        for step, (name, _) in enumerate(STEPS):
            await goto(pilot, app, step)
            widget = app.screen.built(name)
            chain = [w for w in app.screen.focus_chain if widget in w.ancestors]
            reached, hidden = [], []
            for _ in range(len(chain) + 1):
                focused = app.focused
                if focused in chain and focused not in reached:
                    reached.append(focused)
                    await pilot.pause()
                    region = focused.region
                    if not (region.height and widget.content_region.contains_region(region)):
                        hidden.append(focused.id)
                await pilot.press("tab")
                await pilot.pause()
            assert hidden == [], f"step {name}: focus landed on fields scrolled out of view"
            assert set(reached) == set(chain), f"step {name}: Tab did not reach {set(chain) - set(reached)}"


async def test_focus_never_stays_on_a_field_hidden_after_gpu_detection(monkeypatch):
    """On a machine without GPUs the device list is hidden once detection answers; focus moves off it."""
    replay(monkeypatch, "no_driver")
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        assert not app.screen.query_one("#gpu-select").display
        assert app.focused is not None and app.focused in app.screen.focus_chain


async def test_no_key_bar_wraps_at_80_columns(monkeypatch, tmp_path):
    replay(monkeypatch, "workstation_2x4090")
    copy_runs(tmp_path / "data", *CMP_RUNS)
    app = GpuWizardApp(preset=load_preset("so100-act-ddp2"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        for step in range(len(STEPS)):
            await goto(pilot, app, step)
            key_bar_fits(app.screen)
        await goto(pilot, app, 2)
        app.screen.query_one("#f-mixed-precision", Select).focus()
        await pilot.pause()
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.focused, SelectOverlay), 10), "the dropdown is open"
        assert "esc Dismiss menu" in key_bar_fits(app.screen)
        await pilot.press("escape")
        await pilot.press("ctrl+o")
        assert await wait_until(pilot, lambda: app.screen.query("#presets"), 10)
        key_bar_fits(app.screen)
        await pilot.press("escape")
        await pilot.press("ctrl+l")
        assert await wait_until(pilot, lambda: len(getattr(app.screen, "rows", [])) == 2, 30)
        assert "enter Open" in key_bar_fits(app.screen), "the Runs key bar names enter"


async def test_keys_screen_lists_every_key_of_the_screen_and_escape_closes_it():
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await goto(pilot, app, 2)
        app.screen.query_one("#f-mixed-precision", Select).focus()
        await pilot.pause()
        wizard = app.screen
        await pilot.press("question_mark")
        assert await wait_until(pilot, lambda: isinstance(app.screen, KeysScreen), 10)
        listed = text_of(app.screen.query_one("#keys-list"))
        for key, what in (("^g", "Smoke run"), ("^n", "Next"), ("^p", "palette"), ("^l", "Runs"), ("tab", "Focus")):
            assert any(key in line and what.lower() in line.lower() for line in listed.splitlines()), (key, listed)
        assert "on this screen" in listed and "everywhere" in listed
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is wizard
        field = wizard.query_one("#f-dataset-repo-id", Input)
        field.focus()
        await pilot.pause()
        await pilot.press("end", "question_mark")
        await pilot.pause()
        assert field.value.endswith("?") and app.screen is wizard, "a field takes `?` as text"
        await pilot.press("f1")
        assert await wait_until(pilot, lambda: isinstance(app.screen, KeysScreen), 10), "F1 works in a field"
        assert "in the field dataset id (text field)" in text_of(app.screen.query_one("#keys-list"))
        await pilot.press("f1")
        await pilot.pause()
        assert app.screen is wizard


def hand_made_runs(data: Path) -> list[str]:
    """The real demo runs, plus a resumed, a smoke and a 2-node run of a long-named preset made from one of them."""
    copy_runs(data, *CMP_RUNS)
    source = data / "runs" / CMP_RUNS[1]
    made = []
    for run_id, changes in (
        ("20261202-101010-so100-act-ddp2", {"nodes": 2, "world_size": 16, "slurm_job_id": "4242"}),
        ("20261202-111111-demo-cmp", {"smoke": True}),
        ("20261202-121212-demo-cmp", {"resumed_from": CMP_RUNS[1]}),
    ):
        target = data / "runs" / run_id
        shutil.copytree(source, target, dirs_exist_ok=True)
        status = json.loads((target / "status.json").read_text())
        status.update(run_id=run_id, preset=run_id[16:], **changes)
        (target / "status.json").write_text(json.dumps(status))
        made.append(run_id)
    return made


async def test_runs_screen_fits_80_columns_with_whole_copyable_ids(tmp_path):
    from gpuwizard.tui.screens.runs import RunsScreen

    hand_made_runs(tmp_path / "data")
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+l")
        assert await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen) and len(app.screen.rows) == 5, 30)
        await pilot.pause()
        table = app.screen.query_one("#runs-table", DataTable)
        columns = table.ordered_columns
        assert [str(c.label) for c in columns][-1] == "run", "the run id is the last column"
        before_run = sum(c.get_render_width(table) for c in columns[:-1])
        longest = max(len(r["run_id"]) for r in app.screen.rows)
        assert before_run + longest + 2 <= table.scrollable_content_region.width, "state, steps, time and ids fit"
        hint = app.screen.query_one("#runs-hint")
        for row in range(5):
            table.move_cursor(row=row)
            await pilot.pause()
            run = app.screen.rows[row]
            assert text_of(hint).startswith(run["run_id"]), "the highlighted run is named whole"
        table.move_cursor(row=[r["run_id"] for r in app.screen.rows].index("20261202-111111-demo-cmp"))
        await pilot.pause()
        assert "smoke run" in text_of(hint)
        await pilot.press("y")
        assert app.clipboard == "20261202-111111-demo-cmp"


async def test_compare_view_names_every_run_whole(tmp_path):
    from gpuwizard.tui.screens.runs import CompareScreen

    copy_runs(tmp_path / "data", *CMP_RUNS)
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+l")
        assert await wait_until(pilot, lambda: len(getattr(app.screen, "rows", [])) == 2, 30)
        await pilot.press("space", "down", "space", "c")
        assert await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.plot, 30)
        lines = text_of(app.screen.query_one("#compare-text")).splitlines()
        for run_id in CMP_RUNS:
            assert any(line.split()[-1:] == [run_id] for line in lines), f"{run_id} whole on a line of its own"


async def test_multi_node_in_the_wizard_shows_the_error_whole_and_takes_the_endpoint():
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        screen = app.screen
        endpoint = screen.query_one("#f-hardware-rdzv-endpoint", Input)
        assert not endpoint.parent.display, "one node: no endpoint field"
        await type_into(pilot, "#f-hardware-nodes", "2")
        assert endpoint.parent.display
        [error] = screen.plan.errors
        assert error.field == "hardware.rdzv_endpoint"
        summary = text_of(screen.query_one("#summary")).replace("\n", " ")
        wrong = error.paragraph().split(" Fix: ")[0]  # its fix in ctrl+r's list: four lines pushed a step below
        assert " ".join(wrong.split()) in " ".join(summary.split()), "what is wrong is shown whole"
        await pilot.press("ctrl+r")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ProblemsScreen), 10), "ctrl+r says why"
        assert error.paragraph() in text_of(app.screen.query_one("#problems-list")).replace("\n", " ")
        await pilot.press("escape")
        await pilot.pause()
        await type_into(pilot, "#f-hardware-rdzv-endpoint", "127.0.0.1:29500")
        assert screen.preset.hardware.rdzv_endpoint == "127.0.0.1:29500" and screen.plan.errors == []


NOT_FOR_A_RUN = {
    "version",  # always 1
    "name",  # ctrl+s asks for it
    "description",
    "launch.master_port",  # kept so older presets load; not used
    "monitor.gauge",  # experimental (the noise-scale gauge): set in the preset file until it has proven harmless
}
EDITED_BY = {"policy": "#policies", "hardware.devices": "#gpu-select", "scaling.rule": "#rules"}
"""Fields set by a list rather than a field of their own."""


def leaf_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    found = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += leaf_fields(annotation, f"{prefix}{name}.")
        elif name != "trainer_options":  # each trainer's own form, tested by the trainers' walks
            found.append(prefix + name)
    return found


async def test_every_preset_field_a_run_needs_can_be_set_in_the_wizard():
    every_field_preset()
    app = GpuWizardApp(preset=load_preset("every-field"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        for step in range(len(STEPS)):
            await goto(pilot, app, step)
        screen = app.screen
        missing = [
            path
            for path in leaf_fields(Preset)
            if path not in NOT_FOR_A_RUN
            and not screen.query(EDITED_BY.get(path) or "#f-" + path.replace(".", "-").replace("_", "-"))
        ]
        assert missing == []
        for path in ("hardware.rdzv_endpoint", "slurm.partition", "fsdp.min_num_params"):
            field = screen.query_one("#f-" + path.replace(".", "-").replace("_", "-"))
            assert field.parent.display, f"{path} is shown for this preset"


async def test_ready_means_it_will_start_here(monkeypatch):
    """More CPU processes than cores is an error in the wizard (as in plan and run), never "ready"; on a GPU machine
    with fewer GPUs than the preset, the state says it cannot start here."""
    cores = os.cpu_count() or 1
    demo_preset("too-many", hardware=f"{{gpus: {cores + 1}, device: cpu}}")
    app = GpuWizardApp(preset=load_preset("too-many"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        summary = text_of(app.screen.query_one("#summary"))
        assert f"this machine has {cores} cores" in summary.replace("\n", " ") and " ready " not in summary
    replay(monkeypatch, "workstation_2x4090")
    app = GpuWizardApp(preset=load_preset("demo-gpu"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await type_into(pilot, "#f-hardware-gpus", "4")
        summary = text_of(app.screen.query_one("#summary")).replace("\n", " ")
        assert "cannot start here  hardware.gpus = 4" in summary and " ready " not in summary, summary
        await pilot.press("ctrl+r")  # the summary cuts the reason to two lines; ctrl+r lists it whole
        assert await wait_until(pilot, lambda: isinstance(app.screen, ProblemsScreen), 10)
        assert "2 are visible here" in text_of(app.screen.query_one("#problems-list")).replace("\n", " ")


async def test_a_misspelled_theme_is_refused_with_the_closest_name_and_ctrl_t_cycles_own_themes():
    paths.settings_file().parent.mkdir(parents=True, exist_ok=True)
    paths.settings_file().write_text("theme: gpuwizrd-light\n")
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    toasts = recorded(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        assert app.theme == "gpuwizard-dark"
        assert any("did you mean gpuwizard-light" in t for t in toasts), toasts
        seen = set()
        for _ in range(len(app.own_themes) + 1):
            await pilot.press("ctrl+t")
            await pilot.pause()
            seen.add(app.theme)
        assert seen == set(app.own_themes), "ctrl+t cycles gpuwizard's themes, and only those"


async def test_preset_picker_fits_the_screen_and_shows_a_broken_preset_whole():
    user_preset(
        "broken",
        "version: 1\nname: broken\ntrainer: demo\npolicy: demo\ndataset: {repo_id: a/b}\n"
        "mixed_precision: no\nbatch: {size: 0}\n",
    )
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+o")
        assert await wait_until(pilot, lambda: app.screen.query("#presets"), 10)
        picker = app.screen
        options = picker.query_one("#presets")
        ids = [options.get_option_at_index(i).id for i in range(options.option_count)]
        assert options.highlighted == ids.index("shipped:demo-cpu"), "the wizard's preset is highlighted"
        await pilot.press("down")
        assert options.highlighted == ids.index("shipped:demo-cpu") + 1, "the first Down moves one row"
        options.highlighted = ids.index("yours:broken")
        await pilot.press("enter")
        await pilot.pause()
        shown = text_of(picker.query_one("#picker-error"))
        path = str(paths.user_presets_dir() / "broken.yaml")
        assert shown.count(path) == 1
        for paragraph in (
            "mixed_precision = False: must be one of no, bf16, fp16; YAML reads an unquoted no as false. Fix: quote "
            'it: mixed_precision: "no".',
            "batch.size = 0: must be 1 or more.",
        ):
            assert paragraph in shown.replace("\n", " "), shown
        dialog = picker.query_one("#picker")
        assert app.screen.region.contains_region(dialog.region), "the dialog fits the screen"
        assert dialog.region.contains_region(picker.query_one("#picker-problems").region)


@pytest.mark.parametrize("trainer_preset", ["demo-cpu", "groot-n17-accum", "so100-act-ddp2"])
async def test_no_field_label_is_cut(monkeypatch, trainer_preset):
    replay(monkeypatch, "workstation_2x4090")
    app = GpuWizardApp(preset=load_preset(trainer_preset))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        for step in range(4):
            await goto(pilot, app, step)
            for label in app.screen.built(STEPS[step][0]).query(".field-label"):
                if label.parent.display:
                    assert label.size.width >= len(text_of(label)), text_of(label)


async def test_preview_at_60_columns_never_breaks_a_flag_from_its_value():
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=(60, 20)) as pilot:
        await settle(pilot, app)
        await goto(pilot, app, 4)
        preview = app.screen.built("preview")
        width = preview.content_region.width - preview.styles.scrollbar_size_vertical
        lines = text_of(preview.query_one("#command")).splitlines()
        assert len(lines) > 3
        for line in lines:
            assert len(line) <= width or len(line.strip().removesuffix(" \\").split()) == 1, line
        assert "5 Preview" in text_of(app.screen.query_one("#steps")), "the current step keeps its name"


@pytest.mark.parametrize("size", SIZES)
def test_snapshot_runs_screen_with_resumed_smoke_and_multi_node_runs(snap_compare, monkeypatch, size, tmp_path):
    data = tmp_path / "data"
    hand_made_runs(data)
    monkeypatch.setenv("GPUWIZARD_DATA_DIR", str(data))

    async def before(pilot):
        await pilot.press("ctrl+l")
        for _ in range(200):
            if len(getattr(pilot.app.screen, "rows", [])) == 5:
                break
            await pilot.pause(0.05)
        await pilot.press("down")
        await pilot.pause(0.3)

    assert snap_compare(GpuWizardApp(preset=load_preset("demo-cpu")), terminal_size=size, run_before=before)


async def test_the_stop_question_reads_right_before_the_first_step(tmp_path):
    """A run with no step yet was asked about as "Stop run ID at before its first step?"."""
    run = copied_run(tmp_path, state="running")
    (run.path / "progress.json").unlink()
    app = GpuWizardApp(run=run)
    async with app.run_test(size=(80, 24)) as pilot:
        monitor = await monitor_on(pilot, app)
        assert monitor.progress is None
        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 10)
        assert app.screen.asked().startswith(f"Stop run {run.run_id} before its first step? Every process of it")


async def test_a_plan_that_arrives_while_a_step_is_still_being_built_waits_for_it(monkeypatch):
    """CI once crashed here: a PlanReady handled between a step's mount and its compose drew into a step whose
    children did not exist yet (NoMatches '#batch-meaning'); the step is drawn once it is built instead."""
    replay(monkeypatch, "workstation_2x4090")
    app = GpuWizardApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = app.screen
        assert isinstance(screen, WizardScreen)
        screen.step = 2  # mounts the Trainer step; its children are composed later, on its own message queue
        screen.render_step()  # what a PlanReady handled in that gap does
        await settle(pilot, app)
        assert app.is_running and app.return_code is None
        meaning = str(screen.query_one("#batch-meaning").render())
        assert meaning.strip(), "drawn from the plan once built"
        await type_into(pilot, "#f-batch-size", "16")
        assert screen.plan is not None and screen.plan.per_device_batch == 16
