"""`gpuwizard runs` over a long history: 1,000 run folders (each status and progress read once)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from common import PYTHON, ROOT, isolated_env, record, wall

SAMPLE_RUN = ROOT / "tests" / "data" / "runs" / "20261129-120000-demo-cpu"


def make_history(data: Path, count: int) -> None:
    """`count` finished runs of a few presets, copied from a real run folder with their ids and presets changed."""
    runs = data / "runs"
    runs.mkdir(parents=True)
    status = json.loads((SAMPLE_RUN / "status.json").read_text())
    for n in range(count):
        folder = runs / f"20261129-{n // 3600:02d}{n // 60 % 60:02d}{n % 60:02d}-bench-{n}"
        shutil.copytree(SAMPLE_RUN, folder)
        preset = f"preset-{n % 7}"
        (folder / "status.json").write_text(
            json.dumps(
                status
                | {"run_id": folder.name, "preset": preset, "created": status["created"] + n, "world_size": 1 + n % 2}
            )
        )


def run(quick: bool = False) -> None:
    print("6. Run history")
    count = 1000
    env = isolated_env()
    make_history(Path(env["GPUWIZARD_DATA_DIR"]), count)
    repeat = 3 if quick else 7
    runs = wall([PYTHON, "-m", "gpuwizard", "runs"], env, repeat)
    as_json = wall([PYTHON, "-m", "gpuwizard", "runs", "--json"], env, repeat)
    floor = wall([PYTHON, "-c", "import pydantic, yaml, psutil"], env, repeat)
    record(
        "history",
        f"gpuwizard runs over {count:,} run folders (ref: its imports alone)",
        runs,
        "s",
        floor,
        "< 1 s",
        runs < 1.0,
    )
    record("history", f"gpuwizard runs --json over {count:,} run folders", as_json, "s", floor, "< 1 s", as_json < 1.0)
