"""The preset (SPEC §3): one strict typed record that is also the wizard's state."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Meta, field

from gpuwizard import paths, yamlio
from gpuwizard.errors import UserError, problem
from gpuwizard.schema import FieldError, Strict, convert, field_error, to_data

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PRESET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ENDPOINT = re.compile(r"^(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+):(?P<port>\d{1,5})$")

PositiveInt = Annotated[int, Meta(gt=0)]
NonNegativeInt = Annotated[int, Meta(ge=0)]
PositiveFloat = Annotated[float, Meta(gt=0)]


class DatasetSpec(Strict):
    repo_id: Annotated[str, Meta(min_length=1)]
    root: str | None = None


class Hardware(Strict):
    gpus: PositiveInt = 1
    device: Literal["auto", "cuda", "cpu"] = "auto"
    devices: list[NonNegativeInt] | None = None
    nodes: PositiveInt = 1
    node_rank: NonNegativeInt = 0
    rdzv_endpoint: str | None = None
    gpu_memory_gb: PositiveFloat | None = None

    def __post_init__(self) -> None:
        if self.devices is not None and not self.devices:
            raise field_error("devices", "list an index per GPU, or use null for the first gpus devices", "write [0, 1, ...] or null", value=self.devices)
        if self.devices is not None and len(set(self.devices)) != len(self.devices):
            raise field_error("devices", "device indices must be unique", "list each GPU index once", value=self.devices)
        if self.rdzv_endpoint is not None:
            match = ENDPOINT.match(self.rdzv_endpoint)
            if not match or not 0 < int(match["port"]) < 65536:
                raise field_error("rdzv_endpoint", "must be host:port", "write it like 10.0.0.1:29500", value=self.rdzv_endpoint)
        if self.devices is not None and len(self.devices) != self.gpus:
            raise field_error("devices", f"hardware.devices lists {len(self.devices)} devices but hardware.gpus is {self.gpus}", "list one index per GPU, or set gpus to match", value=self.devices)
        if self.nodes > 1 and not self.rdzv_endpoint:
            raise field_error("rdzv_endpoint", "hardware.rdzv_endpoint (host:port of node 0) is required when hardware.nodes > 1", "add it, e.g. 10.0.0.1:29500")
        if self.node_rank >= self.nodes:
            raise field_error("node_rank", f"hardware.node_rank {self.node_rank} must be below hardware.nodes {self.nodes}", "number nodes from 0", value=self.node_rank)


class Batch(Strict):
    size: PositiveInt = 8
    grad_accum: PositiveInt = 1


class Optim(Strict):
    lr: PositiveFloat | None = None
    steps: PositiveInt = 100_000
    warmup_ratio: Annotated[float, Meta(ge=0, lt=1)] | None = None


class Scaling(Strict):
    rule: Literal["none", "linear_lr", "sqrt_lr", "divide_steps"] = "none"
    reference_gpus: PositiveInt = 1


class Fsdp(Strict):
    wrap_modules: list[Annotated[str, Meta(min_length=1)]] | None = None
    min_num_params: PositiveInt | None = None

    def __post_init__(self) -> None:
        if self.wrap_modules and self.min_num_params:
            raise field_error("min_num_params", "fsdp.wrap_modules and fsdp.min_num_params are mutually exclusive", "keep one of them", value=self.min_num_params)


class Launch(Strict):
    python: str | None = None
    workdir: str | None = None
    master_port: Annotated[int, Meta(ge=1, le=65535)] | None = None
    env: dict[str, str | int | float | bool] = {}
    extra_args: list[str] = []

    def __post_init__(self) -> None:
        """Environment names must be valid; values may be written unquoted in YAML (NCCL_P2P_DISABLE: 1)."""
        for name in self.env:
            if not ENV_NAME.match(name):
                raise field_error("env", f"{name!r} is not a valid environment variable name (letters, digits and _, not starting with a digit)", "rename the variable", value=name)
            if isinstance(self.env[name], bool):
                raise field_error(f"env.{name}", "true/false is ambiguous for an environment variable", "quote the value you mean, e.g. '1' or 'true'", value=self.env[name])
        self.env = {name: str(value) for name, value in self.env.items()}


class Monitor(Strict):
    hang_timeout_s: PositiveFloat = 300.0
    first_step_timeout_s: PositiveFloat | None = None


class Preset(Strict, kw_only=True):
    """A saved job: what to train, on what, with which trainer and scaling rule."""

    version: Literal[1] = 1
    name: str
    description: str = ""
    trainer: str
    policy: str
    dataset: DatasetSpec
    hardware: Hardware = field(default_factory=Hardware)
    batch: Batch = field(default_factory=Batch)
    optim: Optim = field(default_factory=Optim)
    scaling: Scaling = field(default_factory=Scaling)
    strategy: Literal["auto", "single", "ddp", "fsdp"] = "auto"
    mixed_precision: Literal["no", "bf16", "fp16"] = "bf16"
    fsdp: Fsdp = field(default_factory=Fsdp)
    launch: Launch = field(default_factory=Launch)
    trainer_options: dict[str, Any] = {}
    output_dir: str | None = None
    monitor: Monitor = field(default_factory=Monitor)

    def __post_init__(self) -> None:
        from gpuwizard.catalog import load_catalog
        from gpuwizard.trainers import get_trainer, trainer_names

        if not PRESET_NAME.match(self.name):
            raise field_error("name", "use letters, digits, '.', '_' and '-' (it becomes a file name), at most 64 characters", "rename the preset", value=self.name)
        if self.trainer not in trainer_names():
            raise field_error("trainer", "unknown trainer", f"choose one of {', '.join(trainer_names())}", value=self.trainer)
        if self.policy not in load_catalog():
            raise field_error("policy", "not in the policy catalog", f"choose one of {', '.join(load_catalog())}", value=self.policy)
        try:
            parsed = convert(self.trainer_options, get_trainer(self.trainer).Options)
        except FieldError as exc:
            inner = exc.problem
            raise FieldError(replace(inner, field=f"trainer_options.{inner.field}" if inner.field else "trainer_options")) from None
        self.trainer_options = to_data(parsed)  # the trainer's options omit their defaults

    @property
    def options(self) -> Any:
        """The trainer_options as the trainer's typed record."""
        from gpuwizard.trainers import get_trainer

        return convert(self.trainer_options, get_trainer(self.trainer).Options)

    @property
    def world_size(self) -> int:
        return self.hardware.gpus * self.hardware.nodes

    def to_yaml(self) -> str:
        return yamlio.dumps(to_data(self))


