"""The wizard: five steps over one Preset model, with a live plan and the exact command."""

from __future__ import annotations

import shlex
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.reactive import reactive
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import ContentSwitcher, DataTable, Footer, Input, Label, RadioButton, RadioSet, SelectionList, Static

from gpuwizard import datasets
from gpuwizard.catalog import load_catalog
from gpuwizard.errors import UserError
from gpuwizard.gpus.inventory import Inventory, read_inventory
from gpuwizard.plan import Plan, build_command, hardware_from_inventory, make_plan, scale
from gpuwizard.preset import Preset, save_user_preset, with_field
from gpuwizard.trainers import get_trainer
from gpuwizard.trainers.base import BuildContext, LaunchSpec, free_port
from gpuwizard.tui.messages import InventoryReady, PlanReady, RunStarted
from gpuwizard.tui.widgets import Edit, FieldInput, FieldSelect, InvalidInput, options_form, row

REPLAN_DELAY_S = 0.12
STEPS = [("gpus", "GPUs"), ("policy", "Policy & data"), ("trainer", "Trainer & batch"), ("scaling", "Scaling"), ("preview", "Preview")]
RULES = ["none", "linear_lr", "sqrt_lr", "divide_steps"]
RULES_HELP = "none keeps lr and steps as tuned · linear_lr: lr x k plus a warmup · sqrt_lr: lr x sqrt(k) · divide_steps: steps / k"


class GpusStep(VerticalScroll):
    def compose(self) -> ComposeResult:
        preset: Preset = self.app.screen.preset  # type: ignore[attr-defined]
        yield Static("Detecting GPUs...", id="gpu-info")
        yield SelectionList[int](id="gpu-select")
        yield Static("", id="topology")
        yield row("device", FieldSelect("hardware.device", ["auto", "cuda", "cpu"], preset.hardware.device), "cpu: processes on the CPU with gloo")
        yield row("GPUs / procs", FieldInput("hardware.gpus", "int", preset.hardware.gpus), "per node")
        yield row("nodes", FieldInput("hardware.nodes", "int", preset.hardware.nodes))

    def show(self, preset: Preset, inventory: Inventory | None) -> None:
        info = self.query_one("#gpu-info", Static)
        select = self.query_one("#gpu-select", SelectionList)
        self.query_one("#f-hardware-gpus", FieldInput).set_quietly(preset.hardware.gpus)
        if inventory is None:
            return
        if not inventory.has_gpus:
            cpu = inventory.cpu
            info.update(Content.assemble((inventory.message or "no GPUs", "bold $warning"), f"\nCPU: {cpu.model}, {cpu.cores_logical} cores, {cpu.memory_total_gb:g} GB RAM.\n"
                                      "Plan for a GPU machine here (device auto or cuda), or choose device cpu for a dry run with gloo."))
            select.display = False
            return
        visible = inventory.visible()
        info.update(f"{len(inventory.gpus)} NVIDIA GPU(s), driver {inventory.driver_version}, CUDA {inventory.cuda_version}"
                    + (f", CUDA_VISIBLE_DEVICES={inventory.cuda_visible_devices}" if inventory.cuda_visible_devices is not None else "")
                    + ". Space toggles a device; the job uses the selected ones.")
        chosen = set(preset.hardware.devices if preset.hardware.devices is not None else [g.cuda_index for g in visible[: preset.hardware.gpus]])
        if select.option_count != len(visible):
            select.clear_options()
            for g in visible:
                busy = f"busy: {len(g.processes)} proc" if g.processes else "idle"
                mem = f"{(g.memory_used_mb or 0) / 1024:.1f}/{(g.memory_total_mb or 0) / 1024:.0f} GB"
                select.add_option((f"GPU{g.cuda_index} {g.name} · {mem} · {g.utilization_gpu or 0:.0f}% · {busy}", g.cuda_index, g.cuda_index in chosen))
        picked = [g for g in visible if g.cuda_index in chosen]
        lines = []
        for i, a in enumerate(picked):
            for b in picked[i + 1 :]:
                link = inventory.link(a.index, b.index)
                if link:
                    lines.append(f"GPU{a.cuda_index} <-> GPU{b.cuda_index}: {link.label}, P2P read {link.p2p_read or 'unavailable'}")
        self.query_one("#topology", Static).update("\n".join(lines))

    @on(SelectionList.SelectedChanged)
    def _picked(self, event: SelectionList.SelectedChanged) -> None:
        chosen = sorted(event.selection_list.selected)
        if chosen:
            self.post_message(Edit("hardware", {"gpus": len(chosen), "devices": chosen}))


