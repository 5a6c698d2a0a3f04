"""The training environments on this machine: interpreters found where users keep them (PATH, the active virtual or
conda environment, named conda/mamba environments, virtual environments beside a GR00T or openpi checkout, ~/.venvs)
and the trainers each one has, with versions, so the user picks one instead of typing a path into `launch.python`.

Nothing found is executed: an environment's Python version and distributions are read from its files (pyvenv.cfg,
the METADATA of each installed distribution), since a `.venv` in the current folder, in a cloned repository under
$HOME or in a preset's launch.workdir is someone else's program. Only an interpreter the user chose for their own
account (on PATH, the active environment, conda's and ~/.venvs's) whose files say nothing is asked, by a short
script that reads package metadata without importing any trainer, its answer remembered (EnvCache) until its
packages change."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from gpuwizard.core.yamlio import read_regular
from gpuwizard.model.trainer_names import trainer_names
from gpuwizard.model.trainer_options import OPTIONS, Checkout
from gpuwizard.trainers.check import envcache

TIMEOUT_S = 20.0
CACHE = "training-envs"
LIST_BYTES = 1 << 20
"""conda's list of environments is a few lines; more is not a list conda wrote."""

ASK_SCRIPT = r"""
import importlib.metadata as md, json, os, sys
def version(name):
    try:
        return md.version(name)
    except Exception:
        return None
out = {"python": "%d.%d.%d" % sys.version_info[:3], "prefix": sys.prefix,
       "versions": {dist: version(dist) for dist in json.loads(sys.argv[1])},
       "watch": [p for p in sys.path if os.path.isdir(p)]}
print(json.dumps(out))
"""
"""Runs in the candidate interpreter with the distributions to look for (JSON) as its argument: only the standard
library, and no trainer is imported."""

CONDA_HOMES = ("miniconda3", "anaconda3", "miniforge3", "mambaforge", "micromamba", ".conda", "conda")


@dataclass
class TrainingEnv:
    """One interpreter, where it was found, and the trainers it can run (name to version)."""

    python: str
    where: str
    python_version: str | None = None
    trainers: dict[str, str] = field(default_factory=dict)
    torch: str | None = None
    checkout: str | None = None
    """The GR00T or openpi source folder beside this environment, which its trainer runs from."""
    error: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "python": self.python,
            "where": self.where,
            "python_version": self.python_version,
            "trainers": self.trainers,
            "torch": self.torch,
            "checkout": self.checkout,
            "error": self.error,
        }


def distributions() -> dict[str, str]:
    """Each trainer's distribution (its options model's `package`), by trainer name, the one table asked for."""
    return {name: OPTIONS[name].package for name in trainer_names()}


def checkouts() -> dict[str, Checkout]:
    """The trainers that run from a source checkout (GR00T, openpi), each with how one is recognised."""
    return {name: found for name in trainer_names() if (found := OPTIONS[name].checkout)}


def checkout_kind(folder: Path) -> str | None:
    """The trainer whose source folder this is, recognised by a file its trainer runs."""
    return next((name for name, found in checkouts().items() if (folder / found.marker).is_file()), None)


def venv_python(folder: Path) -> Path | None:
    for name in ("bin/python3", "bin/python"):
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def children(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir())
    except OSError:
        return []


