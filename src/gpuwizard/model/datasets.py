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


def _dim(feature: dict[str, Any] | None) -> int | None:
    shape = (feature or {}).get("shape")
    return int(shape[0]) if isinstance(shape, list) and shape else None


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
    try:
        features = info.get("features") or {}
        cameras = [k for k, v in features.items() if isinstance(v, dict) and v.get("dtype") in ("video", "image")]
        return DatasetMeta(
            root=str(root),
            codebase_version=info.get("codebase_version"),
            robot_type=info.get("robot_type"),
            episodes=int(info["total_episodes"]),
            frames=int(info["total_frames"]),
            fps=float(info["fps"]),
            cameras=cameras,
            state_dim=_dim(features.get("observation.state")),
            action_dim=_dim(features.get("action")),
        )
    except OverflowError:  # int(Infinity)
        raise DatasetError(f"{info_path} holds an infinite total_episodes or total_frames") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise DatasetError(
            f"{info_path} lacks a valid {exc} field (total_episodes, total_frames and fps are required)"
        ) from None
