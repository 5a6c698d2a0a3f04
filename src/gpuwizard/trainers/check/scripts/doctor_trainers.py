"""doctor_env.py's trainer section: the dataset where the trainer will look, read by the trainer's own code (LeRobot's
metadata loader and video decoder, GR00T's embodiment tags and episode loader, openpi's norm stats), and the trainer's
own defaults. Imports only the standard library and the trainer (torch through it); never imported by gpuwizard.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import random
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DECODE_SECONDS = 4.0
"""All cameras' decoding together: half checks the end of each video file, half times random frames."""
MISSING_LIBRARY = re.compile(r"(lib[\w.+-]+?\.so[.\d]*): cannot open shared object file")


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def first_error_line(text: str) -> str:
    """A long loader message (torchcodec's holds a traceback per FFmpeg version) in one line: the missing
    libraries where that is what it says, else its first line."""
    missing = sorted(set(MISSING_LIBRARY.findall(text)))
    if missing:
        return f"{', '.join(missing)} not found"
    return next((line.strip() for line in text.splitlines() if line.strip()), text)[:300]


def video_backend(requested: str | None) -> dict[str, Any]:
    """The backend lerobot-train will decode with: --dataset.video_backend, else LeRobot's own
    get_safe_default_video_backend (lerobot/utils/import_utils.py, 0.6.1 and main), and why torchcodec is not it."""
    from lerobot.utils.import_utils import get_safe_default_video_backend

    found: dict[str, Any] = {"requested": requested, "torchcodec_installed": installed("torchcodec")}
    if found["torchcodec_installed"]:
        try:
            importlib.import_module("torchcodec")
        except (ImportError, OSError, RuntimeError) as exc:
            found["torchcodec_error"] = first_error_line(str(exc))
    found["backend"] = requested or get_safe_default_video_backend()
    return found


def decode_episode(
    decode: Callable[..., Any], meta: Any, root: Path, episode: int, key: str, at: float, backend: str, tolerance: float
) -> Any:
    """One frame of one episode's camera, as lerobot-train's reader asks for it (dataset_reader.py _query_videos:
    the episode's from_timestamp plus the frame's own)."""
    start = meta.episodes[episode][f"videos/{key}/from_timestamp"]
    return decode(root / meta.get_video_file_path(episode, key), [start + at], tolerance, backend)


def lerobot_videos(meta: Any, root: Path, backend: str, budget_s: float) -> list[dict[str, Any]]:
    """Per camera: the last frame of the last episode in each video file (a file cut short fails there), then frames
    at random times of random episodes, timed, as a DataLoader worker decodes them (one call per sample)."""
    import inspect

    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.datasets.video_utils import decode_video_frames

    tolerance = inspect.signature(LeRobotDataset.__init__).parameters["tolerance_s"].default
    cameras = []
    episodes = meta.episodes
    for key in meta.video_keys:
        last_in_file: dict[str, int] = {}
        for index in range(len(episodes)):
            last_in_file[str(meta.get_video_file_path(index, key))] = index
        failures, checked, started = [], [], time.monotonic()
        for path, episode in last_in_file.items():
            if time.monotonic() - started > budget_s:
                break
            length = episodes[episode][f"videos/{key}/to_timestamp"] - episodes[episode][f"videos/{key}/from_timestamp"]
            checked.append(path)
            try:
                decode_episode(decode_video_frames, meta, root, episode, key, length - 1 / meta.fps, backend, tolerance)
            except Exception as exc:  # the decoder's own failure is the finding, whatever its type
                failures.append(
                    {"episode": episode, "file": path, "error": first_error_line(f"{type(exc).__name__}: {exc}")}
                )
        broken = {f["episode"] for f in failures}
        usable = [i for i in range(len(episodes)) if i not in broken]
        rng, frames, began = random.Random(0), 0, time.monotonic()
        while usable and time.monotonic() - began < budget_s and frames < 200:
            episode = rng.choice(usable)
            length = episodes[episode]["length"]
            try:
                decode_episode(
                    decode_video_frames, meta, root, episode, key, rng.randrange(length) / meta.fps, backend, tolerance
                )
            except Exception as exc:  # a frame before the end of its file that does not decode either
                usable.remove(episode)
                error = first_error_line(f"{type(exc).__name__}: {exc}")
                failures.append(
                    {"episode": episode, "file": str(meta.get_video_file_path(episode, key)), "error": error}
                )
                continue
            frames += 1
        seconds = time.monotonic() - began
        cameras.append(
            {
                "key": key,
                "files": len(last_in_file),
                "checked": checked,
                "failures": failures,
                "frames": frames,
                "seconds": seconds,
            }
        )
    return cameras


