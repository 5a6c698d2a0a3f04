"""The wizard's job steps (trainer and batch, scaling) and the preview of the exact command."""

from __future__ import annotations

import math
import time

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.timer import Timer
from textual.widgets import DataTable, Label, RadioButton, RadioSet, Static

from gpuwizard.core.safetext import safe_text
from gpuwizard.core.secrets import redacted
from gpuwizard.core.units import counted, fmt_lr
from gpuwizard.model.catalog import load_catalog
from gpuwizard.model.job import BuildContext, LaunchSpec, Plan
from gpuwizard.model.preset import Preset
from gpuwizard.planning.plan import trainers_for
from gpuwizard.planning.scaling import scale
from gpuwizard.trainers.registry import get_trainer
from gpuwizard.tui.base.messages import TrainerChecked
from gpuwizard.tui.widgets.fields import Edit, FieldInput, FieldSelect, Step, options_form, row
from gpuwizard.tui.wizard.command import pretty_command
from gpuwizard.tui.wizard.doctor_line import DoctorLine

RULES = ["none", "linear_lr", "sqrt_lr", "divide_steps"]
RULES_HELP = (
    "none keeps lr and steps as tuned · linear_lr: lr x k plus a warmup · sqrt_lr: lr x sqrt(k) · "
    "divide_steps: steps / k"
)


class TrainerStep(Step):
    BINDINGS = [Binding("f6", "find_env", "Find env")]
    shown_rows: list[tuple[str, str, str]] = []

    def compose(self) -> ComposeResult:
        preset = self.preset
        yield row("trainer", FieldSelect("trainer", trainers_for(load_catalog()[preset.policy]), preset.trainer))
        yield Static("", id="batch-meaning")
        with Horizontal(id="batch-area"):
            with Vertical(id="batch-fields"):
                yield row("batch size", FieldInput("batch.size", "int", preset.batch.size))
                yield row("grad accum", FieldInput("batch.grad_accum", "int", preset.batch.grad_accum))
                yield row("lr", FieldInput("optim.lr", "optional_float", preset.optim.lr, placeholder="policy default"))
                yield row("steps", FieldInput("optim.steps", "int", preset.optim.steps))
                yield row("precision", FieldSelect("mixed_precision", ["no", "bf16", "fp16"], preset.mixed_precision))
                yield row("strategy", FieldSelect("strategy", ["auto", "single", "ddp", "fsdp"], preset.strategy))
                yield row(
                    "wrap modules",
                    FieldInput("fsdp.wrap_modules", "list", preset.fsdp.wrap_modules, placeholder="FSDP unit classes"),
                    classes="fsdp",
                )
                yield row(
                    "min params",
                    FieldInput(
                        "fsdp.min_num_params",
                        "optional_int",
                        preset.fsdp.min_num_params,
                        placeholder="or wrap modules this large",
                    ),
                    classes="fsdp",
                )
            table: DataTable[str] = DataTable(id="batch-table", cursor_type="none", show_cursor=False)
            table.add_columns("GPUs", "per device", "effective")
            yield table
        yield Label("Launch", classes="section")
        yield row(
            "python",
            FieldInput(
                "launch.python",
                "optional_str",
                preset.launch.python,
                placeholder="training env interpreter (default: PATH; f6 finds one)",
            ),
        )
        yield row(
            "workdir",
            FieldInput(
                "launch.workdir", "optional_str", preset.launch.workdir, placeholder="the job's folder (default: here)"
            ),
        )
        yield row(
            "output dir",
            FieldInput(
                "output_dir", "optional_str", preset.output_dir, placeholder=f"outputs/train/{preset.name}/<run-id>"
            ),
        )
        yield row(
            "env",
            FieldInput("launch.env", "env", preset.launch.env, placeholder="NAME=VALUE ... e.g. NCCL_P2P_DISABLE=1"),
        )
        yield row(
            "extra args",
            FieldInput("launch.extra_args", "list", preset.launch.extra_args, placeholder="appended to the trainer's"),
        )
        yield row("hang after s", FieldInput("monitor.hang_timeout_s", "float", preset.monitor.hang_timeout_s))
        yield row(
            "first step s",
            FieldInput(
                "monitor.first_step_timeout_s",
                "optional_float",
                preset.monitor.first_step_timeout_s,
                placeholder="longer default",
            ),
            "allowance for downloads and compilation",
        )
        yield Label("Trainer options", classes="section")
        yield Vertical(*options_form(get_trainer(preset.trainer).Options, preset.trainer_options), id="options")

    def on_mount(self) -> None:
        self.sync(self.preset)

    def action_find_env(self) -> None:
        """Pick launch.python from the environments found on this machine."""
        from gpuwizard.tui.dialogs.envpicker import EnvPicker

        def chosen(python: str | None) -> None:
            if python:
                field = self.query_one("#f-launch-python", FieldInput)
                field.value = python  # posts Edit, as typing it would
                field.focus()

        self.app.push_screen(EnvPicker(self.preset.trainer, self.preset.launch.workdir), chosen)

    def sync(self, preset: Preset) -> None:
        """The FSDP wrapping fields with strategy fsdp."""
        for widget in self.query(".fsdp"):
            widget.display = preset.strategy == "fsdp" or preset.fsdp != type(preset.fsdp)()
        self.call_after_refresh(self.keep_focus_reachable)

    async def rebuild_options(self, preset: Preset) -> None:
        box = self.query_one("#options", Vertical)
        await box.remove_children()
        await box.mount_all(options_form(get_trainer(preset.trainer).Options, preset.trainer_options))
        trainer_select = self.query_one("#f-trainer", FieldSelect)
        with trainer_select.prevent(FieldSelect.Changed):
            trainer_select.set_options([(t, t) for t in trainers_for(load_catalog()[preset.policy])])
            trainer_select.value = preset.trainer

    def show(self, preset: Preset, plan: Plan | None) -> None:
        if plan is None:
            return
        self.query_one("#batch-meaning", Static).update(
            Content.assemble(("What the number means: ", "bold"), plan.batch_meaning, scaled_words(plan))
        )
        rows = [
            (
                f"{r.gpus}{' <' if r.chosen else ''}",
                "-" if r.per_device is None else str(r.per_device),
                "-" if r.effective is None else str(r.effective),
            )
            for r in plan.batch_table
        ]
        if rows != self.shown_rows:
            self.shown_rows = rows
            table = self.query_one("#batch-table", DataTable)
            table.clear()
            for cells in rows:
                table.add_row(*cells)


