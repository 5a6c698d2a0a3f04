"""The preset (SPEC §3): one strict typed record that is also the wizard's state."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from gpuwizard import paths, yamlio
from gpuwizard.errors import UserError, problem
from gpuwizard.safetext import control_characters
from gpuwizard.schema import Rules, Strict, as_rules, problems_from, rule_error, to_data

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PRESET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ENDPOINT = re.compile(r"(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+):(?P<port>\d{1,5})")
MAX_GPUS_PER_NODE = 1024
MAX_NODES = 4096
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(text: str) -> str:
    """A path or id reaches argv, the environment and file names: control characters (a newline) break all three."""
    if CONTROL.search(text):
        raise rule_error(
            None,
            "contains a control character (a newline, tab, escape or NUL), which a path or id cannot carry",
            "write it on one line, without control characters",
            text,
        )
    return text


OneLine = Annotated[str, AfterValidator(one_line)]


def env_text(value: Any) -> Any:
    """An environment value as text: numbers may be written unquoted (NCCL_P2P_DISABLE: 1); one paragraph otherwise."""
    if isinstance(value, bool):
        raise rule_error(
            None,
            "true/false is ambiguous for an environment variable",
            "quote the value you mean, e.g. '1' or 'true'",
            value,
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise rule_error(None, "must be a finite number", "write a number, or quote the text you mean", value)
    if isinstance(value, int | float):
        return str(value)
    if not isinstance(value, str):
        raise rule_error(None, "must be text or a number", "write one value (quote text)", value)
    return value


EnvValue = Annotated[str, BeforeValidator(env_text), WithJsonSchema({"type": ["string", "number"]})]


class DatasetSpec(Strict):
    """What to train on."""

    repo_id: OneLine | None = Field(
        None, min_length=1, description="Dataset id as the trainer takes it, e.g. myuser/so100_pick."
    )
    root: OneLine | None = Field(
        None,
        min_length=1,
        description="Local dataset folder; when set, its metadata is read and shown, and it is the dataset path of "
        "trainers that take a path (GR00T --dataset-path). At least one of repo_id and root.",
    )

    @model_validator(mode="after")
    def _named(self) -> DatasetSpec:
        if self.repo_id is None and self.root is None:
            rules = Rules("dataset")
            rules.add("repo_id", "a dataset needs a repo_id or a root folder", "set dataset.repo_id or dataset.root")
            rules.raise_any()
        return self


class Hardware(Strict):
    """The devices this preset runs on, per node."""

    gpus: int = Field(1, gt=0, le=MAX_GPUS_PER_NODE, description="Processes per node, one per device.")
    device: Literal["auto", "cuda", "cpu"] = Field(
        "auto", description="auto | cuda | cpu; cpu runs the processes on the CPU with gloo (dry runs, the demo)."
    )
    devices: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, description="Device indices, e.g. [0, 1]; becomes CUDA_VISIBLE_DEVICES. null: the first `gpus` devices."
    )
    nodes: int = Field(1, gt=0, le=MAX_NODES, description="Number of machines.")
    node_rank: int = Field(
        0, ge=0, description="This node's rank; `run --node-rank K` overrides it. Node 0 hosts the rendezvous."
    )
    rdzv_endpoint: str | None = Field(
        None,
        description="host:port of node 0, required when nodes > 1 (with SLURM only the port is used: the head node "
        "is found at run time; null: port 29500).",
    )
    gpu_memory_gb: float | None = Field(
        None, gt=0, le=100_000, description="Device memory to plan against where none is detected, in GB."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Hardware:
        rules = Rules("hardware")
        if self.devices is not None and not self.devices:
            rules.add(
                "devices",
                "list an index per GPU, or use null for the first gpus devices",
                "write [0, 1, ...] or null",
                self.devices,
            )
        elif self.devices is not None and len(set(self.devices)) != len(self.devices):
            rules.add("devices", "device indices must be unique", "list each GPU index once", self.devices)
        elif self.devices is not None and len(self.devices) != self.gpus:
            rules.add(
                "devices",
                f"hardware.devices lists {len(self.devices)} devices but hardware.gpus is {self.gpus}",
                "list one index per GPU, or set gpus to match",
                self.devices,
            )
        if self.rdzv_endpoint is not None:
            match = ENDPOINT.fullmatch(self.rdzv_endpoint)
            if not match or not 0 < int(match["port"]) < 65536:
                rules.add("rdzv_endpoint", "must be host:port", "write it like 10.0.0.1:29500", self.rdzv_endpoint)
        if self.node_rank >= self.nodes:
            rules.add(
                "node_rank",
                f"hardware.node_rank {self.node_rank} must be below hardware.nodes {self.nodes}",
                "number nodes from 0",
                self.node_rank,
            )
        rules.raise_any()
        return self


class Batch(Strict):
    """The batch as the trainer's own flag takes it."""

    size: int = Field(
        8,
        gt=0,
        le=1_000_000,
        description="The number the trainer's own batch flag takes, in its own meaning (per device or global).",
    )
    grad_accum: int = Field(1, gt=0, le=100_000, description="Gradient accumulation steps.")


