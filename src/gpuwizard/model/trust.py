"""Whether a preset may run code of its own: an interpreter, a working folder, environment variables or shell lines
that someone else chose run nothing until the user has seen them and said yes (as direnv's `allow` does).

A preset needs the user's word only where it chooses code: `launch.python`, `launch.workdir`, `launch.env` beyond a
few variables that only tune (threads, offline switches), `slurm.setup` lines, and the trainer's own script or
module files. Presets in the user's preset folder and the shipped ones are the user's and ours; any other file is
trusted once its hash is in `trusted.json` of the config folder: the hash of the file's real path and content and of
what each item names (relative paths resolved; a file's or folder's real path, inode, size and change time), as direnv
binds `.envrc`. An edit to the preset, to the interpreter or script it names, or a swapped link is a new hash.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import re
import stat
import threading
import weakref
from collections.abc import Iterator
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
KEY_VERSION = 2
"""Part of every hash: entries of the first version (keyed by the items' text alone) match nothing, so a preset
trusted before this version is asked about once more."""


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


def _identity(path: Path) -> list[object]:
    """What says a file or folder is still the one trusted: where its links lead and its device and inode, and for a
    file its size and change times (an edit, a replaced file or a swapped link is a new identity; a missing one says
    so). A folder's times move with every file a run writes in it, so they are left out."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except (OSError, ValueError):
        return [str(path), "missing"]
    if stat.S_ISDIR(st.st_mode):
        return [str(path), real, st.st_dev, st.st_ino]
    return [str(path), real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _under(base: str, value: str) -> Path:
    """A path as the launch reads it: ~ expanded, a relative one under `base`, never resolved past its links."""
    return Path(os.path.abspath(os.path.join(base, os.path.expanduser(value))))


def _named_paths(value: str) -> list[str]:
    """The paths a variable's value or a shell line names (LD_PRELOAD=/x.so, PYTHONPATH=a:b, `source ~/env.sh`)."""
    found = []
    for token in re.split(r"[\s:=;,\"']+", value):
        if token.startswith(("/", "~", "./", "../")):
            found.append(token)
    return found


def _bound_items(preset: Preset) -> list[object]:
    """Each code item with the identity of what it names, relative paths resolved first (as the launch resolves
    them: the interpreter and the folder from here, the trainer's files under launch.workdir)."""
    here = os.getcwd()
    workdir = str(_under(here, preset.launch.workdir)) if preset.launch.workdir else here
    bound: list[object] = []
    for item in code_items(preset):
        if item.field == "launch.python":
            places = {_under(here, item.value), _under(workdir, item.value)}
        elif item.field == "launch.workdir":
            places = {Path(workdir)}
        elif item.field.startswith("trainer_options."):
            places = {_under(workdir, item.value)}
        else:
            places = {_under(here, token) for token in _named_paths(item.value)}
        bound.append([item.field, item.value, [_identity(place) for place in sorted(places)]])
    return bound


def _file_identity(source: Path) -> list[object]:
    """The preset file's real path and the hash of its content: the same text elsewhere, or an edit, is new."""
    try:
        real = os.path.realpath(source)
        digest = hashlib.sha256(read_regular(Path(real), STORE_BYTES)).hexdigest()
    except (OSError, ValueError):
        return [str(source), "unreadable"]
    return [real, digest]


def fingerprint(preset: Preset, bound_to_file: bool = True) -> str | None:
    """The hash of the preset's trainer and code items with what they name (None when it chooses no code), and of
    the file it was read from unless `bound_to_file` is False (a launch remembered for its resumes)."""
    if not code_items(preset):
        return None
    source = source_of(preset) if bound_to_file else None
    shape: list[object] = [KEY_VERSION, preset.trainer, _bound_items(preset)]
    if source is not None:
        shape.append(_file_identity(source))
    text = json.dumps(shape, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


_granted: set[str] = set()
_sources: dict[int, tuple[weakref.ref[Preset], Path]] = {}
_lock = threading.Lock()
"""Hashes trusted in this process without being written down (presets read from the user's or the shipped folder,
the user's own edits in the wizard to a trusted preset), and the file each loaded preset was read from."""


def source_of(preset: Preset) -> Path | None:
    """The file this preset object was read from (None: built in memory, by an edit or a copy)."""
    held = _sources.get(id(preset))
    if held is None or held[0]() is not preset:
        return None
    return held[1]


def store_file() -> Path:
    return paths.config_dir() / "trusted.json"


def _stored() -> dict[str, dict[str, str]]:
    try:
        data = json.loads(read_regular(store_file(), STORE_BYTES))
    except (OSError, ValueError, RecursionError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def _copy_of_a_launch(source: Path | None) -> bool:
    """A preset gpuwizard wrote itself into its data folder (a run's or a sweep's copy) or one built in memory: its
    trust is that of the launch that wrote it, not of a file the user was shown."""
    if source is None:
        return True
    try:
        return Path(os.path.realpath(source)).is_relative_to(os.path.realpath(paths.data_dir()))
    except (OSError, ValueError):
        return False


def is_trusted(preset: Preset) -> bool:
    """May gpuwizard run what this preset chooses (its interpreter, its environment, its files)? A file is trusted
    for its own path and content; a copy gpuwizard wrote of a launch (or an edit in memory) for what it runs."""
    marks = {fingerprint(preset)}
    if _copy_of_a_launch(source_of(preset)):
        marks.add(fingerprint(preset, bound_to_file=False))
    if None in marks:
        return True
    with _lock:
        found = bool(marks & _granted)
    if found or marks & _stored().keys():
        grant_for_session(preset)  # its copies in this process (another device count, a scheduler) run the same code
        return True
    return False


def grant_for_session(preset: Preset) -> None:
    """Trust this preset's code for this process only (a preset of the user's folder, the user's own edit)."""
    for mark in (fingerprint(preset), fingerprint(preset, bound_to_file=False)):
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
    """Record where a preset was read (its trust is bound to that file): one from the user's or the shipped folder is
    trusted for this process."""
    key = id(preset)
    # the entry goes when the preset does (dict.pop holds the GIL; no lock, since a collection may run under it)
    _sources[key] = (weakref.ref(preset, lambda _: _sources.pop(key, None)), path)
    if in_own_folder(path):
        grant_for_session(preset)
    return preset


@contextlib.contextmanager
def _store_locked() -> Iterator[None]:
    """One writer of trusted.json at a time (a lock file beside it), so concurrent trusts keep each other's entries."""
    folder = store_file().parent
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".trusted.json.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remember(mark: str, entry: dict[str, str]) -> None:
    """Add one entry to trusted.json under its lock, replaced atomically; OSError where it cannot be written."""
    with _store_locked():
        data = _stored()
        data.pop(mark, None)
        data[mark] = entry
        for old in list(data)[: max(0, len(data) - MAX_TRUSTED)]:
            del data[old]
        atomic_write(store_file(), json.dumps(data, indent=1) + "\n")


def trust(preset: Preset, source: str) -> None:
    """Remember the user's yes to this preset, bound to its file (its real path and content) and to what its code
    items name, for every later process."""
    mark = fingerprint(preset)
    if mark is None:
        return
    grant_for_session(preset)
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    try:
        _remember(mark, {"preset": preset.name, "source": source, "trusted_at": stamp})
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
    """A trusted preset being launched is remembered by what it runs (not its file), so its resumes and relaunches,
    read back from the copy in its run or sweep folder by another process, run the same code without a question;
    where it cannot be written, the launch goes on. Call it only for a preset is_trusted said yes to."""
    mark = fingerprint(preset, bound_to_file=False)
    if mark is None or mark in _stored():
        return
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    try:
        _remember(mark, {"preset": preset.name, "source": "launched", "trusted_at": stamp})
    except OSError:
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