class PolicyStep(VerticalScroll):
    fits_for: tuple[float, str] | None = None

    def compose(self) -> ComposeResult:
        table = DataTable(id="policies", cursor_type="row", zebra_stripes=True)
        table.add_columns("policy", "params", "VRAM need", "fits", "trainers")
        yield table
        yield Static("", id="policy-summary")

    def fill(self, preset: Preset) -> None:
        table = self.query_one("#policies", DataTable)
        table.clear()
        for entry in load_catalog().values():
            params = f"{entry.params_m:g}M" if entry.params_m and entry.params_m < 1000 else (f"{entry.params_m / 1000:g}B" if entry.params_m else "?")
            table.add_row(entry.key, params, f"{entry.vram.full_gb:g} GB @{entry.vram.at_batch}", "", ", ".join(entry.trainers), key=entry.key)
        keys = list(load_catalog())
        if preset.policy in keys:
            table.move_cursor(row=keys.index(preset.policy))
        self.filled = True

    def show(self, preset: Preset, plan: Plan | None) -> None:
        entry = load_catalog()[preset.policy]
        table = self.query_one("#policies", DataTable)
        if plan and plan.fits.device_gb and (plan.fits.device_gb, preset.mixed_precision) != self.fits_for:
            self.fits_for = (plan.fits.device_gb, preset.mixed_precision)
            for key, policy in load_catalog().items():
                need = policy.estimate_gb(policy.vram.at_batch, preset.mixed_precision)
                table.update_cell(key, table.ordered_columns[3].key, "yes" if need <= plan.fits.device_gb * 0.92 else "no")
        self.query_one("#policy-summary", Static).update(f"{entry.title}: {entry.summary}")

    @on(DataTable.RowHighlighted, "#policies")
    def _chosen(self, event: DataTable.RowHighlighted) -> None:
        """Only the user's cursor moves choose a policy (filling the table highlights row 0 first)."""
        if event.row_key.value and self.has_focus_within:
            self.post_message(Edit("policy", event.row_key.value))


class DatasetBox(Vertical):
    def compose(self) -> ComposeResult:
        preset: Preset = self.app.screen.preset  # type: ignore[attr-defined]
        yield row("dataset id", FieldInput("dataset.repo_id", "str", preset.dataset.repo_id))
        yield row("local folder", FieldInput("dataset.root", "optional_str", preset.dataset.root, placeholder="optional: a LeRobot dataset folder"))
        yield Static("", id="dataset-info")

    def show(self, preset: Preset) -> None:
        info = self.query_one("#dataset-info", Static)
        if not preset.dataset.root:
            info.update("No local folder: the trainer loads the dataset by id (cache or Hub).")
            return
        try:
            meta = datasets.read_metadata(Path(preset.dataset.root).expanduser())
        except datasets.DatasetError as exc:
            info.update(Content.styled(str(exc), "bold $warning"))
            return
        info.update(meta.summary())


