"""YAML reading that treats 1e-4 as a number, and writing that never leaves a half-written file."""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpuwizard.core.errors import UserError, problem

_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


if TYPE_CHECKING:
    from yaml._yaml import Mark as CMark  # libyaml's own mark (line, column), on the events it parses

    _BASE = yaml.SafeLoader  # CSafeLoader has the same constructor and resolver interface
else:
    _BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml parses ~8x faster where it is built in


class _Loader(_BASE):
    """SafeLoader that also reads `1e-4` (no dot) as a float, as users write learning rates."""


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _first in "-+0123456789.":
    _Loader.yaml_implicit_resolvers[_first] = [
        (tag, rx) for tag, rx in _Loader.yaml_implicit_resolvers.get(_first, []) if tag != "tag:yaml.org,2002:float"
    ]
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


class DuplicateKey(yaml.MarkedYAMLError):
    """The same key twice in one mapping: YAML would silently keep the last."""


class TooLarge(yaml.YAMLError):
    """A document past the bounds (an alias bomb, absurd nesting): refused before it is built."""

    def __init__(self, problem: str, problem_mark: yaml.Mark | CMark | None, note: str) -> None:
        super().__init__(problem)
        self.problem, self.problem_mark, self.note = problem, problem_mark, note


def _mapping_without_duplicates(loader: Any, node: Any, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # an unhashable key: the base constructor reports it
            continue
        if duplicate:
            raise DuplicateKey(
                "while reading a mapping", node.start_mark, f"the key {key!r} appears twice", key_node.start_mark
            )
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_Loader.add_constructor(
    "tag:yaml.org,2002:map", lambda loader, node: _mapping_without_duplicates(loader, node, deep=True)
)
MAX_INT_DIGITS = 100
"""Longer whole numbers are refused as written: Python will not even convert one past 4,300 digits."""


def _bounded_int(loader: Any, node: Any) -> Any:
    if len(node.value) > MAX_INT_DIGITS:
        raise TooLarge(
            f"a whole number of {len(node.value):,} digits",
            node.start_mark,
            "no setting takes a number that long: write a realistic one",
        )
    return yaml.SafeLoader.construct_yaml_int(loader, node)


_Loader.add_constructor("tag:yaml.org,2002:int", _bounded_int)
MAX_YAML_BYTES = 4 << 20
MAX_YAML_VALUES = 100_000
"""Values a document may hold once its aliases are expanded (the policy catalog has under 1,000)."""
MAX_YAML_TEXT = 16 << 20
"""Characters its scalars may total once expanded: an alias bomb of long strings is refused too."""
MAX_YAML_DEPTH = 64
"""Nesting of lists and mappings; deeper is no configuration, and deep recursion would crash the builder."""


def check_bounds(text: str) -> None:
    """Walk the parser's events, building nothing, and raise TooLarge where the expanded document passes a bound.

    Each collection and scalar counts as one value plus everything under it; an alias counts as the whole of its
    anchor, so `&a [*b, *b, ...]` towers are measured as the loader would expand them, in time linear in the text.
    """
    sizes: dict[str | None, tuple[int, int]] = {}  # closed anchors: (values, characters)
    stack: list[list[Any]] = []  # open collections: [anchor, values, characters]
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            stack.append([event.anchor, 1, 0])
            if len(stack) > MAX_YAML_DEPTH:
                raise TooLarge(
                    f"lists and mappings nest deeper than {MAX_YAML_DEPTH} levels",
                    event.start_mark,
                    "flatten it: no setting nests that deep",
                )
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, values, chars = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, values, chars = event.anchor, 1, len(event.value)
        elif isinstance(event, yaml.AliasEvent):
            if any(open_anchor == event.anchor for open_anchor, _, _ in stack):
                raise TooLarge(
                    f"the alias *{event.anchor} is inside its own anchor (a value that contains itself)",
                    event.start_mark,
                    "refer to an anchor only after its value ends",
                )
            anchor, (values, chars) = None, sizes.get(event.anchor, (1, 0))  # undefined: the loader names it
        else:
            continue
        if anchor is not None:
            sizes[anchor] = (values, chars)
        if stack:
            stack[-1][1] += values
            stack[-1][2] += chars
            values, chars = stack[-1][1], stack[-1][2]
        if values > MAX_YAML_VALUES or chars > MAX_YAML_TEXT:
            raise TooLarge(
                f"the document expands to more than {MAX_YAML_VALUES:,} values or {MAX_YAML_TEXT >> 20} MiB of text "
                "through its aliases (*name)",
                event.start_mark,
                "write the values out without aliases that multiply them",
            )


def loads(text: str, source: str) -> Any:
    """Parse YAML text, bounded first; a syntax error or a bomb becomes a UserError naming the line."""
    if len(text) > MAX_YAML_BYTES:
        raise UserError(
            problem(None, f"the text is {len(text):,} characters, more than the {MAX_YAML_BYTES:,} read", "shorten it"),
            source,
        )
    try:
        check_bounds(text)
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)  # PyYAML's documented error attributes
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if isinstance(exc, TooLarge):
            lead = f"refused at {where}: {what}"
            fix = exc.note
        else:
            lead = f"malformed YAML at {where}: {what}"
            fix = (
                "keep the key once (YAML would silently use the last)"
                if isinstance(exc, DuplicateKey)
                else "correct the YAML syntax at that line (indentation, a missing colon or quote)"
            )
        raise UserError(problem(None, lead, fix), source) from None


NOT_REGULAR = "not a regular file (a FIFO, device or folder in its place)"


def open_regular(path: Path) -> int:
    """A read-only descriptor of a regular file. The open never blocks (a FIFO in its place would wait for a writer
    forever); OSError for anything else: a FIFO, device or folder, a symlink loop, no permission."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, NOT_REGULAR)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, max_bytes: int) -> bytes:
    """A regular file's bytes; a FIFO, device or folder is refused without blocking, and so is a huge file."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise OSError(errno.EFBIG, f"it is {size} bytes, more than the {max_bytes} expected here")
        chunks, left = [], max_bytes + 1  # a file still growing is cut, not read without end
        while left > 0 and (chunk := os.read(fd, min(1 << 16, left))):
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            raise OSError(errno.EFBIG, f"it grew past the {max_bytes} bytes expected here")
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_file(path: Path) -> Any:
    try:
        text = read_regular(path, MAX_YAML_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise UserError(
            problem(None, f"file {path} does not exist", "check the path or the preset name"), str(path)
        ) from None
    except UnicodeDecodeError:
        raise UserError(
            problem(None, f"{path} is not UTF-8 text (a binary file?)", "point at a YAML text file"), str(path)
        ) from None
    except OSError as exc:
        raise UserError(
            problem(None, f"cannot read {path}: {exc.strerror or exc}", "check the path and the file's permissions"),
            str(path),
        ) from None
    if "\0" in text:
        raise UserError(
            problem(None, f"{path} holds NUL bytes (a binary file?)", "point at a YAML text file"), str(path)
        )
    return loads(text, str(path))


def dumps(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)


def atomic_write(path: Path, text: str, make_parents: bool = True) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target."""
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile

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