def candidates(home: Path, workdirs: Iterable[str] = ()) -> list[tuple[Path, str]]:
    """Interpreters worth reading, each with where it was found; the first place that finds an environment names it."""
    found: list[tuple[Path, str]] = []
    for name in ("python3", "python"):
        on_path = shutil.which(name)
        if on_path and os.path.isabs(on_path) and not Path(on_path).absolute().is_relative_to(Path.cwd()):
            found.append((Path(on_path), "on PATH"))
    for var, label in (("VIRTUAL_ENV", "the active virtual environment"), ("CONDA_PREFIX", "the active conda env")):
        if os.environ.get(var) and (python := venv_python(Path(os.environ[var]))):
            found.append((python, label))
    conda_list = home / ".conda" / "environments.txt"
    try:
        text = read_regular(conda_list, LIST_BYTES).decode("utf-8", "replace")  # never a FIFO or /dev/zero
        listed = [Path(line.strip()) for line in text.splitlines() if line.strip()]
    except OSError:
        listed = []
    roots = [home / name / "envs" for name in CONDA_HOMES]
    if os.environ.get("MAMBA_ROOT_PREFIX"):
        roots.append(Path(os.environ["MAMBA_ROOT_PREFIX"]) / "envs")
    for env in listed + [env for root in roots for env in children(root)]:
        if python := venv_python(env):
            found.append((python, f"conda env {env.name}"))
    for root in (home / ".venvs", home / "venvs", home / ".virtualenvs"):
        for env in children(root):
            if python := venv_python(env):
                found.append((python, f"{root.name}/{env.name}"))
    folders = [Path(os.path.expanduser(w)) for w in workdirs if w] + [Path.cwd()] + children(home)
    for folder in folders:
        for venv in (folder / ".venv", folder / "venv"):
            if python := venv_python(venv):
                kind = checkout_kind(folder)
                found.append((python, f"beside the {kind} checkout {folder}" if kind else f"in {folder}"))
    cache = Path(os.environ.get("GPUWIZARD_ENV_CACHE", home / ".cache"))
    for env in children(cache):
        if env.name.startswith("gpuwizard-") and (python := venv_python(env / "venv")):
            found.append((python, f"{env.name} (gpuwizard's tests)"))
    return found


def prefix_of(python: Path) -> str:
    """The environment an interpreter belongs to (venvs share the base's binary, so not its real path)."""
    return str(python.absolute().parent.parent)


OWN_PLACES = ("on PATH", "the active", "conda env ", ".venvs/", "venvs/", ".virtualenvs/")
"""Where an interpreter is one the user put there for their own account (not one a folder or repository brought):
only these may be run, and only where their files say nothing."""


def normalized(name: str) -> str:
    """A distribution's name as PyPI compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def site_folders(prefix: Path) -> list[Path]:
    """Where an environment's distributions lie: lib/pythonX.Y/site-packages (and Debian's dist-packages)."""
    found: list[Path] = []
    for lib in (prefix / "lib", prefix / "lib64", prefix / "local" / "lib"):
        for version in children(lib):
            if version.name.startswith("python3"):
                found += [p for p in (version / "site-packages", version / "dist-packages") if p.is_dir()]
    return found


def metadata_field(path: Path, key: str) -> str | None:
    """One header of a METADATA or PKG-INFO file (read bounded; the headers come first)."""
    try:
        text = read_regular(path, 1 << 20).decode("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        if not line.strip():
            break
        name, _, value = line.partition(":")
        if name.strip().lower() == key:
            return value.strip()
    return None


def read_env(python: Path, where: str) -> TrainingEnv | None:
    """What an environment has, from its files alone (None: no distributions folder beside this interpreter)."""
    prefix = Path(prefix_of(python))
    sites = site_folders(prefix)
    if not sites:
        return None
    env = TrainingEnv(str(python), where)
    wanted = distributions()
    asked = {normalized(d) for d in (*wanted.values(), "torch")}
    versions: dict[str, str] = {}
    for site in sites:
        try:
            entries = sorted(os.scandir(site), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            stem, dot, kind = entry.name.rpartition(".")
            if not dot or kind not in ("dist-info", "egg-info") or normalized(stem.split("-")[0]) not in asked:
                continue
            meta = Path(entry.path) / ("METADATA" if kind == "dist-info" else "PKG-INFO")
            name, version = metadata_field(meta, "name"), metadata_field(meta, "version")
            if name and version and normalized(name) in asked:
                versions.setdefault(normalized(name), version)
    env.python_version = config_version(prefix) or sites[0].parent.name.removeprefix("python")
    env.torch = versions.get("torch")
    env.trainers = {name: versions[normalized(d)] for name, d in wanted.items() if normalized(d) in versions}
    return env


def config_version(prefix: Path) -> str | None:
    """The Python version a virtual environment's pyvenv.cfg records."""
    try:
        text = read_regular(prefix / "pyvenv.cfg", 1 << 16).decode("utf-8", "replace")
    except OSError:
        return None
    values = dict(line.partition("=")[::2] for line in text.splitlines())
    found = {k.strip(): v.strip() for k, v in values.items()}
    return found.get("version_info") or found.get("version") or None