def scaled_words(plan: Plan) -> str:
    """The lr and steps the scaling rule trains with where they are not the fields' (the plan line under the step
    says them), with why: the fields hold the values tuned on the reference count."""
    changed = [f"lr {fmt_lr(plan.base_lr)} -> {fmt_lr(plan.lr)}"] if not math.isclose(plan.lr, plan.base_lr) else []
    changed += [f"steps {plan.base_steps} -> {plan.steps}"] if plan.steps != plan.base_steps else []
    if not changed:
        return ""
    tuned = counted(plan.reference_gpus, plan.device)
    return (
        f"\nOn {counted(plan.world_size, plan.device)} the {plan.rule} rule trains with {', '.join(changed)} "
        f"(the fields are as tuned on {tuned}; see Scaling)."
    )


class ScalingStep(Step):
    def compose(self) -> ComposeResult:
        preset = self.preset
        with RadioSet(id="rules"):
            for rule in RULES:
                yield RadioButton(rule, value=rule == preset.scaling.rule, id=f"rule-{rule}")
        yield Static(RULES_HELP, classes="field-hint")
        yield row(
            "ref. GPUs",
            FieldInput("scaling.reference_gpus", "int", preset.scaling.reference_gpus),
            "the GPU count lr and steps were tuned on",
        )
        yield row(
            "warmup ratio",
            FieldInput(
                "optim.warmup_ratio", "optional_float", preset.optim.warmup_ratio, placeholder="trainer default"
            ),
            "a fraction of steps, e.g. 0.05",
        )
        yield row(
            "GPU-hour cost",
            FieldInput("costs.gpu_hour", "optional_float", preset.costs.gpu_hour, placeholder="not shown"),
            "price per GPU-hour, for the estimates",
        )
        yield Static("", id="estimates")
        yield Static("", id="probe-recommendation")
        yield Static("", id="advice")

    def show(self, preset: Preset, plan: Plan | None) -> None:
        if plan is None:
            return
        self.show_probe(preset, plan)
        k = plan.scale_factor or 1.0
        trainer, policy = get_trainer(preset.trainer), load_catalog()[preset.policy]
        self.query_one("#rules", RadioSet).border_title = (
            f"k = {k:g}: effective batch {plan.effective_batch} vs {plan.reference_effective_batch} "
            f"on {counted(plan.reference_gpus, plan.device)}"
        )
        for rule in RULES:
            lr, steps, warmup, _, _ = scale(
                rule,
                k,
                plan.base_lr,
                preset.optim.steps,
                lambda steps: trainer.default_warmup_steps(preset, policy, steps, plan.trainer_steps_per_update),
                preset.optim.warmup_ratio,
            )
            chosen = "  < chosen" if rule == preset.scaling.rule else ""  # in words too: a monochrome dot is no mark
            self.query_one(
                f"#rule-{rule}", RadioButton
            ).label = f"{rule:<13} lr {lr:.3g} · {steps} steps · warmup {warmup or 0}{chosen}"
        self.query_one("#estimates", Static).update(estimates_text(plan))
        self.query_one("#advice", Static).update("\n".join(f"- {a}" for a in plan.advice))

    @on(RadioSet.Changed, "#rules")
    def _rule(self, event: RadioSet.Changed) -> None:
        rule = event.pressed.id  # every button is made with one: rule-<name>
        if rule is not None:
            self.post_message(Edit("scaling.rule", rule.removeprefix("rule-")))

    def show_probe(self, preset: Preset, plan: Plan) -> None:
        """The newest probe's recommendation in one line, where the estimates use a probe (else the line is hidden)."""
        from gpuwizard.analysis.probe.results import newest_probe
        from gpuwizard.analysis.probe.verdict import recommendation_line
        from gpuwizard.core.safetext import safe_line

        line = self.query_one("#probe-recommendation", Static)
        probe = newest_probe(preset.name) if any(e.basis == "probed" for e in plan.estimates) else None
        line.display = probe is not None
        if probe is not None:
            line.update(Content(safe_line(recommendation_line(probe))))


