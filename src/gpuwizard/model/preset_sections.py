"""The sections of a preset (dataset, hardware, batch, optim, scaling, fsdp, launch, slurm, costs, monitor)."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema, model_validator

from gpuwizard.core.safetext import control_characters
from gpuwizard.core.schema import Rules, Strict, rule_error

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
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
    eval_split: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Fraction of episodes held out for a held-out loss (the last ceil(n x fraction) of each task, "
        "as LeRobot main's --dataset.eval_split); 0 holds none out.",
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
        description="Not used, kept so older presets load: on one node torchrun's store binds a free port itself; "
        "several nodes use the port in hardware.rdzv_endpoint.",
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
    gauge: bool = Field(
        False,
        description="Experimental: a gauge inside the trainer writes gauge.jsonl in the run folder: each step's time, "
        "peak memory and, under DDP of several ranks or with accumulation, the gradient norms the noise scale "
        "(B_simple) is estimated from. It reads, never changes, what the trainer computes.",
    )
