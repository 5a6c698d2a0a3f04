"""The preset (SPEC §3): one strict pydantic model that is also the wizard's state."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuwizard import paths, yamlio
from gpuwizard.errors import Problem, UserError, problem

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PRESET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ENDPOINT = re.compile(r"^(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+):(?P<port>\d{1,5})$")


class Strict(BaseModel):
    """Base for every preset section: unknown keys and wrong types are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)


PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


def _env_value(value: Any) -> Any:
    """Environment values may be written unquoted in YAML (NCCL_P2P_DISABLE: 1)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    return value


EnvValue = Annotated[str, BeforeValidator(_env_value)]


class DatasetSpec(Strict):
    repo_id: str = Field(min_length=1)
    root: str | None = None


class Hardware(Strict):
    gpus: PositiveInt = 1
    device: Literal["auto", "cuda", "cpu"] = "auto"
    devices: list[NonNegativeInt] | None = None
    nodes: PositiveInt = 1
    node_rank: NonNegativeInt = 0
    rdzv_endpoint: str | None = None
    gpu_memory_gb: PositiveFloat | None = None

    @field_validator("devices")
    @classmethod
    def _unique_devices(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("device indices must be unique")
        if value is not None and not value:
            raise ValueError("list an index per GPU, or use null for the first gpus devices")
        return value

    @field_validator("rdzv_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is None:
            return value
        match = ENDPOINT.match(value)
        if not match or not 0 < int(match["port"]) < 65536:
            raise ValueError("must be host:port, e.g. 10.0.0.1:29500")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Hardware:
        if self.devices is not None and len(self.devices) != self.gpus:
            raise ValueError(f"hardware.devices lists {len(self.devices)} devices but hardware.gpus is {self.gpus}")
        if self.nodes > 1 and not self.rdzv_endpoint:
            raise ValueError("hardware.rdzv_endpoint (host:port of node 0) is required when hardware.nodes > 1")
        if self.node_rank >= self.nodes:
            raise ValueError(f"hardware.node_rank {self.node_rank} must be below hardware.nodes {self.nodes}")
        return self


class Batch(Strict):
    size: PositiveInt = 8
    grad_accum: PositiveInt = 1


class Optim(Strict):
    lr: PositiveFloat | None = None
    steps: PositiveInt = 100_000
    warmup_ratio: Annotated[float, Field(ge=0, lt=1)] | None = None


class Scaling(Strict):
    rule: Literal["none", "linear_lr", "sqrt_lr", "divide_steps"] = "none"
    reference_gpus: PositiveInt = 1


class Fsdp(Strict):
    wrap_modules: list[Annotated[str, Field(min_length=1)]] | None = None
    min_num_params: PositiveInt | None = None

    @model_validator(mode="after")
    def _exclusive(self) -> Fsdp:
        if self.wrap_modules and self.min_num_params:
            raise ValueError("fsdp.wrap_modules and fsdp.min_num_params are mutually exclusive")
        return self


class Launch(Strict):
    python: str | None = None
    workdir: str | None = None
    master_port: Annotated[int, Field(ge=1, le=65535)] | None = None
    env: dict[str, EnvValue] = Field(default_factory=dict)
    extra_args: list[str] = Field(default_factory=list)

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid environment variable name (letters, digits and _, not starting with a digit)")
        return value


class Monitor(Strict):
    hang_timeout_s: PositiveFloat = 300.0
    first_step_timeout_s: PositiveFloat | None = None


class Preset(Strict):
    """A saved job: what to train, on what, with which trainer and scaling rule."""

    version: Literal[1] = 1
    name: str
    description: str = ""
    trainer: str
    policy: str
    dataset: DatasetSpec
    hardware: Hardware = Field(default_factory=Hardware)
    batch: Batch = Field(default_factory=Batch)
    optim: Optim = Field(default_factory=Optim)
    scaling: Scaling = Field(default_factory=Scaling)
    strategy: Literal["auto", "single", "ddp", "fsdp"] = "auto"
    mixed_precision: Literal["no", "bf16", "fp16"] = "bf16"
    fsdp: Fsdp = Field(default_factory=Fsdp)
    launch: Launch = Field(default_factory=Launch)
    trainer_options: dict[str, Any] = Field(default_factory=dict)
    output_dir: str | None = None
    monitor: Monitor = Field(default_factory=Monitor)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not PRESET_NAME.match(value):
            raise ValueError("use letters, digits, '.', '_' and '-' (it becomes a file name), at most 64 characters")
        return value

    @field_validator("trainer")
    @classmethod
    def _trainer(cls, value: str) -> str:
        from gpuwizard.trainers import trainer_names

        if value not in trainer_names():
            raise ValueError(f"unknown trainer; choose one of {', '.join(trainer_names())}")
        return value

    @field_validator("policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        from gpuwizard.catalog import load_catalog

        if value not in load_catalog():
            raise ValueError(f"not in the policy catalog; choose one of {', '.join(load_catalog())}")
        return value

    @field_validator("trainer_options")
    @classmethod
    def _options(cls, value: dict[str, Any], info: Any) -> dict[str, Any]:
        """Validate against the chosen trainer's typed options; keep the plain dict for YAML."""
        trainer = info.data.get("trainer")
        if trainer is None:
            return value
        from gpuwizard.trainers import get_trainer

        try:
            parsed = get_trainer(trainer).Options.model_validate(value)
        except ValidationError as exc:
            err = exc.errors()[0]
            sub = ".".join(str(p) for p in err["loc"])
            raise TrainerOptionError(sub, err["msg"], err.get("input"), err["type"]) from None
        return parsed.model_dump(exclude_defaults=True)

    @property
    def options(self) -> Any:
        """The trainer_options as the trainer's typed model."""
        from gpuwizard.trainers import get_trainer

        return get_trainer(self.trainer).Options.model_validate(self.trainer_options)

    @property
    def world_size(self) -> int:
        return self.hardware.gpus * self.hardware.nodes

    def to_yaml(self) -> str:
        data = self.model_dump(mode="json")
        return yamlio.dumps(data)