class TrainerStep(VerticalScroll):
    shown_rows: list[tuple[str, str, str]] = []

    def compose(self) -> ComposeResult:
        preset: Preset = self.app.screen.preset  # type: ignore[attr-defined]
        yield row("trainer", FieldSelect("trainer", load_catalog()[preset.policy].trainers, preset.trainer))
        yield Static("", id="batch-meaning")
        with Horizontal(id="batch-area"):
            with Vertical(id="batch-fields"):
                yield row("batch size", FieldInput("batch.size", "int", preset.batch.size))
                yield row("grad accum", FieldInput("batch.grad_accum", "int", preset.batch.grad_accum))
                yield row("lr", FieldInput("optim.lr", "optional_float", preset.optim.lr, placeholder="policy default"))
                yield row("steps", FieldInput("optim.steps", "int", preset.optim.steps))
                yield row("precision", FieldSelect("mixed_precision", ["no", "bf16", "fp16"], preset.mixed_precision))
                yield row("strategy", FieldSelect("strategy", ["auto", "single", "ddp", "fsdp"], preset.strategy))
            table = DataTable(id="batch-table", cursor_type="none", show_cursor=False)
            table.add_columns("GPUs", "per device", "effective")
            yield table
        yield Label("Launch", classes="section")
        yield row("python", FieldInput("launch.python", "optional_str", preset.launch.python, placeholder="training env interpreter (default: PATH)"))
        yield row("output dir", FieldInput("output_dir", "optional_str", preset.output_dir, placeholder=f"outputs/train/{preset.name}"))
        yield Label("Trainer options", classes="section")
        yield Vertical(*options_form(get_trainer(preset.trainer).Options, preset.trainer_options), id="options")

    async def rebuild_options(self, preset: Preset) -> None:
        box = self.query_one("#options", Vertical)
        await box.remove_children()
        await box.mount_all(options_form(get_trainer(preset.trainer).Options, preset.trainer_options))
        trainer_select = self.query_one("#f-trainer", FieldSelect)
        with trainer_select.prevent(FieldSelect.Changed):
            trainer_select.set_options([(t, t) for t in load_catalog()[preset.policy].trainers])
            trainer_select.value = preset.trainer

    def show(self, preset: Preset, plan: Plan | None) -> None:
        if plan is None:
            return
        self.query_one("#batch-meaning", Static).update(Content.assemble(("What the number means: ", "bold"), plan.batch_meaning))
        rows = [(f"{r['gpus']}{' <' if r['chosen'] else ''}", "-" if r["per_device"] is None else str(r["per_device"]), "-" if r["effective"] is None else str(r["effective"]))
                for r in plan.batch_table]
        if rows != self.shown_rows:
            self.shown_rows = rows
            table = self.query_one("#batch-table", DataTable)
            table.clear()
            for cells in rows:
                table.add_row(*cells)


class ScalingStep(VerticalScroll):
    def compose(self) -> ComposeResult:
        preset: Preset = self.app.screen.preset  # type: ignore[attr-defined]
        with RadioSet(id="rules"):
            for rule in RULES:
                yield RadioButton(rule, value=rule == preset.scaling.rule, id=f"rule-{rule}")
        yield Static(RULES_HELP, classes="field-hint")
        yield row("ref. GPUs", FieldInput("scaling.reference_gpus", "int", preset.scaling.reference_gpus), "the GPU count lr and steps were tuned on")
        yield Static("", id="advice")

    def show(self, preset: Preset, plan: Plan | None) -> None:
        if plan is None:
            return
        k = plan.scale_factor or 1.0
        trainer, policy = get_trainer(preset.trainer), load_catalog()[preset.policy]
        default_warmup = trainer.default_warmup_steps(preset, policy, preset.optim.steps)
        self.query_one("#rules", RadioSet).border_title = f"k = {k:g}: effective batch {plan.effective_batch} vs {plan.reference_effective_batch} on {plan.reference_gpus} GPU(s)"
        for rule in RULES:
            lr, steps, warmup, _, _ = scale(rule, k, plan.base_lr, preset.optim.steps, default_warmup, preset.optim.warmup_ratio)
            self.query_one(f"#rule-{rule}", RadioButton).label = f"{rule:<13} lr {lr:.3g} · {steps} steps · warmup {warmup or 0}"
        self.query_one("#advice", Static).update("\n".join(f"- {a}" for a in plan.advice))

    @on(RadioSet.Changed, "#rules")
    def _rule(self, event: RadioSet.Changed) -> None:
        self.post_message(Edit("scaling.rule", event.pressed.id.removeprefix("rule-")))