def estimates_text(plan: Plan) -> str:
    """Time, GPU-hours and cost per GPU count, each with its source (the chosen count marked)."""
    from gpuwizard.core.units import device_unit, fmt_hours
    from gpuwizard.planning.report import estimate_notes

    hours_of, hours_unit = ("GPU-hours", "GPU-h") if plan.device == "cuda" else ("process-hours", "proc-h")
    lines = [f"time and cost (wall · {hours_of} · cost · basis; `gpuwizard plan` names each source):"]
    width = max((len(device_unit(plan.device, e.gpus)) for e in plan.estimates), default=0)
    for e in plan.estimates:
        mark = ">" if e.gpus == plan.world_size else " "
        hours = f"{e.gpu_hours:.2f}" if e.gpu_hours is not None else "?"
        cost = f" · {e.cost:.2f}" if e.cost is not None else ""
        unit = device_unit(plan.device, e.gpus)
        lines.append(
            f"{mark}{e.gpus:>2} {unit:<{width}} {fmt_hours(e.wall_h):>7} · {hours} {hours_unit}{cost} · {e.basis}"
        )
    return "\n".join(lines + estimate_notes(plan))


CHECK_STYLES = {
    "accepted": "$success",
    "mismatch": "bold $error",
    "refused": "bold $error",
    "not checked": "$text-muted",
}


