"""The wizard's five steps: each shows part of the plan and posts Edit messages for its fields."""

from __future__ import annotations

import shlex

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Label, RadioButton, RadioSet, SelectionList, Static

from gpuwizard import datasets
from gpuwizard.catalog import load_catalog
from gpuwizard.contracts import LaunchSpec, Plan
from gpuwizard.gpus.inventory import Inventory
from gpuwizard.plan import scale, trainers_for
from gpuwizard.preset import Preset
from gpuwizard.secrets import redacted
from gpuwizard.trainers import get_trainer
from gpuwizard.tui.widgets import Edit, FieldInput, FieldSelect, options_form, row

RULES = ["none", "linear_lr", "sqrt_lr", "divide_steps"]
RULES_HELP = (
    "none keeps lr and steps as tuned · linear_lr: lr x k plus a warmup · sqrt_lr: lr x sqrt(k) · "
    "divide_steps: steps / k"
)


class Step(VerticalScroll):
    """A wizard step, built when first shown from the wizard's current preset."""

    def __init__(self, preset: Preset, **kw: object):
        super().__init__(**kw)
        self.preset = preset


class GpusStep(Step):
    def compose(self) -> ComposeResult:
        preset = self.preset
        yield Static("Detecting GPUs...", id="gpu-info")
        yield SelectionList[int](id="gpu-select")
        yield Static("", id="topology")
        yield row(
            "device",
            FieldSelect("hardware.device", ["auto", "cuda", "cpu"], preset.hardware.device),
            "cpu: processes on the CPU with gloo",
        )
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
            info.update(
                Content.assemble(
                    (inventory.message or "no GPUs", "bold $warning"),
                    f"\nCPU: {cpu.model}, {cpu.cores_logical} cores, {cpu.memory_total_gb:g} GB RAM.\n"
                    "Plan for a GPU machine here (device auto or cuda), or choose device cpu for a dry run with gloo.",
                )
            )
            select.display = False
            return
        visible = inventory.visible()
        info.update(
            f"{len(inventory.gpus)} NVIDIA GPU(s), driver {inventory.driver_version}, CUDA {inventory.cuda_version}"
            + (
                f", CUDA_VISIBLE_DEVICES={inventory.cuda_visible_devices}"
                if inventory.cuda_visible_devices is not None
                else ""
            )
            + ". Space toggles a device; the job uses the selected ones."
        )
        chosen = set(
            preset.hardware.devices
            if preset.hardware.devices is not None
            else [g.cuda_index for g in visible[: preset.hardware.gpus]]
        )
        if select.option_count != len(visible):
            select.clear_options()
            for g in visible:
                busy = f"busy: {len(g.processes)} proc" if g.processes else "idle"
                mem = f"{(g.memory_used_mb or 0) / 1024:.1f}/{(g.memory_total_mb or 0) / 1024:.0f} GB"
                select.add_option(
                    (
                        f"GPU{g.cuda_index} {g.name} · {mem} · {g.utilization_gpu or 0:.0f}% · {busy}",
                        g.cuda_index,
                        g.cuda_index in chosen,
                    )
                )
        picked = [g for g in visible if g.cuda_index in chosen]
        lines = []
        for i, a in enumerate(picked):
            for b in picked[i + 1 :]:
                link = inventory.link(a.index, b.index)
                if link:
                    lines.append(
                        f"GPU{a.cuda_index} <-> GPU{b.cuda_index}: {link.label}, P2P read "
                        f"{link.p2p_read or 'unavailable'}"
                    )
        self.query_one("#topology", Static).update("\n".join(lines))

    @on(SelectionList.SelectedChanged)
    def _picked(self, event: SelectionList.SelectedChanged) -> None:
        chosen = sorted(event.selection_list.selected)
        if chosen:
            self.post_message(Edit("hardware", {"gpus": len(chosen), "devices": chosen}))


class PolicyStep(Step):
    fits_for: tuple[float, str] | None = None

    def compose(self) -> ComposeResult:
        table = DataTable(id="policies", cursor_type="row", zebra_stripes=True)
        for label in ("policy", "params", "VRAM need", "fits", "trainers"):
            table.add_column(label, key=label)
        yield table
        yield Static("", id="policy-summary")
        yield DatasetBox(self.preset, id="dataset-box")

    def on_mount(self) -> None:
        if not self.query_one("#policies", DataTable).row_count:
            self.fill(self.preset)

    def fill(self, preset: Preset) -> None:
        table = self.query_one("#policies", DataTable)
        table.clear()
        for entry in load_catalog().values():
            params = (
                f"{entry.params_m:g}M"
                if entry.params_m and entry.params_m < 1000
                else (f"{entry.params_m / 1000:g}B" if entry.params_m else "?")
            )
            table.add_row(
                entry.key,
                params,
                f"{entry.vram.full_gb:g} GB @{entry.vram.at_batch}",
                "",
                ", ".join(entry.trainers),
                key=entry.key,
            )
        keys = list(load_catalog())
        if preset.policy in keys:
            table.move_cursor(row=keys.index(preset.policy))

    def show(self, preset: Preset, plan: Plan | None) -> None:
        entry = load_catalog()[preset.policy]
        table = self.query_one("#policies", DataTable)
        if not table.row_count:
            self.fill(preset)
        if plan and plan.fits.device_gb and (plan.fits.device_gb, preset.mixed_precision) != self.fits_for:
            self.fits_for = (plan.fits.device_gb, preset.mixed_precision)
            for key, policy in load_catalog().items():
                need = policy.estimate_gb(policy.vram.at_batch, preset.mixed_precision)
                table.update_cell(key, "fits", "yes" if need <= plan.fits.device_gb * 0.92 else "no")
        self.query_one("#policy-summary", Static).update(f"{entry.title}: {entry.summary}")
        if plan is not None:
            self.query_one(DatasetBox).show(preset, plan)

    @on(DataTable.RowHighlighted, "#policies")
    def _chosen(self, event: DataTable.RowHighlighted) -> None:
        """Only the user's cursor moves choose a policy (filling the table highlights row 0 first)."""
        if event.row_key.value and self.has_focus_within:
            self.post_message(Edit("policy", event.row_key.value))


