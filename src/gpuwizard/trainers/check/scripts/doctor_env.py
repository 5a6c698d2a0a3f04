"""The training interpreter's side of `gpuwizard doctor`: what this environment and this host will do to a run,
measured, answered as one marked JSON line (gwcheck.MARK).

Usage: doctor_env.py REQUEST_JSON. The request names the sections to answer: "host" (stdlib only: /dev/shm, memory,
disk, open files, logins, ports; gpuwizard runs it in its own interpreter on every call, so it is never stale),
"torch" (the build and what it runs on), "trainer" (the dataset as the trainer reads it, its video decoder timed on the
dataset's own files, the trainer's own defaults), "pairs" (a short all-reduce between each pair of devices). Imports
only the standard library, torch and the trainer (and gwcheck, for the mark).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import random
import re
import resource
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import gwcheck

SHM_VARIABLE = "GPUWIZARD_SHM_PATH"
"""Stands in for /dev/shm (tests give a small tmpfs or folder)."""
TRUE = ("1", "on", "yes", "true")
DECODE_SECONDS = 4.0
"""All cameras' decoding together: half checks the end of each video file, half times random frames."""
MISSING_LIBRARY = re.compile(r"(lib[\w.+-]+?\.so[.\d]*): cannot open shared object file")


# host: the standard library only, valid in any interpreter


def space(path: str) -> dict:
    """Total and free bytes of the file system holding `path` (its nearest existing folder)."""
    folder = Path(path).expanduser().absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    stat = os.statvfs(folder)
    return {"path": str(folder), "total": stat.f_blocks * stat.f_frsize, "free": stat.f_bavail * stat.f_frsize}


def memory() -> dict:
    """/proc/meminfo's total and available bytes, and the cgroup v2 limit this process lives under."""
    found: dict = {"total": None, "available": None, "cgroup_limit": None}
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("MemTotal", "MemAvailable"):
                found["total" if name == "MemTotal" else "available"] = int(rest.split()[0]) * 1024
    with contextlib.suppress(OSError, ValueError, IndexError):
        group = Path("/proc/self/cgroup").read_text().splitlines()[0].split("::", 1)[1]
        limit = Path("/sys/fs/cgroup", group.lstrip("/"), "memory.max").read_text().strip()
        found["cgroup_limit"] = None if limit == "max" else int(limit)
    return found


def netrc_has(host: str) -> bool:
    import netrc

    with contextlib.suppress(OSError, netrc.NetrcParseError):
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    return False


def hf_token_present() -> bool:
    """huggingface_hub's own order: HF_TOKEN, then the token file (HF_TOKEN_PATH, else HF_HOME/token)."""
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return True
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    home = os.environ.get("HF_HOME") or os.path.join(cache, "huggingface")
    path = os.environ.get("HF_TOKEN_PATH") or os.path.join(home, "token")
    with contextlib.suppress(OSError):
        return bool(Path(path).expanduser().read_text().strip())
    return False


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def host(request: dict) -> dict:
    wandb_host = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("://")[-1].split("/")[0]
    return {
        "shm": space(os.environ.get(SHM_VARIABLE, "/dev/shm")),
        "memory": memory(),
        "disk": space(request.get("output_dir") or "."),
        "nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE)),
        "cpus": len(os.sched_getaffinity(0)),
        "hub_offline": os.environ.get("HF_HUB_OFFLINE", "").lower() in TRUE,
        "hub_token": hf_token_present(),
        "wandb_login": bool(os.environ.get("WANDB_API_KEY")) or netrc_has(wandb_host),
        "wandb_mode": os.environ.get("WANDB_MODE"),
        "ports": {str(port): port_free(port) for port in request.get("ports", [])},
    }


# torch: the build and the devices it can run on


def code_compatible(torch, device_cc: int, code_cc: int) -> bool:
    """torch's own rule (torch/cuda/__init__.py _code_compatible_with_device, 2.8 and later), else its older
    _check_cubins rule: code runs on devices of the same major version."""
    rule = getattr(torch.cuda, "_code_compatible_with_device", None)
    if rule is None:
        return device_cc // 10 == code_cc // 10
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rule(device_cc, code_cc)