def look(python: Path, where: str) -> TrainingEnv:
    """An environment read from its files; one whose files say nothing is asked only where the user put it."""
    env = read_env(python, where)
    if env is not None:
        return env
    if where.startswith(OWN_PLACES):
        return ask(python, where)
    return TrainingEnv(str(python), where, error="no installed packages found beside it (nothing of it was run)")


def covers(answer: dict[str, Any] | None, asked: list[str]) -> TypeGuard[dict[str, Any]]:
    """A remembered answer holds every distribution asked now (one asked before a trainer was added does not)."""
    versions = answer.get("versions") if answer else None
    return isinstance(versions, dict) and set(asked) <= set(versions)


def ask(python: Path, where: str) -> TrainingEnv:
    """What one interpreter has, from its package metadata (remembered until its packages change)."""
    env = TrainingEnv(str(python), where)
    exe = envcache.interpreter(str(python))
    cache = envcache.EnvCache(CACHE)
    wanted = distributions()
    asked = sorted({*wanted.values(), "torch"})
    answer = cache.get(exe, exe)
    if not covers(answer, asked):
        try:
            out = subprocess.run(
                [str(python), "-I", "-c", ASK_SCRIPT, json.dumps(asked)],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
            answer = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout else None
        except subprocess.TimeoutExpired:
            env.error = f"did not answer within {TIMEOUT_S:.0f} s"
            return env
        except (OSError, ValueError, IndexError) as exc:
            env.error = f"cannot be asked: {exc}"
            return env
        if not isinstance(answer, dict) or not isinstance(answer.get("versions"), dict):
            env.error = "gave no answer (not a Python 3 interpreter?)"
            return env
        cache.put(exe, exe, answer, [str(p) for p in answer.get("watch", [])])
    env.python_version = answer.get("python")
    versions = {dist: str(v) for dist, v in answer["versions"].items() if v}
    env.torch = versions.get("torch")
    env.trainers = {name: versions[dist] for name, dist in wanted.items() if dist in versions}
    return env


def with_checkout(env: TrainingEnv) -> TrainingEnv:
    """A venv inside or beside a GR00T or openpi checkout runs that trainer from the checkout's source."""
    venv = Path(env.python).absolute().parent.parent
    for folder in (venv.parent, *(venv.parent / found.folder for found in checkouts().values())):
        kind = checkout_kind(folder)
        if kind:
            env.checkout = str(folder)
            env.trainers.setdefault(kind, "checkout")
            break
    return env


def find_envs(home: Path | None = None, workdirs: Iterable[str] = ()) -> list[TrainingEnv]:
    """Every distinct environment found, read from their files (or asked, see look) in parallel; those with a
    trainer first."""
    seen: dict[str, tuple[Path, str]] = {}
    for python, where in candidates(home or Path.home(), workdirs):
        seen.setdefault(prefix_of(python), (python, where))
    with ThreadPoolExecutor(max_workers=4) as pool:
        envs = [with_checkout(e) for e in pool.map(lambda pair: look(*pair), seen.values())]
    return sorted(envs, key=lambda e: (not e.trainers, e.error is not None, e.where))


def envs_for(trainer: str, envs: list[TrainingEnv]) -> list[TrainingEnv]:
    """The environments that can run one trainer (the demo trainer is gpuwizard's own, with torch beside it)."""
    return [e for e in envs if trainer in e.trainers and (trainer != "demo" or e.torch)]
