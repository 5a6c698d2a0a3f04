"""The Textual app driven with Pilot: the wizard for three trainers, a real demo run, a hang, presets, themes."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from textual.command import CommandList, CommandPalette
from textual.widgets import Input

from gpuwizard.core import paths
from gpuwizard.model.preset_files import load_preset, load_preset_file, user_preset_files
from gpuwizard.runs.records import Progress
from gpuwizard.runs.rundir import list_runs
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.monitor.screen import MonitorScreen
from gpuwizard.tui.widgets.fields import KeyBar
from gpuwizard.tui.widgets.logview import LogView
from gpuwizard.tui.wizard.problems import ProblemsScreen
from gpuwizard.tui.wizard.screen import STEPS, WizardScreen
from support.callers import drawn, on_terminal, read_terminal
from support.cli import poll_until
from support.data import DATA, replay
from support.presets import quick_demo
from support.runs import CMP_RUNS, copy_runs
from support.tui import SIZE, goto, settle, type_into, wait_until


@pytest.fixture
def gpus(monkeypatch):
    replay(monkeypatch, "workstation_2x4090")


async def test_walk_demo_from_start_to_preview(gpus):
    app = GpuWizardApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = app.screen
        assert isinstance(screen, WizardScreen) and screen.preset.name == "demo-cpu"
        await goto(pilot, app, 2)
        await type_into(pilot, "#f-batch-size", "16")
        assert screen.plan.per_device_batch == 16 and screen.plan.effective_batch == 32
        await type_into(pilot, "#f-batch-size", "x")
        assert "batch.size" in str(app.screen.query_one("#summary").render())
        await type_into(pilot, "#f-batch-size", "12")
        await goto(pilot, app, 4)
        argv = screen.spec.argv
        assert argv[argv.index("-m") + 1] == "gpuwizard.demo.train" and "--batch-size=12" in argv
        assert "--nproc-per-node=2" in argv and "--device=cpu" in argv
        await pilot.press("ctrl+y")
        assert app.clipboard == screen.spec.shell()


async def test_dataset_folder_is_described_from_the_plan(gpus, tmp_path):
    """Typing a local dataset folder shows its episodes, frames and cameras; a folder without metadata shows why."""
    app = GpuWizardApp(preset=load_preset("so100-act-ddp2"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await goto(pilot, app, 1)
        info = app.screen.query_one("#dataset-info")
        await type_into(pilot, "#f-dataset-root", str(DATA / "datasets" / "so100_tiny_lerobot061"))
        assert app.screen.plan.dataset is not None
        assert str(info.render()).startswith(
            f"{app.screen.plan.dataset['episodes']} episodes, {app.screen.plan.dataset['frames']} frames"
        )
        await type_into(pilot, "#f-dataset-root", str(tmp_path))
        assert "meta/info.json" in str(info.render())


async def test_walk_lerobot_with_scaling_rule(gpus):
    app = GpuWizardApp(preset=load_preset("so100-act-ddp2"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = app.screen
        assert screen.plan.fits.device_gb == 24.0
        await goto(pilot, app, 3)
        app.screen.query_one("#rules").focus()
        await pilot.press("down", "down", "down", "enter")
        await settle(pilot, app)
        assert screen.preset.scaling.rule == "divide_steps"
        assert (screen.plan.steps, screen.plan.lr) == (50000, pytest.approx(1e-5))
        await goto(pilot, app, 4)
        assert "--steps=50000" in screen.spec.argv and "--policy.optimizer_lr=1e-05" in screen.spec.argv
        assert not any(a.startswith("--optimizer.lr") for a in screen.spec.argv)
        problems = str(app.screen.query_one("#problems").render())
        assert "NCCL_P2P_DISABLE: 1" in problems and "GPU 1 is busy" in problems, (
            "the recorded 4090s have no P2P and a busy GPU 1"
        )
        summary = str(app.screen.query_one("#summary").render())
        assert " cannot start here  launch.python (not set): lerobot-train" in summary, (
            "no LeRobot here: the launch would refuse, and the status says so before ctrl+r"
        )
        assert app.focused is app.screen.query_one("#preview-step"), "the preview scrolls by keyboard"


async def test_walk_groot_from_the_policy_table(gpus):
    app = GpuWizardApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = app.screen
        await goto(pilot, app, 1)
        table = app.screen.query_one("#policies")
        table.focus()
        await pilot.pause()
        moves = list(table.rows).index(next(k for k in table.rows if k.value == "groot")) - table.cursor_row
        await pilot.press(*(["down"] * moves if moves > 0 else ["up"] * -moves))
        await settle(pilot, app)
        assert screen.preset.policy == "demo", "moving the cursor only describes a policy"
        await pilot.press("enter")
        await settle(pilot, app)
        assert (screen.preset.policy, screen.preset.trainer) == ("groot", "groot")
        assert any(p.field == "trainer_options.base_model_path" for p in screen.plan.errors)
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert isinstance(app.screen, ProblemsScreen), "with errors, ctrl+r lists them instead of doing nothing"
        await pilot.press("escape")
        await pilot.pause()
        await goto(pilot, app, 0)
        app.screen.query_one("#f-hardware-device").value = "cuda"
        await type_into(pilot, "#f-hardware-gpus", "4")
        await goto(pilot, app, 2)
        await type_into(pilot, "#f-trainer-options-base-model-path", "nvidia/GR00T-N1.7-3B")
        await type_into(pilot, "#f-trainer-options-embodiment-tag", "NEW_EMBODIMENT")
        await type_into(pilot, "#f-trainer-options-modality-config-path", "examples/SO100/so100_config.py")
        assert any(p.field == "dataset.root" for p in screen.plan.errors), "GR00T needs the dataset folder"
        await goto(pilot, app, 1)
        await type_into(pilot, "#f-dataset-root", "demo_data/cube_to_bowl_5")
        await goto(pilot, app, 2)
        await type_into(pilot, "#f-batch-size", "32")
        await type_into(pilot, "#f-batch-grad-accum", "8")
        assert screen.plan.errors == []
        assert (screen.plan.per_device_batch, screen.plan.effective_batch) == (8, 256)
        await goto(pilot, app, 4)
        argv = screen.spec.argv
        assert argv[argv.index("--num-gpus") + 1] == "4" and argv[argv.index("--global-batch-size") + 1] == "32"


@pytest.mark.slow
async def test_run_the_demo_to_completion_in_the_monitor(tmp_path):
    quick_demo(tmp_path, "tui-demo", "trainer_options: {log_every: 5}")
    app = GpuWizardApp(preset=load_preset("tui-demo"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+r")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen), 30)
        monitor = app.screen
        assert await wait_until(pilot, lambda: monitor.final, 120)
        assert monitor.status.state == "finished"
        log = monitor.query_one("#log", LogView)
        assert await wait_until(
            pilot,
            lambda: monitor.query_one("#progress").progress == 60 and log.line_count == monitor.index.line_count,
            30,
        )
        assert any("Training finished" in line for line in monitor.index.lines(0, log.line_count))
        assert "60/60" in str(monitor.query_one("#stats").render())
        assert monitor.query_one("#banner").display
        await pilot.press("slash")
        await pilot.press(*list("step 30/60"), "enter")
        assert await wait_until(pilot, lambda: log.highlight is not None, 30)
        assert (
            "step 30/60" in log.line(log.highlight) and not log.following and monitor.search.start == log.highlight + 1
        )
    assert list_runs()[0].status.exit_code == 0


@pytest.mark.slow
async def test_monitor_reacts_to_an_injected_hang(tmp_path):
    quick_demo(
        tmp_path,
        "tui-hang",
        "trainer_options: {inject_hang: {rank: 1, step: 15}, step_time_s: 0.02}\nmonitor: {hang_timeout_s: 4}",
    )
    app = GpuWizardApp(preset=load_preset("tui-hang"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+r")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen), 30)
        monitor = app.screen
        assert await wait_until(pilot, lambda: any(e.kind == "hang_suspected" for e in monitor.events), 90)
        banner = str(monitor.query_one("#banner").render())
        assert "hang suspected" in banner and "rank 1" in banner
        assert "s stop" in monitor.query_one("#banner").border_subtitle
        await pilot.press("s")
        await pilot.pause()
        await pilot.press("y")
        assert await wait_until(pilot, lambda: monitor.final and monitor.status.state == "stopped", 60)
    assert list_runs()[0].status.survivors == []


@pytest.mark.slow
async def test_monitor_recovery_keys(tmp_path):
    """d: stack dump of every rank, shown; p: not offered on a CPU run; m: smoke run, asked first; w: the wizard."""
    from gpuwizard.tui.dialogs.modals import Confirm
    from gpuwizard.tui.monitor.details import EventDetails

    quick_demo(tmp_path, "tui-keys", "trainer_options: {step_time_s: 0.05, log_every: 2}", steps=3000)
    app = GpuWizardApp(preset=load_preset("tui-keys"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+r")
        assert await wait_until(
            pilot, lambda: isinstance(app.screen, MonitorScreen) and (app.screen.progress or Progress()).step, 90
        )
        first = app.screen
        await pilot.press("d")
        assert await wait_until(pilot, lambda: isinstance(app.screen, EventDetails), 90)
        assert any(e.kind == "stack_dump" for e in first.events)
        await pilot.press("escape", "p")
        await pilot.pause()
        assert app.screen is first and first.run.status().state == "running", "no NCCL retry on a gloo run"
        await pilot.press("m")
        assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 10), "m asks before it stops the run"
        await pilot.press("n")
        await pilot.pause()
        assert app.screen is first and first.run.status().state == "running"
        await pilot.press("m")
        assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 10)
        await pilot.press("y")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen) and app.screen is not first, 90)
        second = app.screen
        assert second.run.status().smoke and first.run.status().state == "stopped"
        await pilot.press("w")
        assert await wait_until(pilot, lambda: isinstance(app.screen, WizardScreen), 30)
        assert await wait_until(pilot, lambda: second.run.status().final, 120)
    assert [e.status.state for e in list_runs()] == ["finished", "stopped"]


@pytest.mark.slow
async def test_monitor_resumes_a_stopped_run_with_r(tmp_path):
    quick_demo(tmp_path, "tui-resume", "trainer_options: {step_time_s: 0.05, log_every: 2, save_every: 5}", steps=3000)
    app = GpuWizardApp(preset=load_preset("tui-resume"))
    checkpoint = tmp_path / "out-tui-resume" / "checkpoints" / "last" / "model.pt"
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+r")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen) and checkpoint.exists(), 90)
        first = app.screen
        await pilot.press("r")
        await pilot.pause()
        assert app.screen is first, "a running run is not resumed"
        await pilot.press("s")
        await pilot.pause()
        await pilot.press("y")
        assert await wait_until(pilot, lambda: first.final and first.status.state == "stopped", 90)
        await pilot.press("r")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen) and app.screen is not first, 90)
        second = app.screen
        assert second.run.status().resumed_from == first.run.run_id
        assert await wait_until(pilot, lambda: "Resuming from step" in second.run.log.read_text(), 90)
        await pilot.press("s")
        await pilot.pause()
        await pilot.press("y")
        assert await wait_until(pilot, lambda: second.final, 90)


@pytest.mark.slow
async def test_monitor_plots_follow_a_running_demo(tmp_path):
    """v shows the curves, they grow with the run; l, x and g switch the metric, the x axis and the log scale; v
    again shows the log and the curves together."""
    from gpuwizard.tui.widgets.plots import MetricsPlot

    quick_demo(tmp_path, "tui-plots", "trainer_options: {step_time_s: 0.03, log_every: 2}", steps=3000)
    app = GpuWizardApp(preset=load_preset("tui-plots"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+r")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen), 90)
        monitor = app.screen
        plots = monitor.query_one("#plots", MetricsPlot)
        assert not plots.display
        await pilot.press("v")
        assert await wait_until(pilot, lambda: plots.ready and len(plots.metrics) >= 3, 90)
        title = monitor.query_one("#plot-title")
        first = len(plots.metrics)
        assert await wait_until(pilot, lambda: len(plots.metrics) > first, 60), "the curve grows with the run"
        assert str(title.render()).startswith("loss against step")
        await pilot.press("g")
        assert await wait_until(pilot, lambda: str(title.render()).startswith("log10 loss against step"), 10)
        await pilot.press("l", "x")
        assert await wait_until(pilot, lambda: str(title.render()).startswith("lr against minutes"), 10)
        await pilot.press("v")
        await pilot.pause()
        assert plots.display and monitor.query_one("#log").display, "both"
        await pilot.press("s")
        await pilot.pause()
        await pilot.press("y")
        assert await wait_until(pilot, lambda: monitor.final, 90)


async def test_runs_screen_marks_two_runs_and_compares_them(monkeypatch, tmp_path):
    from gpuwizard.tui.screens.runs import CompareScreen, RunsScreen

    monkeypatch.setenv("GPUWIZARD_DATA_DIR", str(tmp_path / "data"))
    copy_runs(tmp_path / "data", *CMP_RUNS)
    app = GpuWizardApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+l")
        assert await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen) and len(app.screen.rows) == 2, 30)
        runs = app.screen
        assert [r["run_id"] for r in runs.rows] == list(reversed(CMP_RUNS)), "newest first"
        await pilot.press("c")
        assert isinstance(app.screen, RunsScreen), "compare needs two marked runs"
        await pilot.press("space", "down", "space", "c")
        assert await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.plot, 30)
        text = str(app.screen.query_one("#compare-text").render())
        assert "2 processes (20261201-005700-demo-cmp) reached loss" in text and "1.64x" in text
        await pilot.press("escape")
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen), 30)
        assert app.screen.run.run_id == CMP_RUNS[0], "enter opens the selected run in the monitor"


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_snapshot_runs_and_compare(snap_compare, monkeypatch, size, tmp_path):
    data = tmp_path / "data"
    copy_runs(data, *CMP_RUNS)
    monkeypatch.setenv("GPUWIZARD_DATA_DIR", str(data))

    async def before(pilot):
        from gpuwizard.tui.screens.runs import CompareScreen

        await pilot.press("ctrl+l")
        for _ in range(200):
            if len(getattr(pilot.app.screen, "rows", [])) == 2:
                break
            await pilot.pause(0.05)
        await pilot.press("space", "down", "space", "c")
        for _ in range(200):
            if isinstance(pilot.app.screen, CompareScreen) and pilot.app.screen.plot is not None:
                break
            await pilot.pause(0.05)
        await pilot.pause(0.5)

    assert snap_compare(GpuWizardApp(), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_snapshot_monitor_with_log_and_curves(snap_compare, monkeypatch, size, shown_folder):
    """The 2-process demo run (real, finished) with the log and its loss curve both shown."""
    from gpuwizard.runs.rundir import RunDir

    data = shown_folder("/tmp/gpuwizard-snapshot-cmp")  # the banner shows the run's folder
    copy_runs(data, *CMP_RUNS)
    monkeypatch.setenv("GPUWIZARD_DATA_DIR", str(data))

    async def before(pilot):
        for _ in range(200):
            screen = pilot.app.screen
            if isinstance(screen, MonitorScreen) and len(screen.query_one("#plots").metrics) == 30:
                break
            await pilot.pause(0.05)
        await pilot.press("v", "v")
        for _ in range(200):
            if pilot.app.screen.query_one("#plots").ready:
                break
            await pilot.pause(0.05)
        await pilot.pause(0.5)

    assert snap_compare(GpuWizardApp(run=RunDir(data / "runs" / CMP_RUNS[1])), terminal_size=size, run_before=before)


async def test_presets_save_duplicate_delete_open(gpus):
    app = GpuWizardApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+s")
        await pilot.pause()
        await pilot.press("ctrl+a", "ctrl+k", *list("my-demo"), "enter")
        await pilot.pause()
        assert load_preset_file(user_preset_files()["my-demo"]).trainer == "demo"
        await pilot.press("ctrl+o")
        await pilot.pause()
        picker = app.screen
        options = picker.query_one("#presets")
        options.highlighted = next(
            i for i in range(options.option_count) if options.get_option_at_index(i).id == "yours:my-demo"
        )
        await pilot.press("ctrl+d")
        await pilot.pause()
        await pilot.press("ctrl+a", "ctrl+k", *list("my-demo-2"), "enter")
        await pilot.pause()
        assert set(user_preset_files()) == {"my-demo", "my-demo-2"}
        options.highlighted = next(
            i for i in range(options.option_count) if options.get_option_at_index(i).id == "yours:my-demo"
        )
        await pilot.press("delete")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert set(user_preset_files()) == {"my-demo-2"}
        options.highlighted = next(
            i for i in range(options.option_count) if options.get_option_at_index(i).id == "shipped:groot-n17-accum"
        )
        await pilot.press("enter")
        await settle(pilot, app)
        assert isinstance(app.screen, WizardScreen) and app.screen.preset.name == "groot-n17-accum"


async def test_export_script(gpus, tmp_path):
    app = GpuWizardApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await goto(pilot, app, 4)
        await pilot.press("ctrl+e")
        await pilot.pause()
        await pilot.press("ctrl+a", "ctrl+k", *list(str(tmp_path / "job.sh")), "enter")
        await pilot.pause()
    script = tmp_path / "job.sh"
    assert script.stat().st_mode & stat.S_IXUSR
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "exec " in text and "gpuwizard.demo.train" in text


async def test_theme_switch_is_remembered(gpus):
    app = GpuWizardApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert app.theme == "gpuwizard-dark"
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert app.theme == "gpuwizard-light"
    assert "gpuwizard-light" in paths.settings_file().read_text()
    again = GpuWizardApp()
    async with again.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert again.theme == "gpuwizard-light"
        assert {"gpuwizard-dark", "gpuwizard-light", "terminal-16"} <= set(again.available_themes)


async def test_palette_has_the_main_actions(gpus):
    app = GpuWizardApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in (
            "job: Run",
            "job: Smoke run",
            "job: Probe",
            "job: Copy command",
            "job: Export shell script",
            "preset: Open",
            "preset: Save as",
            "theme: terminal-16",
        ):
            assert title in titles


async def test_the_palette_opens_and_runs_a_command(gpus):
    app = GpuWizardApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert app.theme == "gpuwizard-dark"
        await pilot.press("ctrl+p")
        assert await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), 10)
        await pilot.press(*list("terminal-16"))
        assert await wait_until(pilot, lambda: app.screen.query_one(CommandList).option_count > 0, 10)
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: app.theme == "terminal-16", 10)
        assert not isinstance(app.screen, CommandPalette)


async def test_the_key_bar_shows_the_main_keys_and_help_lists_every_one(gpus):
    app = GpuWizardApp()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await goto(pilot, app, 4)
        text = str(app.screen.query_one(KeyBar).render())
        for key, what in (("^r", "Run"), ("^s", "Save"), ("^o", "Open"), ("^y", "Copy"), ("?", "Keys")):
            assert f"{key} {what}" in text, text
        assert text.count("^r Run") == 1, "each action once"
        await pilot.press("question_mark")
        await pilot.pause()
        listed = str(app.screen.query_one("#keys-list").render())
        for key, what in (("^q", "Quit"), ("^t", "Theme"), ("^l", "Runs"), ("^p", "palette")):
            assert any(key in line and what in line for line in listed.splitlines()), (key, listed)


async def test_a_wizard_edit_that_validation_rejects_is_shown_and_not_applied(gpus):
    app = GpuWizardApp(preset=load_preset("demo-cpu"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        screen = app.screen
        await goto(pilot, app, 2)
        before = screen.preset
        await type_into(pilot, "#f-batch-size", "0")
        summary = str(screen.query_one("#summary").render())
        assert "batch.size = 0: must be 1 or more" in summary
        assert screen.preset == before and screen.query_one("#f-batch-size").value == "0"
        await type_into(pilot, "#f-batch-size", "x")
        assert "batch.size = 'x': expects a whole number" in str(screen.query_one("#summary").render())
        await type_into(pilot, "#f-batch-size", "16")
        assert screen.preset.batch.size == 16 and "error" not in str(screen.query_one("#summary").render())


def test_bad_preset_flag_is_an_error_line_not_a_ui(gw):
    result = gw("--preset", "no-such-preset")
    assert result.code == 2 and "PRESET" in result.err and "Traceback" not in result.err


# --- SVG snapshots of each step at 80x24 and 120x40 ------------------------------------------

SNAP_PRESET = DATA / "presets" / "snap-demo.yaml"


@pytest.fixture
def fixed_python(monkeypatch):
    """The demo runs gpuwizard's own interpreter, with the loopback plugin's folder (in the checkout) and this
    shell's PYTHONPATH on the job's; show fixed paths so snapshots match on every machine."""
    from gpuwizard.trainers import rendezvous
    from gpuwizard.trainers.demo import trainer as demo

    monkeypatch.setattr(demo, "current_python", lambda: "/opt/python3.12/bin/python3")
    monkeypatch.setattr(rendezvous, "LOOPBACK_DIR", Path("/opt/gpuwizard/loopback"))
    monkeypatch.delenv("PYTHONPATH", raising=False)


def snap_app() -> GpuWizardApp:
    return GpuWizardApp(preset=load_preset_file(SNAP_PRESET))


async def wizard_ready(pilot, step: int) -> None:
    """Wait for the real condition (step built, plan drawn), not a fixed time: CI machines are slow and busy."""
    app = pilot.app
    for _ in range(400):
        screen = app.screen
        if (
            isinstance(screen, WizardScreen)
            and screen.step == step
            and screen.plan is not None
            and screen.built(STEPS[step][0]) is not None
        ):
            break
        if isinstance(screen, WizardScreen) and screen.plan is not None and screen.step < step:
            await pilot.press("ctrl+n")
        await pilot.pause(0.05)
    await settle(pilot, app)
    assert isinstance(app.screen, WizardScreen) and app.screen.step == step and app.screen.plan is not None


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
@pytest.mark.parametrize("step", range(5))
def test_snapshot_wizard_steps(snap_compare, gpus, fixed_python, size, step):
    async def before(pilot):
        await wizard_ready(pilot, 0)
        for widget in pilot.app.screen.query(Input):
            widget.cursor_blink = False
        await wizard_ready(pilot, step)
        for widget in pilot.app.screen.query(Input):
            widget.cursor_blink = False
        await settle(pilot, pilot.app)

    assert snap_compare(snap_app(), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_snapshot_monitor_of_a_finished_run(snap_compare, monkeypatch, size, shown_folder):
    import shutil

    from gpuwizard.runs.rundir import RunDir

    data = shown_folder("/tmp/gpuwizard-snapshot-data")  # the banner shows the run's folder
    run_dir = data / "runs" / "20261129-120000-demo-cpu"
    shutil.copytree(DATA / "runs" / "20261129-120000-demo-cpu", run_dir)
    monkeypatch.setenv("GPUWIZARD_DATA_DIR", str(data))

    async def before(pilot):
        for _ in range(400):
            screen = pilot.app.screen
            if (
                isinstance(screen, MonitorScreen)
                and screen.query_one("#log").line_count == 75
                and screen.query_one("#banner").display
                and len(screen.query("TelemetryRow")) == 2  # both ranks drawn: the log's height is final
                and screen.query_one("#log").max_scroll_y > 0
                and screen.query_one("#log").is_vertical_scroll_end
            ):
                break
            await pilot.pause(0.05)
        await pilot.pause(0.3)
        assert (
            pilot.app.screen.query_one("#log").line_count == 75
            and pilot.app.screen.query_one("#log").is_vertical_scroll_end
        )

    assert snap_compare(GpuWizardApp(run=RunDir(run_dir)), terminal_size=size, run_before=before)


async def test_monitor_shows_a_row_per_node_and_gpu_or_says_telemetry_is_local_only(tmp_path, monkeypatch):
    """A SLURM job's GPU samples arrive as gpu-<node>.jsonl in the run folder; when none arrive, the folder is not
    shared with the nodes and the monitor says so."""
    import shutil
    import time as clock

    from gpuwizard.runs.records import GpuSample
    from gpuwizard.runs.rundir import RunDir

    run_dir = tmp_path / "runs" / "20261129-120000-demo-cpu"
    shutil.copytree(DATA / "runs" / "20261129-120000-demo-cpu", run_dir)
    run = RunDir(run_dir)
    run.update_status(slurm_job_id="41", slurm_state="RUNNING", device="cuda", started=clock.time() - 120)
    app = GpuWizardApp(run=run)
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen), 30)
        note = app.screen.query_one("#telemetry-note")
        assert await wait_until(pilot, lambda: note.display, 30)
        assert "telemetry is local only" in str(note.render())
        for node in ("n1", "n2"):
            sample = GpuSample(t=clock.time(), index=0, utilization=87.0, memory_used_mb=20000, node=node)
            run.append_line(run_dir / f"gpu-{node}.jsonl", sample)
        assert await wait_until(
            pilot, lambda: {"gpu-n1-0", "gpu-n2-0"} <= {row.key for row in app.screen.query("TelemetryRow")}, 30
        )
        assert await wait_until(pilot, lambda: not note.display, 30)


@pytest.mark.slow
def test_terminal_loss_ends_the_monitor_but_not_the_job(tmp_path):
    """An SSH drop without SIGHUP (own session): the TUI exits, the job runs on and finishes."""
    import os

    from gpuwizard.runner.launch.prepare import prepare_run
    from gpuwizard.runner.launch.start import start_run

    quick_demo(tmp_path, "tui-ssh", "trainer_options: {step_time_s: 0.05}")
    run = start_run(prepare_run(load_preset("tui-ssh")))
    tui, master = on_terminal(["attach", run.run_id])
    shown = bytearray()
    read_terminal(master, shown, lambda: drawn(shown, "View") or tui.poll() is not None, 60)
    assert tui.poll() is None, "the monitor is up"
    os.close(master)
    tui.wait(timeout=15)
    assert run.is_active(), "the job outlives its monitor"
    poll_until(lambda: not run.is_active(), 120, "the job's end")
    assert run.status().state == "finished"
