"""The wizard's first steps (GPUs, policy and dataset) and the registry of all five; each shows part of the plan
and posts Edit messages for its fields."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import DataTable, Label, SelectionList, Static

from gpuwizard.core.kinds import ProblemLevel
from gpuwizard.gpus.inventory import Inventory
from gpuwizard.model import datasets
from gpuwizard.model.catalog import load_catalog
from gpuwizard.model.job import Plan
from gpuwizard.model.preset import Preset
from gpuwizard.tui.widgets.fields import Edit, FieldInput, FieldSelect, Step, field_id, row
from gpuwizard.tui.wizard.job_steps import PreviewStep, ScalingStep, TrainerStep

DEVICE_HINTS = {
    "auto": "CUDA GPUs, assumed if none is seen",
    "cuda": "NVIDIA GPUs, one process each",
    "cpu": "processes on the CPU with gloo",
}
SCHEDULER_HINTS = {"local": "torchrun on this machine", "slurm": "submitted with sbatch"}
"""What the chosen option does, shown beside its field (the hint follows the choice)."""


class GpusStep(Step):
    implied: list[int] | None = None
    """The devices the preset means without naming any (the first hardware.gpus visible ones)."""

    def compose(self) -> ComposeResult:
        preset = self.preset
        yield Static("Detecting GPUs...", id="gpu-info")
        yield SelectionList[int](id="gpu-select")
        yield Static("", id="topology")
        yield row(
            "device",
            FieldSelect("hardware.device", list(DEVICE_HINTS), preset.hardware.device),
            DEVICE_HINTS[preset.hardware.device],
        )
        yield row("GPUs / procs", FieldInput("hardware.gpus", "int", preset.hardware.gpus), "per node")
        yield row(
            "GPU memory GB",
            FieldInput(
                "hardware.gpu_memory_gb", "optional_float", preset.hardware.gpu_memory_gb, placeholder="detected"
            ),
            "plan against it where no GPU is detected",
        )
        yield row("nodes", FieldInput("hardware.nodes", "int", preset.hardware.nodes), "machines")
        yield row(
            "node rank",
            FieldInput("hardware.node_rank", "int", preset.hardware.node_rank),
            "this machine; 0 hosts the rendezvous",
            classes="multi-node",
        )
        yield row(
            "rdzv endpoint",
            FieldInput(
                "hardware.rdzv_endpoint",
                "optional_str",
                preset.hardware.rdzv_endpoint,
                placeholder="host:port of node 0, e.g. 10.0.0.1:29500",
            ),
            classes="multi-node",
        )
        yield row(
            "scheduler",
            FieldSelect("launch.scheduler", list(SCHEDULER_HINTS), preset.launch.scheduler),
            SCHEDULER_HINTS[preset.launch.scheduler],
        )
        yield row("partition", FieldInput("slurm.partition", "optional_str", preset.slurm.partition), classes="slurm")
        yield row(
            "time limit",
            FieldInput("slurm.time", "optional_str", preset.slurm.time, placeholder="e.g. 04:00:00"),
            classes="slurm",
        )
        yield row("account", FieldInput("slurm.account", "optional_str", preset.slurm.account), classes="slurm")
        yield row(
            "sbatch args",
            FieldInput("slurm.sbatch_args", "list", preset.slurm.sbatch_args, placeholder="e.g. --qos=high"),
            classes="slurm",
        )
        yield row(
            "node setup",
            FieldInput("slurm.setup", "list", preset.slurm.setup, placeholder="'module load cuda' ..."),
            classes="slurm",
        )

    def on_mount(self) -> None:
        self.sync(self.preset)

    def sync(self, preset: Preset) -> None:
        """Multi-node fields with more than one node, SLURM's with the slurm scheduler."""
        for widget in self.query(".multi-node"):
            widget.display = preset.hardware.nodes > 1 or preset.hardware.rdzv_endpoint is not None
        for widget in self.query(".slurm"):
            widget.display = preset.launch.scheduler == "slurm"
        for path, hints, chosen in (
            ("hardware.device", DEVICE_HINTS, preset.hardware.device),
            ("launch.scheduler", SCHEDULER_HINTS, preset.launch.scheduler),
        ):
            self.query_one(f"#{field_id(path)}-hint", Label).update(hints[chosen])
        self.call_after_refresh(self.keep_focus_reachable)

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
            self.call_after_refresh(self.keep_focus_reachable)  # it may have been focused while GPUs were detected
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
        self.implied = sorted(c for c in chosen if c is not None) if preset.hardware.devices is None else None
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
    def _picked(self, event: SelectionList.SelectedChanged[int]) -> None:
        chosen = sorted(event.selection_list.selected)
        if chosen and chosen != self.implied:  # the list filled with the preset's own default is no edit
            self.post_message(Edit("hardware", {"gpus": len(chosen), "devices": chosen}))


class PolicyStep(Step):
    fits_for: tuple[float, str] | None = None

    def compose(self) -> ComposeResult:
        table: DataTable[str] = DataTable(id="policies", cursor_type="row", zebra_stripes=True)
        for label in ("chosen", "policy", "params", "VRAM need", "fits", "trainers"):
            table.add_column("" if label == "chosen" else label, key=label)
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
                ">" if entry.key == preset.policy else "",
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
        for key in load_catalog():
            table.update_cell(key, "chosen", ">" if key == preset.policy else "")
        self.describe(self.highlighted() or entry.key)
        if plan is not None:
            self.query_one(DatasetBox).show(preset, plan)

    def highlighted(self) -> str | None:
        table = self.query_one("#policies", DataTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def describe(self, key: str) -> None:
        """The highlighted policy; the preset changes only when one is chosen with enter."""
        entry = load_catalog()[key]
        text = f"{entry.title}: {entry.summary}"
        if key != self.preset.policy:
            text += f"\nenter chooses {key} (the preset has {self.preset.policy}, marked >)"
        self.query_one("#policy-summary", Static).update(text)

    @on(DataTable.RowHighlighted, "#policies")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        """Browsing the list only describes a policy: a cursor move never changes the preset."""
        if event.row_key.value:
            self.describe(event.row_key.value)

    @on(DataTable.RowSelected, "#policies")
    def _chosen(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value and event.row_key.value != self.preset.policy:
            self.post_message(Edit("policy", event.row_key.value))


class DatasetBox(Vertical):
    def __init__(self, preset: Preset, *, id: str | None = None):
        super().__init__(id=id)
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
        yield row(
            "held out",
            FieldInput("dataset.eval_split", "float", preset.dataset.eval_split),
            hint="share of episodes",
        )
        yield Static("", id="dataset-info")

    def show(self, preset: Preset, plan: Plan) -> None:
        """From the plan, which read the metadata off the UI thread."""
        info = self.query_one("#dataset-info", Static)
        found = (p for p in plan.problems if p.field == "dataset.root" and p.level != ProblemLevel.NOTE)
        unreadable = next(found, None)
        if not preset.dataset.root:
            info.update("No local folder: the trainer loads the dataset by id (cache or Hub).")
        elif plan.dataset is not None:
            info.update(datasets.DatasetMeta(**plan.dataset).summary())
        elif unreadable is not None:
            info.update(Content.styled(unreadable.message, "bold $warning"))
        else:
            info.update(f"The {preset.trainer} trainer writes its synthetic dataset here on the first run.")


STEP_CLASSES = {
    "gpus": GpusStep,
    "policy": PolicyStep,
    "trainer": TrainerStep,
    "scaling": ScalingStep,
    "preview": PreviewStep,
}