class DatasetBox(Vertical):
    def __init__(self, preset: Preset, **kw: object):
        super().__init__(**kw)
        self.preset = preset

    def compose(self) -> ComposeResult:
        preset = self.preset
        yield row(
            "dataset id",
            FieldInput("dataset.repo_id", "optional_str", preset.dataset.repo_id, placeholder="e.g. myuser/so100_pick"),
        )
        yield row(
            "local folder",
            FieldInput(
                "dataset.root",
                "optional_str",
                preset.dataset.root,
                placeholder="a dataset folder (GR00T takes only this)",
            ),
        )
        yield Static("", id="dataset-info")

    def show(self, preset: Preset, plan: Plan) -> None:
        """From the plan, which read the metadata off the UI thread."""
        info = self.query_one("#dataset-info", Static)
        unreadable = next((p for p in plan.problems if p.field == "dataset.root" and p.level != "note"), None)
        if not preset.dataset.root:
            info.update("No local folder: the trainer loads the dataset by id (cache or Hub).")
        elif plan.dataset is not None:
            info.update(datasets.DatasetMeta(**plan.dataset).summary())
        elif unreadable is not None:
            info.update(Content.styled(unreadable.message, "bold $warning"))
        else:
            info.update(f"The {preset.trainer} trainer writes its synthetic dataset here on the first run.")


class TrainerStep(Step):
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
            table = DataTable(id="batch-table", cursor_type="none", show_cursor=False)
            table.add_columns("GPUs", "per device", "effective")
            yield table
        yield Label("Launch", classes="section")
        yield row(
            "python",
            FieldInput(
                "launch.python",
                "optional_str",
                preset.launch.python,
                placeholder="training env interpreter (default: PATH)",
            ),
        )
        yield row(
            "output dir",
            FieldInput("output_dir", "optional_str", preset.output_dir, placeholder=f"outputs/train/{preset.name}"),
        )
        yield Label("Trainer options", classes="section")
        yield Vertical(*options_form(get_trainer(preset.trainer).Options, preset.trainer_options), id="options")

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
            Content.assemble(("What the number means: ", "bold"), plan.batch_meaning)
        )
        rows = [
            (
                f"{r['gpus']}{' <' if r['chosen'] else ''}",
                "-" if r["per_device"] is None else str(r["per_device"]),
                "-" if r["effective"] is None else str(r["effective"]),
            )
            for r in plan.batch_table
        ]
        if rows != self.shown_rows:
            self.shown_rows = rows
            table = self.query_one("#batch-table", DataTable)
            table.clear()
            for cells in rows:
                table.add_row(*cells)


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
        yield Static("", id="estimates")
        yield Static("", id="advice")

    def show(self, preset: Preset, plan: Plan | None) -> None:
        if plan is None:
            return
        k = plan.scale_factor or 1.0
        trainer, policy = get_trainer(preset.trainer), load_catalog()[preset.policy]
        self.query_one("#rules", RadioSet).border_title = (
            f"k = {k:g}: effective batch {plan.effective_batch} vs {plan.reference_effective_batch} "
            f"on {plan.reference_gpus} GPU(s)"
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
            self.query_one(
                f"#rule-{rule}", RadioButton
            ).label = f"{rule:<13} lr {lr:.3g} · {steps} steps · warmup {warmup or 0}"
        self.query_one("#estimates", Static).update(estimates_text(plan))
        self.query_one("#advice", Static).update("\n".join(f"- {a}" for a in plan.advice))

    @on(RadioSet.Changed, "#rules")
    def _rule(self, event: RadioSet.Changed) -> None:
        self.post_message(Edit("scaling.rule", event.pressed.id.removeprefix("rule-")))


def estimates_text(plan: Plan) -> str:
    """Time, GPU-hours and cost per GPU count, each with its source (the chosen count marked)."""
    from gpuwizard.estimates import fmt_hours

    lines = ["time and cost (wall · GPU-hours · cost · basis; `gpuwizard plan` names each source):"]
    for e in plan.estimates:
        mark = ">" if e["gpus"] == plan.world_size else " "
        hours = f"{e['gpu_hours']:.2f}" if e["gpu_hours"] is not None else "?"
        cost = f" · {e['cost']:.2f}" if e["cost"] is not None else ""
        lines.append(f"{mark}{e['gpus']:>2} GPU  {fmt_hours(e['wall_h']):>7} · {hours} GPU-h{cost} · {e['basis']}")
    return "\n".join(lines)


class PreviewStep(Step):
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


STEP_CLASSES = {
    "gpus": GpusStep,
    "policy": PolicyStep,
    "trainer": TrainerStep,
    "scaling": ScalingStep,
    "preview": PreviewStep,
}


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
