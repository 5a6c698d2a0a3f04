"""Writes and reads the synthetic SO-100-like dataset as a LeRobot-v3-style folder (numpy arrays, no parquet)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

FPS = 30
FRAMES_PER_EPISODE = 60
IMAGE_HW = (48, 64)
DOF = 6
CAMERA = "observation.images.front"


def _episode(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An arm easing from a random start to a target whose position is drawn in the camera image."""
    start = rng.uniform(-1, 1, DOF).astype(np.float32)
    target = rng.uniform(-1, 1, DOF).astype(np.float32)
    t = np.linspace(0, 1, FRAMES_PER_EPISODE + 1, dtype=np.float32)[:, None]
    ease = 0.5 - 0.5 * np.cos(np.pi * t)
    path = start + (target - start) * ease + rng.normal(0, 0.01, (FRAMES_PER_EPISODE + 1, DOF)).astype(np.float32)
    states, actions = path[:-1], path[1:]
    h, w = IMAGE_HW
    images = np.full((FRAMES_PER_EPISODE, h, w, 3), 30, dtype=np.uint8)
    cy, cx = int((target[0] + 1) / 2 * (h - 9)) + 4, int((target[1] + 1) / 2 * (w - 9)) + 4
    images[:, cy - 4 : cy + 4, cx - 4 : cx + 4, 0] = 220
    images[:, cy - 4 : cy + 4, cx - 4 : cx + 4, 1] = int((target[2] + 1) * 100)
    return states, actions, images


def _stats(array: np.ndarray) -> dict[str, list[float]]:
    axes = tuple(range(array.ndim - 1))
    return {
        "mean": array.mean(axes).tolist(),
        "std": array.std(axes).tolist(),
        "min": array.min(axes).tolist(),
        "max": array.max(axes).tolist(),
        "count": [int(array.shape[0])],
    }


def write_dataset(root: Path, episodes: int, seed: int = 0) -> None:
    """Create the dataset atomically: build in a temporary sibling folder, then rename."""
    rng = np.random.default_rng(seed)
    parts = [_episode(rng) for _ in range(episodes)]
    states = np.concatenate([p[0] for p in parts])
    actions = np.concatenate([p[1] for p in parts])
    images = np.concatenate([p[2] for p in parts])
    episode_index = np.repeat(np.arange(episodes), FRAMES_PER_EPISODE)
    frame_index = np.tile(np.arange(FRAMES_PER_EPISODE), episodes)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        (tmp / "data" / "chunk-000").mkdir(parents=True)
        (tmp / "meta").mkdir()
        np.savez(
            tmp / "data" / "chunk-000" / "file-000.npz",
            state=states,
            action=actions,
            image=images,
            episode_index=episode_index,
            frame_index=frame_index,
        )
        names = [f"joint_{i}" for i in range(DOF - 1)] + ["gripper"]
        info = {
            "codebase_version": "v3.0",
            "robot_type": "so100",
            "fps": FPS,
            "total_episodes": episodes,
            "total_frames": int(states.shape[0]),
            "total_tasks": 1,
            "chunks_size": 1000,
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.npz",
            "video_path": None,
            "splits": {"train": f"0:{episodes}"},
            "features": {
                "observation.state": {"dtype": "float32", "shape": [DOF], "names": names},
                "action": {"dtype": "float32", "shape": [DOF], "names": names},
                CAMERA: {"dtype": "image", "shape": [*IMAGE_HW, 3], "names": ["height", "width", "channels"]},
                "episode_index": {"dtype": "int64", "shape": [1], "names": None},
                "frame_index": {"dtype": "int64", "shape": [1], "names": None},
            },
            "generator": "gpuwizard demo (synthetic SO-100-like reaching)",
        }
        (tmp / "meta" / "info.json").write_text(json.dumps(info, indent=2))
        (tmp / "meta" / "stats.json").write_text(
            json.dumps({"observation.state": _stats(states), "action": _stats(actions)}, indent=2)
        )
        (tmp / "meta" / "tasks.jsonl").write_text(json.dumps({"task_index": 0, "task": "reach the red marker"}) + "\n")
        try:
            os.rename(tmp, root)
        except OSError:
            if not (root / "meta" / "info.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_dataset(root: Path, episodes: int) -> None:
    if not (root / "meta" / "info.json").exists():
        write_dataset(root, episodes)


def load_arrays(root: Path) -> dict[str, np.ndarray]:
    with np.load(root / "data" / "chunk-000" / "file-000.npz") as data:
        return {k: data[k] for k in data.files}