class Optim(Strict):
    """Learning rate and length, as tuned on the reference run."""

    lr: float | None = Field(
        None,
        ge=1e-9,
        le=10,
        description="Learning rate as tuned on the reference run; null: the catalog's default for the policy and "
        "trainer.",
    )
    steps: int = Field(100_000, gt=0, le=1_000_000_000, description="Optimizer updates as tuned on the reference run.")
    warmup_ratio: float | None = Field(
        None, ge=0, lt=1, description="Warmup as a fraction of steps; null: the trainer's default."
    )


class Scaling(Strict):
    """How lr or steps follow the effective batch."""

    rule: Literal["none", "linear_lr", "sqrt_lr", "divide_steps"] = Field(
        "none",
        description="none | linear_lr (lr x k, with a warmup) | sqrt_lr | divide_steps (steps / k); k = effective "
        "batch here / on reference_gpus.",
    )
    reference_gpus: int = Field(
        1, gt=0, le=MAX_GPUS_PER_NODE * MAX_NODES, description="GPU count the lr and steps above were tuned on."
    )


class Fsdp(Strict):
    """How FSDP wraps the model (strategy fsdp)."""

    wrap_modules: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None, description="Module class names to wrap as FSDP units."
    )
    min_num_params: int | None = Field(
        None, gt=0, description="Wrap any module with at least this many parameters (instead of wrap_modules)."
    )

    @model_validator(mode="after")
    def _exclusive(self) -> Fsdp:
        if self.wrap_modules and self.min_num_params:
            raise rule_error(
                "min_num_params",
                "fsdp.wrap_modules and fsdp.min_num_params are mutually exclusive",
                "keep one of them",
                self.min_num_params,
            )
        return self


class Launch(Strict):
    """How the job is started."""

    python: OneLine | None = Field(
        None,
        min_length=1,
        description="Interpreter of the training environment; null: the one on PATH (the demo uses gpuwizard's own).",
    )
    workdir: OneLine | None = Field(
        None,
        min_length=1,
        description="Working directory of the job (e.g. an Isaac-GR00T checkout); null: the current one.",
    )
    master_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="Not used, kept so older presets load: one node runs torchrun --standalone (it binds a free port "
        "itself); several nodes use the port in hardware.rdzv_endpoint.",
    )
    env: dict[str, EnvValue] = Field(
        {}, description="Extra environment variables for the job; numbers may be written unquoted."
    )
    extra_args: list[str] = Field([], description="Appended verbatim to the trainer's arguments.")
    scheduler: Literal["local", "slurm"] = Field(
        "local", description="local (this machine; --node-rank per node) | slurm (sbatch; `run --slurm`)."
    )

    @model_validator(mode="after")
    def _env(self) -> Launch:
        """Environment names must be valid (NUL bytes in any value are Strict's)."""
        rules = Rules("launch")
        for name in self.env:
            if not ENV_NAME.fullmatch(name):
                rules.add(
                    ("env", name),
                    "is not a valid environment variable name (letters, digits and _, not starting with a digit)",
                    "rename the variable",
                    name,
                )
        rules.raise_any()
        return self


SLURM_TIME = re.compile(r"(\d+-)?\d+(:\d{2}){0,2}")
SLURM_NAME = re.compile(r"[A-Za-z0-9_.-]+")
"""A partition or account name as slurm.conf and sacctmgr write them."""
SBATCH_OPTION = re.compile(r"--[A-Za-z][A-Za-z0-9-]*(=[^\s\"'\\#]+)?")
"""--name or --name=value on one #SBATCH line: sbatch splits it at spaces, reads quotes and starts a comment at #."""


