"""Which LeRobot a training interpreter has (0.6.1 or main), found without importing lerobot and remembered until
that environment changes: the command-line form and the step unit follow from it."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Literal

from gpuwizard.trainers.base import sibling_tool
from gpuwizard.trainers.check import envcache

DETECT_SCRIPT = r"""
import importlib.metadata as md, importlib.util as iu, json, os, sys
out = {"version": None, "parallelism": False, "watch": [p for p in sys.path if os.path.isdir(p)]}
try:
    out["version"] = md.version("lerobot")
except Exception:
    pass
spec = iu.find_spec("lerobot")
if spec and spec.submodule_search_locations:
    root = list(spec.submodule_search_locations)[0]
    out["parallelism"] = os.path.exists(os.path.join(root, "configs", "parallelism.py"))
    out["watch"] += [root, os.path.join(root, "configs")]
print(json.dumps(out))
"""


@dataclass(frozen=True)
class LeRobotInstall:
    """Which lerobot the training environment has, and where its lerobot-train is."""

    version: str | None
    api: Literal["v0.6", "main"]
    detected: bool
    train_path: str | None
    asked: bool = True
    """False: the interpreter was not asked (an untrusted preset named it) and nothing was remembered of it."""


@functools.lru_cache(maxsize=16)
def detect(python: str, asks: bool) -> dict[str, Any] | None:
    """Ask the training interpreter which lerobot it has, without importing lerobot (remembered in EnvCache);
    without `asks` (an untrusted preset chose the interpreter) only a remembered answer is read, nothing runs."""
    exe = envcache.interpreter(python)
    key = f"{exe}|{os.environ.get('PYTHONPATH', '')}"
    cache = envcache.EnvCache("lerobot-install")
    remembered = cache.get(key, exe)
    if remembered is None and not asks:
        return None
    if remembered is None:
        try:
            out = subprocess.run([python, "-c", DETECT_SCRIPT], capture_output=True, text=True, timeout=30, check=False)
            text = out.stdout.strip()
            remembered = json.loads(text.splitlines()[-1]) if out.returncode == 0 and text else None
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return None
        if not isinstance(remembered, dict):
            return None
        cache.put(key, exe, remembered, [str(p) for p in remembered.get("watch", [])])
    return {"version": remembered.get("version"), "parallelism": bool(remembered.get("parallelism"))}


def find_install(python: str, api: Literal["auto", "v0.6", "main"], asks: bool) -> LeRobotInstall:
    """Which lerobot `python` has; `asks` False: from a remembered answer only (the preset is not trusted yet)."""
    train = sibling_tool(python, "lerobot-train") or shutil.which("lerobot-train")
    found = detect(python, asks) if os.path.exists(python) or shutil.which(python) else None
    version = found["version"] if found else None
    if api != "auto":
        return LeRobotInstall(version, api, version is not None, train)
    if version is None:
        return LeRobotInstall(None, "v0.6", False, train, asks)
    return LeRobotInstall(version, "main" if found and found["parallelism"] else "v0.6", True, train)