class PreviewStep(Step):
    shown: tuple[Plan, LaunchSpec | None, BuildContext | None] | None = None
    checked: str | None = None
    """The command the trainer-check line is about (its argv, environment and folder)."""
    asked_at: float | None = None
    """When the check under way was asked (monotonic), for its elapsed time."""
    asking_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="command")
        yield Static("", id="trainer-check")
        yield DoctorLine("", id="doctor")
        yield Static("", id="environment")
        yield Static("", id="problems")

    def on_resize(self) -> None:
        if self.shown is not None:
            self.show(*self.shown)  # the command is packed to the width: a flag never wraps inside itself

    def show(self, plan: Plan | None, spec: LaunchSpec | None, ctx: BuildContext | None = None) -> None:
        if plan is None:
            return
        self.shown = (plan, spec, ctx)
        self.ask_trainer(spec, ctx)
        self.query_one(DoctorLine).ask(spec, ctx)
        command = self.query_one("#command", Static)
        if spec is None:
            command.update(Content.styled("No command: fix the errors below first.", "bold $error"))
        else:
            # room for the continuation " \\" and for a scrollbar that a long preview brings
            width = (self.content_region.width or 78) - 2 - self.styles.scrollbar_size_vertical
            command.update(Content.styled(pretty_command(spec.argv, width), "bold"))
            env = [f"{k}={v}" for k, v in redacted(spec.env).items()] + [f"unset {n}" for n in spec.unset]
            self.query_one("#environment", Static).update(
                f"workdir: {spec.workdir}\nenv: " + (" ".join(env) or "(unchanged)")
            )
        parts = [
            (f"{level}: {p.paragraph()}\n", style)
            for level, items, style in (
                ("error", plan.errors, "bold $error"),
                ("warning", plan.warnings, "$warning"),
                ("note", plan.notes, "$text-muted"),
            )
            for p in items
        ]
        self.query_one("#problems", Static).update(Content.assemble(*parts))

    def ask_trainer(self, spec: LaunchSpec | None, ctx: BuildContext | None) -> None:
        """The trainer-check line: each new command is read by the installed trainer's own parser, off the UI."""
        line = self.query_one("#trainer-check", Static)
        if spec is None or ctx is None:
            self.checked = None
            self.asked()
            line.update("")
            return
        key = repr((spec.argv, sorted(spec.env.items()), spec.unset, spec.workdir))
        if key == self.checked:
            return
        self.checked = key
        self.asked_at = time.monotonic()
        self.say_asking()
        if self.asking_timer is None:
            self.asking_timer = self.set_interval(1.0, self.say_asking)
        self.check_in_background(key, spec, ctx)

    def say_asking(self) -> None:
        """The trainer check still under way, with its elapsed time (LeRobot's parser takes up to two minutes)."""
        if self.asked_at is None:
            return
        elapsed = time.monotonic() - self.asked_at
        said = f"trainer check: asking the installed trainer's own parser... {elapsed:.0f} s"
        self.query_one("#trainer-check", Static).update(Content.styled(said, "$text-muted"))

    def asked(self) -> None:
        self.asked_at = None
        if self.asking_timer is not None:
            self.asking_timer.stop()
            self.asking_timer = None

    @work(thread=True, exclusive=True, group="trainer-check", exit_on_error=False)
    def check_in_background(self, key: str, spec: LaunchSpec, ctx: BuildContext) -> None:
        from gpuwizard.trainers.registry import check_command

        try:
            self.post_message(TrainerChecked(key, check_command(ctx, spec)))
        except Exception as exc:  # the line says so; the preview and the launch's own check stay
            self.post_message(TrainerChecked(key, None, f"{type(exc).__name__}: {exc}"))

    @on(TrainerChecked)
    def _checked(self, message: TrainerChecked) -> None:
        if message.key != self.checked:
            return  # an older command's answer
        self.asked()
        line = self.query_one("#trainer-check", Static)
        if message.check is None:
            line.update(Content.styled(safe_text(f"trainer check failed: {message.error}"), "$warning"))
            return
        said = f"trainer check: {message.check.summary}"
        line.update(Content.styled(safe_text(said), CHECK_STYLES.get(message.check.status, "")))
