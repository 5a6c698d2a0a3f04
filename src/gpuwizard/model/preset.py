"""The preset: one strict typed record that is also the wizard's state."""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator

from gpuwizard.core import yamlio
from gpuwizard.core.errors import UserError, problem, unknown
from gpuwizard.core.safetext import control_characters
from gpuwizard.core.schema import Rules, Strict, as_rules, problems_from, rule_error, to_data
from gpuwizard.model.preset_sections import (
    Batch,
    Costs,
    DatasetSpec,
    Fsdp,
    Hardware,
    Launch,
    Monitor,
    OneLine,
    Optim,
    Scaling,
    Slurm,
)
from gpuwizard.model.trainer_names import trainer_names
from gpuwizard.model.trainer_options import OPTIONS, TrainerOptions

PRESET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class Preset(Strict):
    """A saved job: what to train, on what, with which trainer and scaling rule (preset format version 1)."""

    version: Literal[1] = Field(1, description="Preset format version.")
    name: str = Field(description="Preset name; it becomes a file name (letters, digits, '.', '_' and '-').")
    description: str = Field("", description="One line saying what this job is.")
    trainer: str = Field(description="A name in model/trainer_names.TRAINERS (the schema lists them as it is made).")
    policy: str = Field(
        description="A key of the policy catalog (act, diffusion, smolvla, pi0, pi05, groot, ..., demo)."
    )
    dataset: DatasetSpec = Field(description="What to train on.")
    hardware: Hardware = Field(default_factory=Hardware, description="The devices, per node.")
    batch: Batch = Field(default_factory=Batch, description="The batch as the trainer's flag takes it.")
    optim: Optim = Field(default_factory=Optim, description="Learning rate and length as tuned on the reference run.")
    scaling: Scaling = Field(default_factory=Scaling, description="How lr or steps follow the effective batch.")
    strategy: Literal["auto", "single", "ddp", "fsdp"] = Field("auto", description="auto | single | ddp | fsdp")
    mixed_precision: Literal["no", "bf16", "fp16"] = Field("bf16", description="no | bf16 | fp16")
    fsdp: Fsdp = Field(default_factory=Fsdp, description="How FSDP wraps the model (strategy fsdp).")
    launch: Launch = Field(default_factory=Launch, description="How the job is started.")
    slurm: Slurm = Field(default_factory=Slurm, description="The SLURM batch job (launch.scheduler: slurm).")
    costs: Costs = Field(default_factory=Costs, description="Prices for the estimates and `compare`.")
    trainer_options: dict[str, Any] = Field(
        {},
        validate_default=True,
        description="Typed per trainer (see the trainer's options); defaults are left out when saved.",
    )
    output_dir: OneLine | None = Field(
        None, min_length=1, description="Where the trainer writes checkpoints; null: outputs/train/<name>."
    )
    monitor: Monitor = Field(default_factory=Monitor, description="Hang detection.")
    _options: TrainerOptions = PrivateAttr(default_factory=TrainerOptions)

    @model_validator(mode="after")
    def _typed_options(self) -> Preset:
        """Keeps the record `_options` validated (the first of the after-validators, so the others see plain data)
        and stores its plain data, without defaults, as trainer_options."""
        typed: object = self.trainer_options
        if isinstance(typed, TrainerOptions):
            self._options = typed
            self.trainer_options = to_data(typed, omit_defaults=True)
        return self

    @model_validator(mode="after")
    def _printable(self) -> Preset:
        """No value holds a control character: presets are shared, and their values reach command lines, batch
        scripts and terminals."""
        rules = Rules("preset")
        for field, text in text_values(to_data(self)):
            found = control_characters(text)
            if found:
                rules.add(
                    field,
                    f"contains control characters ({', '.join(found)}), which no command line or batch script line "
                    "should carry",
                    "remove them: a value is one line of text (a tab is allowed)",
                    text,
                )
        rules.raise_any()
        return self

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not PRESET_NAME.fullmatch(name):
            raise rule_error(
                None,
                "use letters, digits, '.', '_' and '-' (it becomes a file name), at most 64 characters",
                "rename the preset",
                name,
            )
        return name

    @field_validator("output_dir")
    @classmethod
    def _output_dir(cls, folder: str | None) -> str | None:
        if folder is not None and os.path.normpath(folder) in ("/", "//"):
            raise rule_error(
                None,
                "is the root of the file system: the trainer would write (and may clear) checkpoints there",
                "name a folder of its own, e.g. outputs/train/<preset name>, or null",
                folder,
            )
        return folder

    @field_validator("trainer")
    @classmethod
    def _trainer(cls, name: str) -> str:
        names = trainer_names()
        if name not in names:
            raise rule_error(None, unknown("unknown trainer", name, names), f"choose one of {', '.join(names)}", name)
        return name

    @field_validator("policy")
    @classmethod
    def _policy(cls, name: str) -> str:
        from gpuwizard.model.catalog import load_catalog

        catalog = load_catalog()
        if name not in catalog:
            raise rule_error(
                None, unknown("not in the policy catalog", name, catalog), f"choose one of {', '.join(catalog)}", name
            )
        return name

    @field_validator("trainer_options")
    @classmethod
    def _trainer_options(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any] | TrainerOptions:
        """Validated once, by the trainer's own options model, here with the other fields so that their mistakes are
        told together; the typed record goes on to _typed_options, which keeps it."""
        if "trainer" not in info.data:
            return options  # the trainer itself was wrong: that is the error to show
        model = OPTIONS[info.data["trainer"]]
        try:
            return model.model_validate(options)
        except ValidationError as exc:
            raise as_rules(exc, model) from None

    @property
    def options(self) -> TrainerOptions:
        """The trainer_options as the trainer's typed record; a trainer reads its own as `XOptions.of(preset)`."""
        return self._options

    @property
    def world_size(self) -> int:
        return self.hardware.gpus * self.hardware.nodes

    def to_yaml(self) -> str:
        return yamlio.dumps(to_data(self))