class TrainerOptionError(ValueError):
    """A trainer_options field failed its trainer's typed model."""

    def __init__(self, sub: str, msg: str, value: Any, kind: str):
        self.sub, self.msg, self.value, self.kind = sub, msg, value, kind
        super().__init__(f"{sub}: {msg}")


_FIXES = {
    "extra_forbidden": "remove the key, or check its spelling against SPEC §3",
    "missing": "add the field",
    "greater_than": "use a positive number",
    "greater_than_equal": "use a number that is not negative",
    "less_than": "use a smaller number",
    "less_than_equal": "use a smaller number",
    "int_type": "write a whole number without quotes",
    "float_type": "write a number without quotes, e.g. 1.0e-4",
    "string_type": "write text (quote it)",
    "bool_type": "write true or false",
    "list_type": "write a YAML list, e.g. [0, 1]",
    "dict_type": "write a mapping of keys to values",
    "literal_error": "use one of the allowed values",
    "model_type": "write a mapping (indented keys under it)",
    "model_attributes_type": "write a mapping (indented keys under it)",
}


def problems_from_validation(exc: ValidationError) -> list[Problem]:
    """Turn pydantic errors into Problems whose field is the dotted path in the preset."""
    found = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        value, message, kind = err.get("input"), err["msg"], err["type"]
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, TrainerOptionError):
            loc.append(ctx_err.sub)
            message, value, kind = ctx_err.msg, ctx_err.value, ctx_err.kind
        elif message.startswith("Value error, "):
            message = message[len("Value error, "):]
        elif message.startswith("Assertion failed, "):
            message = message[len("Assertion failed, "):]
        if kind == "extra_forbidden":
            message = "unknown key"
        fix = _FIXES.get(kind)
        if kind == "missing":
            found.append(problem(".".join(loc), "required field is missing", fix))
        else:
            found.append(problem(".".join(loc) or None, message, fix or "correct the value", value=value))
    return found


def parse_preset(data: Any, source: str) -> Preset:
    """Validate a YAML mapping as a preset; errors name the dotted field path."""
    if not isinstance(data, dict):
        raise UserError(problem(None, "a preset must be a YAML mapping of keys (version, name, trainer, ...)", "start from `gpuwizard presets show demo-cpu`"), source)
    try:
        return Preset.model_validate(data)
    except ValidationError as exc:
        raise UserError(problems_from_validation(exc), source) from None


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
    data = preset.model_dump(mode="json")
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
        raise UserError(problems_from_validation(exc)) from None
