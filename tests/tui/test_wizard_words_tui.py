"""Issue 39 items 7 and 8 at 80x24: the Trainer step says why the plan line's lr is not its lr field's, the GPU
memory field's hint is no lr, and the Scaling step's chosen rule is marked in words (a monochrome terminal, the
terminal-16 theme and NO_COLOR draw every radio dot alike)."""

from __future__ import annotations

from textual.widgets import RadioButton

from gpuwizard.model.preset_files import load_preset
from gpuwizard.tui.app import GpuWizardApp
from gpuwizard.tui.widgets.fields import unconvertible
from support.tui import SIZE, goto, settle, text_of


def test_the_gpu_memory_field_hint_is_a_memory_not_an_lr():
    memory = unconvertible("hardware.gpu_memory_gb", "optional_float", "80G").paragraph()
    assert "such as 80 or 24" in memory and "0.0005" not in memory and "1e-4" not in memory
    assert "such as 0.0005 or 5e-4" in unconvertible("optim.lr", "optional_float", "x").paragraph()


async def test_the_trainer_step_says_the_lr_it_trains_with_and_the_chosen_rule_is_marked_in_words(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = GpuWizardApp(preset=load_preset("demo-cpu"))  # lr 0.001 tuned on 1 process, linear_lr on 2
    async with app.run_test(size=SIZE) as pilot:
        app.theme = "terminal-16"
        await settle(pilot, app)
        await goto(pilot, app, 2)
        steps = text_of(app.screen.query_one("#steps"))
        assert "1 GPUs > 2 Policy > 3 Trainer & batch > 4 Scaling > 5 Preview" in steps, "at 80 columns each step named"
        said = " ".join(text_of(app.screen.query_one("#batch-meaning")).split())
        assert "On 2 processes the linear_lr rule trains with lr 0.001 -> 0.002" in said, said
        assert "as tuned on 1 process" in said
        await goto(pilot, app, 3)

        def marked() -> list[str]:
            return [b.id or "" for b in app.screen.query(RadioButton) if str(b.label).endswith("< chosen")]

        assert marked() == ["rule-linear_lr"]
        await pilot.click("#rule-sqrt_lr")
        await settle(pilot, app)
        assert marked() == ["rule-sqrt_lr"], "the mark follows the choice"
        await goto(pilot, app, 2)
        said = " ".join(text_of(app.screen.query_one("#batch-meaning")).split())
        assert "the sqrt_lr rule trains with lr 0.001 -> 0.00141" in said, said


async def test_saving_a_shipped_preset_offers_a_name_of_its_own_and_words_for_this_job():
    """Saving from a shipped preset offered its own name (a copy by it shadows the shipped one) and its description
    (the example's "one GPU" on a 2-process job)."""
    from textual.widgets import Input

    from gpuwizard.tui.dialogs.modals import SaveAs
    from support.tui import wait_until

    app = GpuWizardApp(preset="demo-cpu")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, SaveAs), 30)
        offered = (app.screen.query_one("#answer", Input).value, app.screen.query_one("#description", Input).value)
        assert offered == ("my-demo-cpu", "demo with demo on 2 processes, from demo-cpu")


def test_the_status_lines_say_what_is_wrong_within_three_lines_at_80_columns(tmp_path):
    """Issue 39 item 6: one error's status took 5 of 24 lines (the Policy step's dataset went below the fold), and a
    long path cut a blocker to 'cannot start here dataset.root =…'."""
    from gpuwizard.core.errors import problem
    from gpuwizard.planning.plan import make_plan
    from gpuwizard.tui.wizard.summary import summary_content

    plan, _ = make_plan(load_preset("demo-cpu"))
    root = "/home/someone/datasets/so100_pick_and_place_with_a_long_name_v2"
    missing = problem("dataset.root", "is not a folder here (no meta/info.json under it)", "give it", value=root)
    blocked = summary_content(plan, [missing], 78).plain.splitlines()
    assert len(blocked) == 2 and blocked[1].startswith(" cannot start here  dataset.root: is not a folder here")
    plan.problems += [missing, problem("optim.steps", "is far too few " * 12, "raise it", value=1)]
    errors = summary_content(plan, [], 78).plain.splitlines()
    assert len(errors) <= 3 and errors[1].startswith(" 2 error(s)  dataset.root: is not a folder"), errors
    assert errors[-1].endswith("(1 more: ctrl+r lists them)"), errors


def test_a_preview_line_wider_than_the_screen_is_split_where_the_shell_joins_it_again():
    """Issue 39 item 6: the Preview cut the trailing ` \\` off a long line (a long dataset path), so the command copied
    from the screen broke. Each line now fits, and bash reads the copied text back as the same argv."""
    import subprocess

    from gpuwizard.tui.wizard.command import pretty_command

    argv = ["torchrun", "--nproc-per-node=2", "lerobot-train", "--dataset.root=/data/" + "so100_" * 20, "--x", "1"]
    argv += ["--job_name=it's " + "long " * 20]
    text = pretty_command(argv, 60)
    assert max(len(line) for line in text.splitlines()) <= 60, text
    echoed = subprocess.run(["bash", "-c", 'f() { printf "%s\\n" "$@"; }\nf ' + text], capture_output=True, text=True)
    assert echoed.stdout.split("\n")[:-1] == argv, echoed
