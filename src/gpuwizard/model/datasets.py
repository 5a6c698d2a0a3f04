"""Reads a local LeRobot dataset's metadata (meta/info.json) for the plan and the wizard."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuwizard.core.units import about
from gpuwizard.core.yamlio import read_regular


class DatasetError(Exception):
    """The folder is not a readable LeRobot dataset."""


@dataclass
class DatasetMeta:
    root: str
    codebase_version: str | None
    robot_type: str | None
    episodes: int
    frames: int
    fps: float
    cameras: list[str] = field(default_factory=list)
    state_dim: int | None = None
    action_dim: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        length = about(self.frames / self.fps / 3600) if self.fps else "length unknown"
        cams = ", ".join(c.rsplit(".", 1)[-1] for c in self.cameras) or "no cameras"
        return f"{self.episodes} episodes, {self.frames} frames at {self.fps:g} fps ({length}), cameras: {cams}"


def _dim(features: dict[str, Any], name: str, info_path: Path) -> int | None:
    """A feature's width, the first entry of its shape; None where the dataset has no such feature or says no shape."""
    feature = features.get(name)
    if feature is None or (isinstance(feature, dict) and "shape" not in feature):
        return None
    shape = feature.get("shape") if isinstance(feature, dict) else None
    if isinstance(shape, list) and shape and type(shape[0]) is int and shape[0] >= 0:
        return shape[0]
    raise DatasetError(
        f"{info_path} gives features.{name} the shape {shown(shape)}; LeRobot writes a list of whole numbers there, "
        "the width first (e.g. [6])"
    )


def _count(info: dict[str, Any], key: str, info_path: Path) -> int:
    value = info.get(key)
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        raise DatasetError(f"{info_path} holds an infinite total_episodes or total_frames")
    raise DatasetError(
        f"{info_path} gives {key} as {shown(value)}; LeRobot writes a whole number there (total_episodes, "
        "total_frames and fps are required)"
    )


def _fps(info: dict[str, Any], info_path: Path) -> float:
    value = info.get("fps")
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < float("inf"):
        return float(value)
    raise DatasetError(
        f"{info_path} gives fps as {shown(value)}; LeRobot writes the frames per second there, a number above 0"
    )


def shown(value: Any) -> str:
    """A value of the file as a sentence quotes it: missing, or its JSON, cut at 60 characters."""
    if value is None:
        return "nothing"
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


MAX_INFO_BYTES = 16 << 20


def read_metadata(root: Path) -> DatasetMeta:
    """Parse meta/info.json (LeRobot v2.1 and v3 share the fields used here)."""
    info_path = root / "meta" / "info.json"
    if not root.is_dir():
        raise DatasetError(f"folder {root} does not exist")
    try:
        info = json.loads(read_regular(info_path, MAX_INFO_BYTES).decode("utf-8"))  # a FIFO there never blocks
    except FileNotFoundError:
        raise DatasetError(f"{info_path} is missing, so this is not a LeRobot dataset folder") from None
    except OSError as exc:
        raise DatasetError(f"{info_path} cannot be read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DatasetError(f"{info_path} is not readable JSON ({exc})") from None
    if not isinstance(info, dict):
        raise DatasetError(f"{info_path} does not hold a JSON object")
    features = info.get("features") or {}
    if not isinstance(features, dict):
        raise DatasetError(f"{info_path} gives features as {shown(features)}; LeRobot writes a mapping there")
    text = {k: v for k in ("codebase_version", "robot_type") if isinstance(v := info.get(k), str)}
    return DatasetMeta(
        root=str(root),
        codebase_version=text.get("codebase_version"),
        robot_type=text.get("robot_type"),
        episodes=_count(info, "total_episodes", info_path),
        frames=_count(info, "total_frames", info_path),
        fps=_fps(info, info_path),
        cameras=[k for k, v in features.items() if isinstance(v, dict) and v.get("dtype") in ("video", "image")],
        state_dim=_dim(features, "observation.state", info_path),
        action_dim=_dim(features, "action", info_path),
    )