class PreviewStep(VerticalScroll):
    def compose(self) -> ComposeResult:
        yield Static("", id="command")
        yield Static("", id="environment")
        yield Static("", id="problems")

    def show(self, plan: Plan | None, spec: LaunchSpec | None) -> None:
        if plan is None:
            return
        command = self.query_one("#command", Static)
        if spec is None:
            command.update(Content.styled("No command: fix the errors below first.", "bold $error"))
        else:
            command.update(Content.styled(pretty_command(spec.argv), "bold"))
            env = [f"{k}={v}" for k, v in spec.env.items()] + [f"unset {n}" for n in spec.unset]
            self.query_one("#environment", Static).update(f"workdir: {spec.workdir}\nenv: " + (" ".join(env) or "(unchanged)"))
        parts = [(f"{level}: {p.paragraph()}\n", style)
                 for level, items, style in (("error", plan.errors, "bold $error"), ("warning", plan.warnings, "$warning"), ("note", plan.notes, "$text-muted"))
                 for p in items]
        self.query_one("#problems", Static).update(Content.assemble(*parts))


def pretty_command(argv: list[str], width: int = 74) -> str:
    """The argv packed into continuation lines, keeping each flag next to its value."""
    tokens: list[str] = []
    for arg in argv:
        quoted = shlex.quote(arg)
        if tokens and tokens[-1].startswith("-") and "=" not in tokens[-1] and not arg.startswith("-"):
            tokens[-1] += " " + quoted
        else:
            tokens.append(quoted)
    lines, current = [], ""
    for token in tokens:
        if current and len(current) + 1 + len(token) > width:
            lines.append(current)
            current = "  " + token
        else:
            current = f"{current} {token}" if current else token
    return " \\\n".join([*lines, current])