def text_values(data: Any, field: str = "") -> list[tuple[str, str]]:
    """Every string in plain preset data, with its dotted field (launch.env.X, trainer_options.script_args.0)."""
    if isinstance(data, str):
        return [(field, data)]
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    return [found for key, value in items for found in text_values(value, f"{field}.{key}" if field else str(key))]


def parse_preset(data: Any, source: str) -> Preset:
    """Validate a YAML mapping as a preset; errors name the dotted field path."""
    if not isinstance(data, dict):
        raise UserError(
            problem(
                None,
                "a preset must be a YAML mapping of keys (version, name, trainer, ...)",
                "start from `gpuwizard presets show demo-cpu`",
            ),
            source,
        )
    try:
        return Preset.model_validate(data)
    except ValidationError as exc:
        raise UserError(problems_from(exc, Preset), source) from None


def with_field(preset: Preset, dotted: str, value: Any) -> Preset:
    """A copy with one field changed (e.g. "batch.size"), validated like a loaded file."""
    data = to_data(preset)
    node = data
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    if value is None and leaf in node and parents and parents[0] == "trainer_options":
        node.pop(leaf)
    else:
        node[leaf] = value
    try:
        return Preset.model_validate(data)
    except ValidationError as exc:
        raise UserError(problems_from(exc, Preset)) from None


def saved_as(preset: Preset, name: str, description: str) -> Preset:
    """A copy under a name and description; under a new name without the original's fixed output_dir, so its runs
    (each then in a folder of its own) never write where the original's do."""
    copy = with_field(with_field(preset, "name", name), "description", description)
    return with_field(copy, "output_dir", None) if name != preset.name and preset.output_dir is not None else copy


def preset_schema() -> dict[str, Any]:
    """The JSON Schema of the preset format, trainer_options typed per trainer (for editors' YAML language servers)."""
    from gpuwizard.core.schema import schema_with_trainers

    schema = schema_with_trainers(Preset, {name: OPTIONS[name] for name in trainer_names()})
    schema["properties"]["trainer"]["description"] = " | ".join(trainer_names())
    schema["title"] = "gpuwizard preset"
    return schema