def release_codes(torch) -> dict[str, set[int]]:
    """torch's own table of the architectures each CUDA build of this release carries (PYTORCH_RELEASES_CODE_CC in
    torch/cuda/__init__.py; from 2.13 one set per host architecture, read as its _warn_unsupported_code reads it)."""
    table = getattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", {})
    host = getattr(torch.cuda, "_host_arch_key", None)
    return {
        cuda: codes.get(host(), set()) if isinstance(codes, dict) and host else codes for cuda, codes in table.items()
    }


def torch_facts(request: dict) -> dict:
    try:
        import torch
    except ImportError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    flags_of = getattr(torch._C, "_cuda_getArchFlags", None)  # what get_arch_list() returns, without a device
    arch = (flags_of() or "").split() if flags_of and torch.version.cuda else []
    codes = [int(flag.split("_", 1)[1].rstrip("af")) for flag in arch]
    releases = release_codes(torch)
    devices = []
    for cc in request.get("capabilities", []):
        number = int(cc[0]) * 10 + int(cc[1])
        devices.append(
            {
                "capability": f"{cc[0]}.{cc[1]}",
                "runs": any(code_compatible(torch, number, code) for code in codes),
                "releases": [
                    cuda for cuda, ccs in releases.items() if any(code_compatible(torch, number, c) for c in ccs)
                ],
            }
        )
    facts = {"version": torch.__version__, "cuda": torch.version.cuda, "arch": arch, "devices": devices}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        facts["available"] = torch.cuda.is_available()
        facts["device_count"] = torch.cuda.device_count() if facts["available"] else 0
    with contextlib.suppress(Exception):
        facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None
    return facts


# trainer: the dataset as the trainer reads it, and its decoder


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def first_error_line(text: str) -> str:
    """A long loader message (torchcodec's holds a traceback per FFmpeg version) in one line: the missing
    libraries where that is what it says, else its first line."""
    missing = sorted(set(MISSING_LIBRARY.findall(text)))
    if missing:
        return f"{', '.join(missing)} not found"
    return next((line.strip() for line in text.splitlines() if line.strip()), text)[:300]


def video_backend(requested: str | None) -> dict:
    """The backend lerobot-train will decode with: --dataset.video_backend, else LeRobot's own
    get_safe_default_video_backend (lerobot/utils/import_utils.py, 0.6.1 and main), and why torchcodec is not it."""
    from lerobot.utils.import_utils import get_safe_default_video_backend

    found: dict = {"requested": requested, "torchcodec_installed": installed("torchcodec")}
    if found["torchcodec_installed"]:
        try:
            importlib.import_module("torchcodec")
        except (ImportError, OSError, RuntimeError) as exc:
            found["torchcodec_error"] = first_error_line(str(exc))
    found["backend"] = requested or get_safe_default_video_backend()
    return found


def decode_episode(decode, meta, root: Path, episode: int, key: str, at: float, backend: str, tolerance: float):
    """One frame of one episode's camera, as lerobot-train's reader asks for it (dataset_reader.py _query_videos:
    the episode's from_timestamp plus the frame's own)."""
    start = meta.episodes[episode][f"videos/{key}/from_timestamp"]
    return decode(root / meta.get_video_file_path(episode, key), [start + at], tolerance, backend)


def lerobot_videos(meta, root: Path, backend: str, budget_s: float) -> list[dict]:
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


