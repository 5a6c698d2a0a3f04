"""The preflight's answer as gpuwizard reads it: each section of what scripts/doctor_env.py printed, typed (an
unknown key is ignored, a missing one takes its default), and the flags of launch.extra_args the rules read."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Facts(BaseModel):
    """A section of the answer; `error` says why it could not be answered."""

    model_config = ConfigDict(extra="ignore")

    error: str | None = None


class Space(Facts):
    path: str = ""
    total: int = 0
    free: int = 0


class Memory(Facts):
    total: int | None = None
    available: int | None = None
    cgroup_limit: int | None = None

    @property
    def usable(self) -> int | None:
        """What the job may use: the host's available memory, or its cgroup's limit where that is lower."""
        known = [v for v in (self.available, self.cgroup_limit) if v is not None]
        return min(known) if known else None


class HostFacts(Facts):
    shm: Space | None = None
    memory: Memory = Field(default_factory=Memory)
    disk: Space | None = None
    nofile: list[int] = Field(default_factory=list)
    cpus: int = 1
    hub_offline: bool = False
    hub_token: bool = False
    wandb_login: bool = False
    wandb_mode: str | None = None
    ports: dict[str, bool] = Field(default_factory=dict)


class DeviceFit(Facts):
    capability: str
    runs: bool
    releases: list[str] = Field(default_factory=list)


class TorchFacts(Facts):
    version: str | None = None
    cuda: str | None = None
    arch: list[str] = Field(default_factory=list)
    devices: list[DeviceFit] = Field(default_factory=list)
    available: bool = False
    device_count: int = 0
    nccl: str | None = None


class Feature(Facts):
    dtype: str
    shape: list[int] = Field(default_factory=list)


class DatasetFacts(Facts):
    root: str = ""
    present: bool = False
    version: str | None = None
    episodes: int | None = None
    frames: int | None = None
    fps: float | None = None
    features: dict[str, Feature] = Field(default_factory=dict)


class DecodeFailure(Facts):
    episode: int
    file: str


class CameraDecode(Facts):
    key: str
    files: int = 0
    checked: list[str] = Field(default_factory=list)
    failures: list[DecodeFailure] = Field(default_factory=list)
    frames: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float | None:
        """Frames per second one process decoded, one call per frame as a DataLoader worker asks."""
        return self.frames / self.seconds if self.frames and self.seconds > 0 else None


class VideoFacts(Facts):
    requested: str | None = None
    backend: str | None = None
    torchcodec_installed: bool = False
    torchcodec_error: str | None = None
    cameras: list[CameraDecode] = Field(default_factory=list)


class NormStatsFacts(Facts):
    path: str = ""
    config: str | None = None
    fake: bool = False
    remote: bool = False


class TrainerFacts(Facts):
    name: str | None = None
    version: str | None = None
    defaults: dict[str, Any] = Field(default_factory=dict)
    home: str | None = None
    trackers: dict[str, bool] = Field(default_factory=dict)
    dataset: DatasetFacts | None = None
    video: VideoFacts | None = None
    embodiment_error: str | None = None
    embodiments: list[str] = Field(default_factory=list)
    loader_error: str | None = None
    norm_stats: NormStatsFacts | None = None


class PairResult(Facts):
    devices: list[int]
    ok: bool
    hung: bool = False
    seconds: float = 0.0
    ok_without_p2p: bool | None = None


class PairFacts(Facts):
    results: list[PairResult] = Field(default_factory=list)


class DoctorAnswer(BaseModel):
    """What doctor_env.py printed, typed: each section present where it was asked for."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["answered", "unavailable"] = "answered"
    error: str | None = None
    host: HostFacts | None = None
    torch: TorchFacts | None = None
    trainer: TrainerFacts | None = None
    pairs: PairFacts | None = None
    seconds: dict[str, float] = Field(default_factory=dict)
    watch: list[str] = Field(default_factory=list)


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of `--flag=value` (or `--flag value`) in launch.extra_args, the last one winning as in draccus."""
    found = None
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
        elif arg == flag and i + 1 < len(args):
            found = args[i + 1]
    return found
