"""Preset files: a name looked up in the user folder, then the shipped presets; loaded, saved with their schema."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from gpuwizard.core import paths, yamlio
from gpuwizard.core.errors import UserError, problem
from gpuwizard.core.statcache import StatCache, stamp
from gpuwizard.core.units import counted
from gpuwizard.model.trust import note_source

if TYPE_CHECKING:
    from gpuwizard.model.preset import Preset


def load_preset_file(path: Path) -> Preset:
    """A preset file, validated; one of the user's or the shipped folder may run its own code (model/trust.py)."""
    from gpuwizard.model.preset import parse_preset  # not for a listing its cache answers (preset_listing)

    return note_source(parse_preset(yamlio.load_file(path), str(path)), path)


def _preset_files(folder: Path) -> dict[str, Path]:
    """The folder's *.yaml files by name, sorted; scandir, not glob: 10,000 of them in a tenth of the time."""
    try:
        with os.scandir(folder) as found:
            names = sorted(e.name for e in found if e.name.endswith(".yaml") and not e.name.startswith("."))
    except OSError:
        return {}
    return {name[: -len(".yaml")]: folder / name for name in names}


def user_preset_files() -> dict[str, Path]:
    return _preset_files(paths.user_presets_dir())


def shipped_preset_files() -> dict[str, Path]:
    return _preset_files(paths.shipped_presets_dir())


def listed_presets() -> list[tuple[str, str, Path]]:
    """(name, "user" or "shipped", path) for every preset by name; a user preset hides a shipped one."""
    user = user_preset_files()
    shipped = [(name, "shipped", path) for name, path in shipped_preset_files().items() if name not in user]
    return [(name, "user", path) for name, path in user.items()] + shipped


class ListedPreset(BaseModel):
    """A preset as a listing shows it: what it runs, on what, or (problem) the paragraphs saying why it is invalid."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str
    source: Literal["user", "shipped"]
    path: str
    trainer: str = "-"
    policy: str = "-"
    world_size: int = 0
    device: str = "cuda"
    description: str = ""
    problem: str | None = None

    def workers(self) -> str:
        """'2 GPUs', '2 processes' (a device left to `auto` uses the GPUs there are)."""
        return counted(self.world_size, "cpu" if self.device == "cpu" else "cuda")

    def columns(self) -> tuple[str, str, str, str, str, str]:
        """name, source, trainer, policy, gpus and description, as `gpuwizard presets list` prints them."""
        if self.problem is not None:
            return (self.name, self.source, "-", "-", "-", f"INVALID: {self.problem}")
        return (self.name, self.source, self.trainer, self.policy, str(self.world_size), self.description)


def preset_listing() -> list[ListedPreset]:
    """listed_presets with what each one runs, a file read and validated only when it (or the user's policies.yaml,
    which decides what is valid) changed since the last listing: 10,000 presets list in well under a second."""
    caches = {
        "user": StatCache("presets", paths.user_presets_dir()),
        "shipped": StatCache("presets", paths.shipped_presets_dir()),
    }
    policies = stamp(paths.config_dir() / "policies.yaml")
    listed = []
    for name, source, path in listed_presets():
        where: dict[str, Any] = {"name": name, "source": source, "path": str(path)}
        cache, own = caches[source], stamp(path)
        key = own + policies if own is not None and policies is not None else None
        remembered = remembered_preset(cache.get(path.name, key), where)
        if remembered is not None:
            listed.append(remembered)
            continue
        try:
            preset = load_preset_file(path)
            summary: dict[str, Any] = {
                "trainer": preset.trainer,
                "policy": preset.policy,
                "world_size": preset.world_size,
                "device": preset.hardware.device,
                "description": preset.description,
            }
        except UserError as exc:
            summary = {"problem": exc.paragraph()}
        cache.put(path.name, key, summary)
        listed.append(ListedPreset.model_validate({**summary, **where}))
    for cache in caches.values():
        cache.save()
    return listed


def remembered_preset(summary: Any, where: dict[str, Any]) -> ListedPreset | None:
    """A listing's remembered summary, validated as it is taken back; None for none or one that does not validate."""
    if not isinstance(summary, dict):
        return None
    try:
        return ListedPreset.model_validate(summary | where)
    except ValidationError:
        return None


def find_preset(name_or_file: str) -> Path:
    """A path to a YAML file, or a name looked up in the user folder, then the shipped presets."""
    as_path = Path(name_or_file).expanduser()
    if as_path.suffix in (".yaml", ".yml") or "/" in name_or_file:
        if as_path.is_file():
            return as_path
        what = "is not a regular file" if as_path.exists() else "does not exist"
        raise UserError(
            problem(
                "PRESET",
                f"file {as_path} {what}",
                "check the path, or give a preset name from `gpuwizard presets list`",
                value=name_or_file,
            )
        )
    for folder in (user_preset_files(), shipped_preset_files()):
        if name_or_file in folder:
            return folder[name_or_file]
    import difflib

    known = sorted(set(user_preset_files()) | set(shipped_preset_files()))
    close = difflib.get_close_matches(name_or_file, known, n=1, cutoff=0.6)
    fix = f"did you mean {close[0]}? Or use one of: " if close else "use one of: "
    raise UserError(
        problem(
            "PRESET",
            "no preset of that name in your preset folder or the shipped presets",
            f"{fix}{', '.join(known)}; or a path to a YAML file",
            value=name_or_file,
        )
    )


def load_preset(name_or_file: str) -> Preset:
    return load_preset_file(find_preset(name_or_file))


SCHEMA_FILE = "preset.schema.json"
SCHEMA_LINE = f"# yaml-language-server: $schema=./{SCHEMA_FILE}\n"


def save_user_preset(preset: Preset, overwrite: bool = True) -> Path:
    """Save atomically into the user preset folder, the schema beside it for editors; replace a file only if allowed."""
    folder = paths.user_presets_dir()
    target = folder / f"{preset.name}.yaml"
    if target.exists() and not overwrite:
        raise UserError(
            problem(
                "name",
                "a preset of that name already exists",
                "choose another name or delete the old one",
                value=preset.name,
            )
        )
    yamlio.atomic_write(target, SCHEMA_LINE + preset.to_yaml())
    write_schema_beside(folder)
    return target


def write_schema_beside(folder: Path) -> None:
    """Keep `preset.schema.json` current in a preset folder: the YAML language server completes and checks presets."""
    import json

    from gpuwizard.model.preset import preset_schema

    text = json.dumps(preset_schema(), indent=2) + "\n"
    schema = folder / SCHEMA_FILE
    try:
        current = schema.read_text(encoding="utf-8")
    except OSError:
        current = None
    if current != text:
        yamlio.atomic_write(schema, text)


def delete_user_preset(name: str) -> Path:
    files = user_preset_files()
    if name not in files:
        if name in shipped_preset_files():
            raise UserError(
                problem(
                    "NAME",
                    "is a shipped preset, which cannot be deleted",
                    "save a copy under another name and edit that",
                    value=name,
                )
            )
        raise UserError(problem("NAME", "no user preset of that name", "see `gpuwizard presets list`", value=name))
    files[name].unlink()
    return files[name]


def preset_text(name_or_file: str) -> tuple[Path, str]:
    """A preset's file and text, for `presets show`: only a readable YAML preset, never any other file."""
    path = find_preset(name_or_file)
    load_preset_file(path)  # refuses binary, malformed or invalid files with their paragraphs
    return path, path.read_text(encoding="utf-8")