def lerobot_trainer(request: dict) -> dict:
    """The dataset where lerobot-train will look (--dataset.root, else HF_LEROBOT_HOME/<repo_id>), read by LeRobot's
    own metadata loader, its videos decoded, and lerobot-train's own defaults (configs/train.py)."""
    import dataclasses

    from lerobot.configs.train import TrainPipelineConfig
    from lerobot.utils.constants import HF_LEROBOT_HOME

    defaults = {f.name: f.default for f in dataclasses.fields(TrainPipelineConfig)}
    found: dict = {
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


def groot_trainer(request: dict) -> dict:
    """launch_finetune.py's checks before its model loads, as its own code makes them (Isaac-GR00T 626af89): the
    embodiment tag through EmbodimentTag.resolve (gr00t/experiment/launch_finetune.py), the dataset's metadata through
    LeRobotEpisodeLoader._load_metadata (gr00t/data/dataset/lerobot_episode_loader.py)."""
    sys.path.insert(0, os.getcwd())  # launch_finetune.py runs from the checkout, which is not installed
    from gr00t.data.embodiment_tags import EmbodimentTag

    found: dict = {"name": "groot"}
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


def openpi_trainer(request: dict) -> dict:
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
    found: dict = {"name": "openpi", "norm_stats": {"path": where, "config": cfg.name, "fake": repo_id == "fake"}}
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


def trainer(request: dict) -> dict:
    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing here downloads: a dataset that is not on disk is a finding
    name = request.get("trainer")
    if name not in TRAINERS:
        return {"name": name}
    module, answer = TRAINERS[name]
    if name != "groot" and not installed(module):  # GR00T's checkout is found from its folder (the cwd)
        return {"name": name, "error": f"{module} is not installed in this interpreter"}
    return answer(request)


# pairs: a short all-reduce between two devices, each rank a process of its own


def pair_rank(request: dict) -> None:
    """One rank of a pair: join through a file store, all-reduce a small tensor, say what it summed to."""
    import datetime

    import torch
    import torch.distributed as dist

    rank, backend = request["rank"], request["backend"]
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", request["devices"][rank])
        torch.cuda.set_device(device)
    store = dist.FileStore(request["store"], 2)
    timeout = datetime.timedelta(seconds=request["timeout_s"])
    dist.init_process_group(backend, store=store, rank=rank, world_size=2, timeout=timeout)
    tensor = torch.ones(1 << 18, device=device)
    dist.all_reduce(tensor)
    total = float(tensor[0].item())
    dist.destroy_process_group()
    print(json.dumps({"sum": total}))


def pair(devices: list[int], backend: str, timeout_s: float, env: dict, folder: Path) -> dict:
    """Both ranks of one pair, ended after `timeout_s`: a pair whose all-reduce never returns reads as hung."""
    store = folder / f"store-{devices[0]}-{devices[1]}-{env.get('NCCL_P2P_DISABLE', '')}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                json.dumps(
                    {
                        "pair_rank": {
                            "rank": rank,
                            "devices": devices,
                            "backend": backend,
                            "store": str(store),
                            "timeout_s": timeout_s,
                        }
                    }
                ),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for rank in (0, 1)
    ]
    started, result = time.monotonic(), {"devices": devices, "ok": True, "hung": False, "error": None}
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(0.1, timeout_s - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            result |= {"ok": False, "hung": True}
            continue
        if proc.returncode != 0 or '"sum": 2.0' not in out:
            result |= {"ok": False, "error": first_error_line((err.strip().splitlines() or ["no answer"])[-1])}
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result["seconds"] = time.monotonic() - started
    return result


def pairs(request: dict) -> dict:
    """Every pair of the job's devices; a pair that hangs is tried again with peer-to-peer off (NCCL_P2P_DISABLE=1)."""
    import tempfile

    spec = request["pairs"]
    devices, backend, timeout_s = spec["devices"], spec["backend"], float(spec["timeout_s"])
    found = []
    with tempfile.TemporaryDirectory() as folder:
        for i, a in enumerate(devices):
            for b in devices[i + 1 :]:
                result = pair([a, b], backend, timeout_s, dict(os.environ), Path(folder))
                if result["hung"]:
                    retry = pair([a, b], backend, timeout_s, dict(os.environ, NCCL_P2P_DISABLE="1"), Path(folder))
                    result["ok_without_p2p"] = retry["ok"]
                found.append(result)
    return {"results": found}


SECTIONS = {"host": host, "torch": torch_facts, "trainer": trainer, "pairs": pairs}


def main() -> None:
    request = json.loads(sys.argv[1])
    if "pair_rank" in request:
        pair_rank(request["pair_rank"])
        return
    answer: dict = {"status": "answered", "seconds": {}}
    for section in request.get("sections", []):
        started = time.monotonic()
        try:
            answer[section] = SECTIONS[section](request)
        except Exception as exc:  # a section that fails is reported, the others still answer
            answer[section] = {"error": f"{type(exc).__name__}: {exc}"}
        answer["seconds"][section] = round(time.monotonic() - started, 3)
    answer["watch"] = [p for p in sys.path if p and os.path.isdir(p)] + answer.get("trainer", {}).get("watch", [])
    gwcheck.emit(answer)


if __name__ == "__main__":
    main()
