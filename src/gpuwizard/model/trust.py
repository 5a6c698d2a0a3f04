"""Whether a preset may run code of its own: an interpreter, a working folder, environment variables or shell lines
that someone else chose run nothing until the user has seen them and said yes (as direnv's `allow` does).

A preset needs the user's word only where it chooses code: `launch.python`, `launch.workdir`, `launch.env` beyond a
few variables that only tune (threads, offline switches), `slurm.setup` lines, and the trainer's own script or
module files. Presets in the user's preset folder and the shipped ones are the user's and ours; any other file is
trusted once its code items, hashed, are in `trusted.json` of the config folder. A changed item is a new hash.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuwizard.core import paths
from gpuwizard.core.errors import Problem, UserError, problem
from gpuwizard.core.yamlio import atomic_write, read_regular

if TYPE_CHECKING:
    from gpuwizard.model.preset import Preset

INERT_ENV = frozenset(
    {
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "TOKENIZERS_PARALLELISM",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_HUB_DISABLE_TELEMETRY",
        "WANDB_MODE",
        "WANDB_PROJECT",
        "WANDB_ENTITY",
        "WANDB_SILENT",
        "NCCL_DEBUG",
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_DISABLE",
        "NCCL_P2P_DISABLE",
        "GLOO_SOCKET_IFNAME",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_NCCL_BLOCKING_WAIT",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "MUJOCO_GL",
        "PYTHONUNBUFFERED",
    }
)
"""Variables that tune a run and load no code; every other variable a preset sets counts as code it chooses
(LD_PRELOAD, PYTHONPATH, PYTHONSTARTUP, PATH, NCCL plugins, PYTHONWARNINGS, ...): a short list of the harmless is
safer than a list of the harmful, which is never complete."""

CODE_OPTIONS = ("script", "modality_config_path")
"""Trainer options that name a Python file the trainer runs or imports (HF and GR00T scripts, GR00T's modality
config module)."""

STORE_BYTES = 4 << 20
MAX_TRUSTED = 2000


@dataclass(frozen=True)
class CodeItem:
    """One thing the preset would run or load, as the trust question shows it."""

    field: str
    value: str
    loads_code: bool = True


def code_items(preset: Preset) -> list[CodeItem]:
    """What the preset chooses to run, in the order the question lists it; empty: it runs only the user's own."""
    items: list[CodeItem] = []
    if preset.launch.python:
        items.append(CodeItem("launch.python", preset.launch.python))
    if preset.launch.workdir:
        items.append(CodeItem("launch.workdir", preset.launch.workdir))
    for name, value in sorted(preset.launch.env.items()):
        if name not in INERT_ENV:
            items.append(CodeItem(f"launch.env.{name}", str(value)))
    for index, line in enumerate(preset.slurm.setup):
        items.append(CodeItem(f"slurm.setup.{index}", line))
    for key in CODE_OPTIONS:
        if chosen := preset.trainer_options.get(key):
            items.append(CodeItem(f"trainer_options.{key}", str(chosen)))
    return items


def fingerprint(preset: Preset) -> str | None:
    """The hash of the preset's code items and its trainer (None when it chooses no code)."""
    items = code_items(preset)
    if not items:
        return None
    text = json.dumps([preset.trainer, [(i.field, i.value) for i in items]], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


_granted: set[str] = set()
_lock = threading.Lock()
"""Hashes trusted in this process without being written down: presets read from the user's or the shipped folder,
and the user's own edits in the wizard to a trusted preset."""


def store_file() -> Path:
    return paths.config_dir() / "trusted.json"


def _stored() -> dict[str, dict[str, str]]:
    try:
        data = json.loads(read_regular(store_file(), STORE_BYTES))
    except (OSError, ValueError, RecursionError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def is_trusted(preset: Preset) -> bool:
    """May gpuwizard run what this preset chooses (its interpreter, its environment, its files)?"""
    mark = fingerprint(preset)
    if mark is None:
        return True
    with _lock:
        if mark in _granted:
            return True
    return mark in _stored()


def grant_for_session(preset: Preset) -> None:
    """Trust this preset's code for this process only (a preset of the user's folder, the user's own edit)."""
    mark = fingerprint(preset)
    if mark is not None:
        with _lock:
            _granted.add(mark)


def in_own_folder(path: Path) -> bool:
    """A file of the user's preset folder or of the presets shipped with gpuwizard."""
    try:
        where = path.resolve().parent
        return any(where == folder.resolve() for folder in (paths.user_presets_dir(), paths.shipped_presets_dir()))
    except OSError:
        return False


def note_source(preset: Preset, path: Path) -> Preset:
    """Record where a preset was read: one from the user's or the shipped folder is trusted for this process."""
    if in_own_folder(path):
        grant_for_session(preset)
    return preset


def trust(preset: Preset, source: str) -> None:
    """Remember the user's yes to this preset's code items, by their hash, for every later process."""
    mark = fingerprint(preset)
    if mark is None:
        return
    data = _stored()
    data.pop(mark, None)
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    data[mark] = {"preset": preset.name, "source": source, "trusted_at": stamp}
    for old in list(data)[: max(0, len(data) - MAX_TRUSTED)]:
        del data[old]
    grant_for_session(preset)
    try:
        atomic_write(store_file(), json.dumps(data, indent=1) + "\n")
    except OSError as exc:
        raise UserError(
            problem(
                "PRESET",
                f"the trust could not be remembered in {store_file()} ({exc.strerror or exc})",
                "make the config folder writable (or set GPUWIZARD_CONFIG_DIR); it is trusted for this command only",
                value=source,
            )
        ) from None


def remember_launched(preset: Preset) -> None:
    """A trusted preset being launched is remembered, so its resumes and relaunches (read back from the run folder,
    in another process) run the same code without a question; where it cannot be written, the launch goes on."""
    mark = fingerprint(preset)
    if mark is None or mark in _stored():
        return
    try:
        trust(preset, preset.name)
    except UserError:
        pass  # trusted in this process all the same; a resume from another one asks again


def question_lines(preset: Preset) -> list[str]:
    """What the preset would run, one line per item, for the question and the refusal."""
    return [f"{item.field} = {item.value}" for item in code_items(preset)]


def untrusted_problem(preset: Preset, source: str, action: str) -> Problem:
    """The refusal of `check`, `run` or `probe` for a preset whose code the user has not trusted."""
    listed = "; ".join(question_lines(preset))
    return problem(
        "PRESET",
        f"this preset was not written by you (it is outside your preset folder, or its code changed since you "
        f"trusted it) and would run code it chooses: {listed}. gpuwizard runs none of it before you say so",
        f"read it (`gpuwizard presets show {source}`), then trust it with `gpuwizard presets trust {source}` "
        f"or add --trust to this {action}",
        value=source,
    )
