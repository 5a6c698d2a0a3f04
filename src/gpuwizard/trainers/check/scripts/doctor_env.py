"""The training interpreter's side of `gpuwizard doctor`: what this environment and this host will do to a run,
measured, answered as one marked JSON line (gwcheck.MARK).

Usage: doctor_env.py REQUEST_JSON. The request names the sections to answer: "host" (stdlib only: /dev/shm, memory,
disk, open files, logins, ports; gpuwizard runs it in its own interpreter on every call, so it is never stale),
"torch" (the build and what it runs on), "trainer" (the dataset as the trainer reads it, its video decoder timed on the
dataset's own files, the trainer's own defaults), "pairs" (a short all-reduce between each pair of devices). Imports
only the standard library, torch and the trainer (through doctor_trainers.py, its trainer section) and gwcheck.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import gwcheck
from doctor_trainers import first_error_line, trainer

SHM_VARIABLE = "GPUWIZARD_SHM_PATH"
"""Stands in for /dev/shm (tests give a small tmpfs or folder)."""
TRUE = ("1", "on", "yes", "true")


# host: the standard library only, valid in any interpreter


def space(path: str) -> dict[str, Any]:
    """Total and free bytes of the file system holding `path` (its nearest existing folder)."""
    folder = Path(path).expanduser().absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    stat = os.statvfs(folder)
    return {"path": str(folder), "total": stat.f_blocks * stat.f_frsize, "free": stat.f_bavail * stat.f_frsize}


def memory() -> dict[str, Any]:
    """/proc/meminfo's total and available bytes, and the cgroup v2 limit this process lives under."""
    found: dict[str, Any] = {"total": None, "available": None, "cgroup_limit": None}
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


def host(request: dict[str, Any]) -> dict[str, Any]:
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


def code_compatible(torch: ModuleType, device_cc: int, code_cc: int) -> bool:
    """torch's own rule (torch/cuda/__init__.py _code_compatible_with_device, 2.8 and later), else its older
    _check_cubins rule: code runs on devices of the same major version."""
    rule = getattr(torch.cuda, "_code_compatible_with_device", None)
    if rule is None:
        return device_cc // 10 == code_cc // 10
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(rule(device_cc, code_cc))


def release_codes(torch: ModuleType) -> dict[str, set[int]]:
    """torch's own table of the architectures each CUDA build of this release carries (PYTORCH_RELEASES_CODE_CC in
    torch/cuda/__init__.py; from 2.13 one set per host architecture, read as its _warn_unsupported_code reads it)."""
    table = getattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", {})
    host = getattr(torch.cuda, "_host_arch_key", None)
    return {
        cuda: codes.get(host(), set()) if isinstance(codes, dict) and host else codes for cuda, codes in table.items()
    }


def torch_facts(request: dict[str, Any]) -> dict[str, Any]:
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
        nccl: Any = torch.cuda.nccl  # its version() is untyped in torch's own annotations
        facts["nccl"] = ".".join(map(str, nccl.version())) if torch.version.cuda else None
    return facts


# pairs: a short all-reduce between two devices, each rank a process of its own


def pair_rank(request: dict[str, Any]) -> None:
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


def pair(devices: list[int], backend: str, timeout_s: float, env: dict[str, str], folder: Path) -> dict[str, Any]:
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


def pairs(request: dict[str, Any]) -> dict[str, Any]:
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
    answer: dict[str, Any] = {"status": "answered", "seconds": {}}
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