class WizardScreen(Screen[None]):
    """Steps on the left of the footer, a live one-line plan summary, keys for everything."""

    BINDINGS = [
        Binding("ctrl+n", "next", "Next", priority=True),
        Binding("escape", "back", "Back"),
        Binding("ctrl+r", "run", "Run", priority=True),
        Binding("ctrl+s", "save", "Save", priority=True),
        Binding("ctrl+o", "open", "Open", priority=True),
        Binding("ctrl+y", "copy", "Copy", priority=True),
        Binding("ctrl+e", "export", "Export", priority=True),
        Binding("ctrl+g", "smoke", "Smoke run", show=False, priority=True),
    ]
    step = reactive(0, bindings=True)

    def __init__(self, preset: Preset):
        super().__init__()
        self.preset = preset
        self.inventory: Inventory | None = None
        self.plan: Plan | None = None
        self.ctx: BuildContext | None = None
        self.spec: LaunchSpec | None = None
        self.master_port = preset.launch.master_port or free_port()
        self.plan_seq = 0
        self.input_error: str | None = None
        self.replan_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="steps")
        with ContentSwitcher(initial="step-gpus", id="switcher"):
            yield GpusStep(id="step-gpus")
            with VerticalScroll(id="step-policy"):
                yield PolicyStep(id="policy-step")
                yield DatasetBox(id="dataset-box")
            yield TrainerStep(id="step-trainer")
            yield ScalingStep(id="step-scaling")
            yield PreviewStep(id="step-preview")
        yield Static("", id="summary")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one(PolicyStep).fill(self.preset)
        self.query_one(DatasetBox).show(self.preset)
        self.watch_step(0)
        self.detect_gpus()
        self.replan()

    # -- background work: workers post messages, handlers own the state --------------------
    @work(thread=True, group="inventory", exit_on_error=False)
    def detect_gpus(self) -> None:
        self.post_message(InventoryReady(read_inventory()))

    @work(thread=True, exclusive=True, group="plan", exit_on_error=False)
    def replan(self) -> None:
        self.plan_seq += 1
        seq, preset, inventory = self.plan_seq, self.preset, self.inventory
        hardware = hardware_from_inventory(inventory, preset) if inventory else None
        plan, ctx = make_plan(preset, hardware=hardware, master_port=self.master_port)
        self.post_message(PlanReady(seq, plan, ctx, None if plan.errors else build_command(ctx)))

    @on(InventoryReady)
    def _inventory(self, message: InventoryReady) -> None:
        self.inventory = message.inventory
        if not message.inventory.has_gpus and self.preset.hardware.device == "auto":
            self.query_one("#summary", Static).update("No NVIDIA GPU here: planning for CUDA; set precision/device in the preset for a CPU dry run.")
        self.query_one(GpusStep).show(self.preset, self.inventory)
        self.replan()

    @on(PlanReady)
    def _plan(self, message: PlanReady) -> None:
        if message.seq != self.plan_seq:
            return
        could_run = self.plan is None or not self.plan.errors
        self.plan, self.ctx, self.spec = message.plan, message.ctx, message.spec
        self.render_step()
        self.refresh_summary()
        if could_run != (not self.plan.errors):
            self.refresh_bindings()  # the footer is rebuilt only when Run turns on or off

    def render_step(self) -> None:
        """Only the visible step is redrawn; the others are drawn when entered (keeps typing fast)."""
        name = STEPS[self.step][0]
        if name == "policy":
            self.query_one(PolicyStep).show(self.preset, self.plan)
        elif name == "trainer":
            self.query_one(TrainerStep).show(self.preset, self.plan)
        elif name == "scaling":
            self.query_one(ScalingStep).show(self.preset, self.plan)
        elif name == "preview":
            self.query_one(PreviewStep).show(self.plan, self.spec)

    @on(Edit)
    async def _edit(self, message: Edit) -> None:
        message.stop()
        old = self.preset
        try:
            if message.path == "hardware":
                new = with_field(with_field(old, "hardware.devices", None), "hardware.gpus", message.value["gpus"])
                new = with_field(new, "hardware.devices", message.value["devices"])
            elif message.path == "hardware.gpus":
                new = with_field(with_field(old, "hardware.devices", None), "hardware.gpus", message.value)
            elif message.path == "policy" and message.value != old.policy:
                # follow the new policy's preferred trainer unless the user picked a non-default one
                new = with_field(old, "policy", message.value)
                trainers = load_catalog()[message.value].trainers
                user_choice = old.trainer != load_catalog()[old.policy].trainers[0]
                if old.trainer not in trainers or (not user_choice and old.trainer != trainers[0]):
                    new = with_field(with_field(new, "trainer_options", {}), "trainer", trainers[0])
            elif message.path == "trainer" and message.value != old.trainer:
                new = with_field(with_field(old, "trainer_options", {}), "trainer", message.value)
            else:
                new = with_field(old, message.path, message.value)
        except UserError as exc:
            self.input_error = exc.problems[0].paragraph()
            self.refresh_summary()
            return
        self.input_error = None
        self.preset = new
        if new.trainer != old.trainer or new.policy != old.policy:
            await self.query_one(TrainerStep).rebuild_options(new)
        if new.dataset != old.dataset:
            self.query_one(DatasetBox).show(new)
        if new.hardware != old.hardware and self.inventory:
            self.query_one(GpusStep).show(new, self.inventory)
        self.replan_soon()

    def replan_soon(self) -> None:
        """Typing fast plans once, 120 ms after the last key."""
        if self.replan_timer is not None:
            self.replan_timer.stop()
        self.replan_timer = self.set_timer(REPLAN_DELAY_S, self.replan)

    @on(InvalidInput)
    def _invalid(self, message: InvalidInput) -> None:
        self.input_error = f"{message.path} = {message.text!r}: {message.reason}."
        self.refresh_summary()

    def refresh_summary(self) -> None:
        summary = self.query_one("#summary", Static)
        plan = self.plan
        if self.input_error:
            summary.update(Content.styled(self.input_error, "bold $error"))
            return
        if plan is None:
            summary.update("Planning...")
            return
        state = [(" ready ", "bold reverse $success")] if not plan.errors else [(f" {len(plan.errors)} error(s) ", "bold reverse $error"), (" " + plan.errors[0].paragraph()[:160], "$error")]
        summary.update(Content.assemble(
            f"{plan.policy} · {plan.trainer} · {plan.world_size}x{plan.device} · per device {plan.per_device_batch} · effective {plan.effective_batch} · "
            f"lr {plan.lr:.3g} · {plan.steps} steps · {plan.strategy} ", *state))

    # -- steps ------------------------------------------------------------------------------
    def watch_step(self, step: int) -> None:
        switcher = self.query_one("#switcher", ContentSwitcher)
        switcher.current = f"step-{STEPS[step][0]}"
        first = next((w for w in switcher.visible_content.query("*") if w.focusable), None) if switcher.visible_content else None
        if first is not None:
            self.call_after_refresh(first.focus)
        if self.plan is not None:
            self.render_step()
        parts: list[tuple[str, str]] = []
        for i, (_, title) in enumerate(STEPS):
            parts.append((f" {i + 1} {title} ", "bold reverse $accent" if i == step else "$text-muted"))
            if i < len(STEPS) - 1:
                parts.append((">", "$text-muted"))
        self.query_one("#steps", Static).update(Content.assemble(*parts))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "next":
            return self.step < len(STEPS) - 1
        if action == "back":
            return self.step > 0
        if action in ("copy", "export"):
            return True if self.step == len(STEPS) - 1 else False
        if action == "run":
            return True if self.plan is None or not self.plan.errors else None
        return True

    def action_next(self) -> None:
        self.step = min(self.step + 1, len(STEPS) - 1)

    def action_back(self) -> None:
        self.step = max(self.step - 1, 0)

    def action_goto(self, step: int) -> None:
        self.step = step

    # -- actions ------------------------------------------------------------------------------
    def action_copy(self) -> None:
        if self.spec is None:
            self.notify("Nothing to copy: the plan has errors.", severity="error")
            return
        self.app.copy_to_clipboard(self.spec.shell())
        self.notify("Command copied to the clipboard (OSC 52: works over SSH in most terminals).")

    def action_export(self) -> None:
        if self.spec is None:
            self.notify("Nothing to export: the plan has errors.", severity="error")
            return
        from gpuwizard.tui.dialogs import AskText

        def write(path: str | None) -> None:
            if not path:
                return
            from gpuwizard.yamlio import atomic_write

            target = Path(path).expanduser()
            try:
                atomic_write(target, self.spec.script())
                target.chmod(0o755)
            except OSError as exc:
                self.notify(f"Could not write {target}: {exc}", severity="error")
                return
            self.notify(f"Wrote {target}")

        self.app.push_screen(AskText("Export as a shell script", "file", f"./{self.preset.name}.sh"), write)

    def action_save(self) -> None:
        from gpuwizard.tui.dialogs import AskText, Confirm

        def save(name: str | None, overwrite: bool = False) -> None:
            if not name:
                return
            try:
                preset = with_field(self.preset, "name", name)
                path = save_user_preset(preset, overwrite=overwrite)
            except UserError as exc:
                if "already exists" in exc.paragraph() and not overwrite:
                    self.app.push_screen(Confirm(f"Replace your preset '{name}'?"), lambda yes: save(name, True) if yes else None)
                    return
                self.notify(exc.paragraph(), severity="error", timeout=8)
                return
            self.preset = preset
            self.notify(f"Saved preset {name} to {path}")

        self.app.push_screen(AskText("Save preset as", "name", self.preset.name), save)

    def action_open(self) -> None:
        from gpuwizard.tui.dialogs import PresetPicker

        self.app.push_screen(PresetPicker(), lambda preset: self.app.switch_screen(WizardScreen(preset)) if preset else None)

    def action_run(self, smoke: bool = False) -> None:
        if self.plan is not None and self.plan.errors:
            self.notify(self.plan.errors[0].paragraph(), severity="error", timeout=8)
            return
        self.notify("Checking and launching...")
        self.launch(self.preset, smoke)

    def action_smoke(self) -> None:
        self.action_run(smoke=True)

    @work(thread=True, exclusive=True, group="launch", exit_on_error=False)
    def launch(self, preset: Preset, smoke: bool) -> None:
        from gpuwizard.runner.launch import prepare_run, start_run

        try:
            prepared = prepare_run(preset, smoke=smoke, inventory=self.inventory)
            run = start_run(prepared, on_hang="report")
        except UserError as exc:
            self.post_message(RunStarted(None, exc.paragraph(), []))
            return
        self.post_message(RunStarted(run.path, None, [w.paragraph() for w in prepared.warnings]))

    @on(RunStarted)
    def _started(self, message: RunStarted) -> None:
        if message.error:
            self.notify(message.error, severity="error", timeout=10)
            return
        for warning in message.warnings:
            self.notify(warning, severity="warning", timeout=8)
        from gpuwizard.runner.rundir import RunDir
        from gpuwizard.tui.monitor import MonitorScreen

        self.app.push_screen(MonitorScreen(RunDir(message.run_path)))