def lerobot_trainer(request: dict[str, Any]) -> dict[str, Any]:
    """The dataset where lerobot-train will look (--dataset.root, else HF_LEROBOT_HOME/<repo_id>), read by LeRobot's
    own metadata loader, its videos decoded, and lerobot-train's own defaults (configs/train.py)."""
    import dataclasses

    from lerobot.configs.train import TrainPipelineConfig
    from lerobot.utils.constants import HF_LEROBOT_HOME

    defaults = {f.name: f.default for f in dataclasses.fields(TrainPipelineConfig)}
    found: dict[str, Any] = {
        "name": "lerobot",
        "version": importlib.metadata.version("lerobot"),
        "defaults": {k: defaults.get(k) for k in ("num_workers", "prefetch_factor", "save_freq", "batch_size")},
        "home": str(HF_LEROBOT_HOME),
        "trackers": {"wandb": installed("wandb")},
    }
    dataset = request.get("dataset") or {}
    root = Path(dataset["root"]) if dataset.get("root") else HF_LEROBOT_HOME / (dataset.get("repo_id") or "")
    found["dataset"] = {"root": str(root), "present": (root / "meta" / "info.json").is_file()}
    if not found["dataset"]["present"]:
        return found
    from lerobot.datasets.lerobot_dataset import LeRobotDatasetMetadata

    try:
        meta = LeRobotDatasetMetadata(dataset.get("repo_id") or root.name, root=root)
    except Exception as exc:  # LeRobot's own refusal (BackwardCompatibilityError for a v2.1 dataset, ...)
        found["dataset"]["error"] = f"{type(exc).__name__}: {exc}"
        return found
    found["dataset"] |= {
        "version": str(meta.info.get("codebase_version")),
        "episodes": meta.total_episodes,
        "frames": meta.total_frames,
        "fps": meta.fps,
        "features": {k: {"dtype": v["dtype"], "shape": list(v["shape"])} for k, v in meta.features.items()},
    }
    found["watch"] = [str(root / "meta"), str(root / "meta" / "info.json")]
    if meta.video_keys:
        found["video"] = video_backend(request.get("video_backend"))
        budget = float(request.get("decode_seconds", DECODE_SECONDS)) / len(meta.video_keys) / 2
        found["video"]["cameras"] = lerobot_videos(meta, root, found["video"]["backend"], budget)
        found["watch"] += sorted(
            {str(root / path) for camera in found["video"]["cameras"] for path in camera["checked"]}
        )
    return found


def loader_files(source: Path) -> list[str]:
    """The meta/ files GR00T's LeRobotEpisodeLoader._load_metadata requires, read from its own source (for an
    interpreter that cannot import it): each `meta_dir / NAME` it assigns, less those it only reads `if` they exist."""
    import ast

    tree = ast.parse(source.read_text(encoding="utf-8"))
    names = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    method = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_load_metadata")
    optional = {
        n.id
        for test in ast.walk(method)
        if isinstance(test, ast.If)
        for n in ast.walk(test.test)
        if isinstance(n, ast.Name)
    }
    files = []
    for node in ast.walk(method):
        if not (
            isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Div)
        ):
            continue
        joined, target = node.value, node.targets[0]
        from_meta = isinstance(joined.left, ast.Name) and joined.left.id == "meta_dir"
        if (
            from_meta
            and isinstance(joined.right, ast.Name)
            and isinstance(target, ast.Name)
            and target.id not in optional
        ):
            files.append(f"{names.get('LEROBOT_META_DIR_NAME', 'meta')}/{names[joined.right.id]}")
    return files