def parse_preset(data: Any, source: str) -> Preset:
    """Validate a YAML mapping as a preset; errors name the dotted field path."""
    if not isinstance(data, dict):
        raise UserError(problem(None, "a preset must be a YAML mapping of keys (version, name, trainer, ...)", "start from `gpuwizard presets show demo-cpu`"), source)
    try:
        return convert(data, Preset)
    except FieldError as exc:
        raise UserError(exc.problem, source) from None


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
        raise UserError(problem("PRESET", f"file {as_path} does not exist", "check the path, or give a preset name from `gpuwizard presets list`", value=name_or_file))
    for folder in (user_preset_files(), shipped_preset_files()):
        if name_or_file in folder:
            return folder[name_or_file]
    known = sorted(set(user_preset_files()) | set(shipped_preset_files()))
    raise UserError(problem("PRESET", "no preset of that name in your preset folder or the shipped presets", f"use one of: {', '.join(known)}; or a path to a YAML file", value=name_or_file))


def load_preset(name_or_file: str) -> Preset:
    return load_preset_file(find_preset(name_or_file))


def save_user_preset(preset: Preset, overwrite: bool = True) -> Path:
    """Save into the user preset folder atomically; an existing file is replaced only when allowed."""
    target = paths.user_presets_dir() / f"{preset.name}.yaml"
    if target.exists() and not overwrite:
        raise UserError(problem("name", "a preset of that name already exists", "choose another name or delete the old one", value=preset.name))
    yamlio.atomic_write(target, preset.to_yaml())
    return target


def delete_user_preset(name: str) -> Path:
    files = user_preset_files()
    if name not in files:
        if name in shipped_preset_files():
            raise UserError(problem("NAME", "is a shipped preset, which cannot be deleted", "save a copy under another name and edit that", value=name))
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
        return convert(data, Preset)
    except FieldError as exc:
        raise UserError(exc.problem) from None
