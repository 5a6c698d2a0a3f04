"""YAML reading that treats 1e-4 as a number, and writing that never leaves a half-written file."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import yaml

from gpuwizard.errors import UserError, problem

_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml parses ~8x faster where it is built in


class _Loader(_BASE):  # type: ignore[misc, valid-type]
    """SafeLoader that also reads `1e-4` (no dot) as a float, as users write learning rates."""


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _first in "-+0123456789.":
    _Loader.yaml_implicit_resolvers[_first] = [
        (tag, rx) for tag, rx in _Loader.yaml_implicit_resolvers.get(_first, []) if tag != "tag:yaml.org,2002:float"
    ]
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def loads(text: str, source: str) -> Any:
    """Parse YAML text; a syntax error becomes a UserError naming the line."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(
            problem(None, f"malformed YAML at {where}: {what}", "correct the YAML syntax at that line (indentation, a missing colon or quote)"),
            source,
        ) from None


def load_file(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(problem(None, f"file {path} does not exist", "check the path or the preset name"), str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(problem(None, f"cannot read {path}: {exc}", "check the file's permissions and encoding"), str(path)) from None
    return loads(text, str(path))


def dumps(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)


def atomic_write(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