def groot_trainer(request: dict[str, Any]) -> dict[str, Any]:
    """launch_finetune.py's checks before its model loads, as its own code makes them (Isaac-GR00T 626af89): the
    embodiment tag through EmbodimentTag.resolve (gr00t/experiment/launch_finetune.py), the dataset's metadata through
    LeRobotEpisodeLoader._load_metadata (gr00t/data/dataset/lerobot_episode_loader.py)."""
    sys.path.insert(0, os.getcwd())  # launch_finetune.py runs from the checkout, which is not installed
    from gr00t.data.embodiment_tags import EmbodimentTag

    found: dict[str, Any] = {"name": "groot"}
    try:
        EmbodimentTag.resolve(request.get("embodiment_tag") or "")
    except ValueError as exc:
        found["embodiment_error"] = str(exc).strip().splitlines()[0]
        found["embodiments"] = [member.value for member in EmbodimentTag]
    root = Path((request.get("dataset") or {}).get("root") or "")
    found["dataset"] = {"root": str(root), "present": root.is_dir()}
    if not found["dataset"]["present"]:
        return found
    found["watch"] = [str(root / "meta")]
    try:
        from gr00t.data.dataset import lerobot_episode_loader
    except ImportError as exc:  # the loader's own imports (pandas) missing: the run fails there too
        found["loader_error"] = f"{type(exc).__name__}: {exc}"
        source = Path(os.getcwd(), "gr00t", "data", "dataset", "lerobot_episode_loader.py")
        missing = [name for name in loader_files(source) if not (root / name).is_file()]
        if missing:
            found["dataset"]["error"] = f"FileNotFoundError: {', '.join(str(root / m) for m in missing)} missing"
        return found
    loader = lerobot_episode_loader.LeRobotEpisodeLoader.__new__(lerobot_episode_loader.LeRobotEpisodeLoader)
    loader.dataset_path = root
    try:
        loader._load_metadata()
    except Exception as exc:  # GR00T's own refusal is the finding
        found["dataset"]["error"] = f"{type(exc).__name__}: {exc}"
    return found


def openpi_trainer(request: dict[str, Any]) -> dict[str, Any]:
    """The norm stats openpi's data loader refuses to start without (transform_dataset in
    src/openpi/training/data_loader.py, Physical-Intelligence/openpi 15a9616), found where
    DataConfigFactory.create_base_config looks: the assets folder and asset id of the TrainConfig the command runs."""
    import openpi.shared.normalize as normalize
    import openpi.training.config as config

    entry, _, *args = request.get("check_argv") or ["train.py", "1"]
    sys.argv = [entry, *args]  # tyro reads sys.argv, as the training script's own main() does
    cfg = config.cli()
    factory = cfg.data
    repo_id = factory.repo_id if isinstance(factory.repo_id, str) else None
    asset_id = factory.assets.asset_id or repo_id
    where = f"{factory.assets.assets_dir or cfg.assets_dirs}/{asset_id}"
    found: dict[str, Any] = {
        "name": "openpi",
        "norm_stats": {"path": where, "config": cfg.name, "fake": repo_id == "fake"},
    }
    if asset_id is None or "://" in where:
        found["norm_stats"]["remote"] = True
        return found
    try:
        normalize.load(where)
    except FileNotFoundError as exc:
        found["norm_stats"]["error"] = str(exc)
    found["watch"] = [where]
    return found


TRAINERS = {
    "lerobot": ("lerobot", lerobot_trainer),
    "groot": ("gr00t", groot_trainer),
    "openpi": ("openpi", openpi_trainer),
}


def trainer(request: dict[str, Any]) -> dict[str, Any]:
    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing here downloads: a dataset that is not on disk is a finding
    name = request.get("trainer")
    if name not in TRAINERS:
        return {"name": name}
    module, answer = TRAINERS[name]
    if name != "groot" and not installed(module):  # GR00T's checkout is found from its folder (the cwd)
        return {"name": name, "error": f"{module} is not installed in this interpreter"}
    return answer(request)
