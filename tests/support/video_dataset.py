"""A tiny LeRobot dataset with videos, written by LeRobot's own writer in its environment (the image-only tiny dataset
of scripts/envs never touches a video decoder): for the preflight's test and its benchmark."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

WRITER = """
import sys
from pathlib import Path
import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset

joint = [f"j{i}" for i in range(6)]
features = {
    "observation.state": {"dtype": "float32", "shape": (6,), "names": joint},
    "action": {"dtype": "float32", "shape": (6,), "names": joint},
    "observation.images.front": {"dtype": "video", "shape": (48, 64, 3), "names": ["height", "width", "channels"]},
}
ds = LeRobotDataset.create(repo_id="local/so100_video", fps=30, features=features, root=Path(sys.argv[1]),
                           robot_type="so100", use_videos=True)
rng = np.random.default_rng(0)
for _ in range(3):
    for _ in range(30):
        ds.add_frame({"observation.state": rng.standard_normal(6).astype("float32"),
                      "action": rng.standard_normal(6).astype("float32"),
                      "observation.images.front": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8),
                      "task": "pick the cube"})
    ds.save_episode()
ds.finalize()
"""
"""Three episodes of 30 frames in one video file, as LeRobot 0.6.1's writer lays out a v3 dataset."""


def write_video_dataset(python: str, root: Path) -> Path:
    """WRITER run by the LeRobot interpreter `python` into `root` (offline); returns `root`."""
    made = subprocess.run(
        [python, "-c", WRITER, str(root)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if made.returncode != 0:
        raise RuntimeError(f"LeRobot's writer failed: {made.stderr[-2000:]}")
    return root