class Slurm(Strict):
    """The batch job `run --slurm` submits; any #SBATCH option not named here goes in sbatch_args."""

    partition: str | None = Field(None, min_length=1, description="#SBATCH --partition.")
    time: str | None = Field(None, description='#SBATCH --time, e.g. "04:00:00" or "1-00:00:00".')
    account: str | None = Field(None, min_length=1, description="#SBATCH --account.")
    sbatch_args: list[str] = Field([], description='More #SBATCH options, e.g. ["--constraint=h100", "--qos=high"].')
    setup: list[str] = Field(
        [],
        description="Shell lines run on the batch host before the launcher (module load ..., conda activate ...): "
        "user-authored, shown in the preview.",
    )

    @model_validator(mode="after")
    def _options(self) -> Slurm:
        """Each value becomes a line of the batch script: only the shape sbatch reads, so none can start a line."""
        rules = Rules("slurm")
        if self.time is not None and not SLURM_TIME.fullmatch(self.time):
            rules.add("time", "is not a SLURM time", 'write minutes, "HH:MM:SS" or "D-HH:MM:SS"', self.time)
        if self.partition is not None and not all(SLURM_NAME.fullmatch(p) for p in self.partition.split(",")):
            rules.add(
                "partition",
                "is not a SLURM partition name (letters, digits, '.', '_' and '-'; several separated by commas)",
                "write it as `sinfo -s` lists it, e.g. gpu",
                self.partition,
            )
        if self.account is not None and not SLURM_NAME.fullmatch(self.account):
            rules.add(
                "account",
                "is not a SLURM account name (letters, digits, '.', '_' and '-')",
                "write it as `sacctmgr show associations user=$USER` lists it",
                self.account,
            )
        for index, arg in enumerate(self.sbatch_args):
            if not SBATCH_OPTION.fullmatch(arg):
                rules.add(
                    f"sbatch_args.{index}",
                    "must be one long sbatch option, --name or --name=value, without spaces, quotes, backslashes or "
                    "'#' (sbatch reads a # as the start of a comment)",
                    'write it like "--qos=high"',
                    arg,
                )
        for index, line in enumerate(self.setup):
            if control_characters(line):
                rules.add(f"setup.{index}", "must be one shell line", "split it into several entries", line)
        rules.raise_any()
        return self


class Costs(Strict):
    """Prices for the time and cost estimates and `compare`."""

    gpu_hour: float | None = Field(
        None, gt=0, le=100_000, description="Price of one GPU-hour in your currency; null: costs are not shown."
    )


class Monitor(Strict):
    """Hang detection."""

    hang_timeout_s: float = Field(
        300.0,
        gt=0,
        le=7 * 86400,
        description="Seconds without progress (beyond the step and checkpoint cadence) before a hang is suspected.",
    )
    first_step_timeout_s: float | None = Field(
        None,
        gt=0,
        le=7 * 86400,
        description="Allowance before the first step (model download, compilation); null: a longer default.",
    )


class Preset(Strict):
    """A saved job: what to train, on what, with which trainer and scaling rule (preset format version 1)."""

    version: Literal[1] = Field(1, description="Preset format version.")
    name: str = Field(description="Preset name; it becomes a file name (letters, digits, '.', '_' and '-').")
    description: str = Field("", description="One line saying what this job is.")
    trainer: str = Field(description="lerobot | groot | openpi | hf | demo")
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
        {}, description="Typed per trainer (see the trainer's options); defaults are left out when saved."
    )
    output_dir: OneLine | None = Field(
        None, min_length=1, description="Where the trainer writes checkpoints; null: outputs/train/<name>."
    )
    monitor: Monitor = Field(default_factory=Monitor, description="Hang detection.")

    def with_field(self, dotted: str, value: Any) -> Preset:
        """A copy with one field changed, for callers that must not import this module (the trainers it imports)."""
        return with_field(self, dotted, value)

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
        from gpuwizard.trainers import trainer_names

        if name not in trainer_names():
            raise rule_error(None, "unknown trainer", f"choose one of {', '.join(trainer_names())}", name)
        return name

    @field_validator("policy")
    @classmethod
    def _policy(cls, name: str) -> str:
        from gpuwizard.catalog import load_catalog

        if name not in load_catalog():
            raise rule_error(None, "not in the policy catalog", f"choose one of {', '.join(load_catalog())}", name)
        return name

    @field_validator("trainer_options")
    @classmethod
    def _options(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Checked against the trainer's own options model; kept as plain data without its defaults."""
        if "trainer" not in info.data:
            return options  # the trainer itself was wrong: that is the error to show
        from gpuwizard.trainers import get_trainer

        model = get_trainer(info.data["trainer"]).Options
        try:
            return to_data(model.model_validate(options), omit_defaults=True)
        except ValidationError as exc:
            raise as_rules(exc, model) from None

    @property
    def options(self) -> Any:
        """The trainer_options as the trainer's typed record."""
        from gpuwizard.trainers import get_trainer

        return get_trainer(self.trainer).Options.model_validate(self.trainer_options)

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


def load_preset_file(path: Path) -> Preset:
    return parse_preset(yamlio.load_file(path), str(path))


def _preset_files(folder: Path) -> dict[str, Path]:
    if not folder.is_dir():
        return {}
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


def user_preset_files() -> dict[str, Path]:
    return _preset_files(paths.user_presets_dir())


def shipped_preset_files() -> dict[str, Path]:
    return _preset_files(paths.shipped_presets_dir())


def listed_presets() -> list[tuple[str, str, Path]]:
    """(name, "user" or "shipped", path) for every preset by name; a user preset hides a shipped one."""
    user = user_preset_files()
    shipped = [(name, "shipped", path) for name, path in shipped_preset_files().items() if name not in user]
    return [(name, "user", path) for name, path in user.items()] + shipped


def find_preset(name_or_file: str) -> Path:
    """A path to a YAML file, or a name looked up in the user folder, then the shipped presets."""
    as_path = Path(name_or_file).expanduser()
    if as_path.suffix in (".yaml", ".yml") or "/" in name_or_file:
        if as_path.is_file():
            return as_path
        what = "is not a regular file" if as_path.exists() else "does not exist"
        raise UserError(
            problem(
                "PRESET",
                f"file {as_path} {what}",
                "check the path, or give a preset name from `gpuwizard presets list`",
                value=name_or_file,
            )
        )
    for folder in (user_preset_files(), shipped_preset_files()):
        if name_or_file in folder:
            return folder[name_or_file]
    known = sorted(set(user_preset_files()) | set(shipped_preset_files()))
    raise UserError(
        problem(
            "PRESET",
            "no preset of that name in your preset folder or the shipped presets",
            f"use one of: {', '.join(known)}; or a path to a YAML file",
            value=name_or_file,
        )
    )


def load_preset(name_or_file: str) -> Preset:
    return load_preset_file(find_preset(name_or_file))


SCHEMA_FILE = "preset.schema.json"
SCHEMA_LINE = f"# yaml-language-server: $schema=./{SCHEMA_FILE}\n"


def save_user_preset(preset: Preset, overwrite: bool = True) -> Path:
    """Save atomically into the user preset folder, the schema beside it for editors; replace a file only if allowed."""
    folder = paths.user_presets_dir()
    target = folder / f"{preset.name}.yaml"
    if target.exists() and not overwrite:
        raise UserError(
            problem(
                "name",
                "a preset of that name already exists",
                "choose another name or delete the old one",
                value=preset.name,
            )
        )
    yamlio.atomic_write(target, SCHEMA_LINE + preset.to_yaml())
    write_schema_beside(folder)
    return target


def write_schema_beside(folder: Path) -> None:
    """Keep `preset.schema.json` current in a preset folder: the YAML language server completes and checks presets."""
    import json

    text = json.dumps(preset_schema(), indent=2) + "\n"
    schema = folder / SCHEMA_FILE
    try:
        current = schema.read_text(encoding="utf-8")
    except OSError:
        current = None
    if current != text:
        yamlio.atomic_write(schema, text)


def delete_user_preset(name: str) -> Path:
    files = user_preset_files()
    if name not in files:
        if name in shipped_preset_files():
            raise UserError(
                problem(
                    "NAME",
                    "is a shipped preset, which cannot be deleted",
                    "save a copy under another name and edit that",
                    value=name,
                )
            )
        raise UserError(problem("NAME", "no user preset of that name", "see `gpuwizard presets list`", value=name))
    files[name].unlink()
    return files[name]


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


def preset_text(name_or_file: str) -> tuple[Path, str]:
    """A preset's file and text, for `presets show`: only a readable YAML preset, never any other file."""
    path = find_preset(name_or_file)
    load_preset_file(path)  # refuses binary, malformed or invalid files with their paragraphs
    return path, path.read_text(encoding="utf-8")


def preset_schema() -> dict[str, Any]:
    """The JSON Schema of the preset format, trainer_options typed per trainer (for editors' YAML language servers)."""
    from gpuwizard.schema import schema_with_trainers
    from gpuwizard.trainers import get_trainer, trainer_names

    schema = schema_with_trainers(Preset, {name: get_trainer(name).Options for name in trainer_names()})
    schema["title"] = "gpuwizard preset"
    return schema
