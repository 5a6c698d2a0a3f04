"""Strict typed records (msgspec) for presets, trainer options and the catalog, and their errors as Problems.

msgspec rather than pydantic: the same strict types and bounds, at a tenth of the import cost,
which keeps `gpuwizard plan` under 0.3 s (bench/startup.py).
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import replace
from typing import Any, Literal

import msgspec

from gpuwizard.errors import Problem, problem

NODEFAULT = msgspec.NODEFAULT


class Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base for every typed section: unknown keys and wrong types are errors.

    msgspec applies kw_only per class: a subclass with a required field after a default declares it again.
    """


class FieldError(ValueError):
    """A check beyond types and bounds failed; `problem.field` is relative to the record that raised it."""

    def __init__(self, found: Problem):
        self.problem = found
        super().__init__(found.message)


def field_error(field: str | None, message: str, fix: str | None = None, **kw: Any) -> FieldError:
    return FieldError(problem(field, message, fix, **kw))


def convert(data: Any, kind: type[Strict]) -> Any:
    """Validate plain data (from YAML) as `kind`; a failure is a FieldError whose field is the path from the root."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise FieldError(problem_from(exc, data, kind)) from None


def to_data(record: Any) -> Any:
    """Plain dicts and lists (YAML- and JSON-ready), fields in declaration order."""
    return msgspec.to_builtins(record)


def updated(record: Any, **changes: Any) -> Any:
    """A validated copy with some fields replaced."""
    return msgspec.structs.replace(record, **changes)


def fields(kind: type[Strict]) -> tuple[Any, ...]:
    return msgspec.structs.fields(kind)


def unwrap(annotation: Any) -> tuple[Any, bool]:
    """Strip Annotated and Optional; report whether None is allowed."""
    optional = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            optional = optional or len(args) < len(typing.get_args(annotation))
            if len(args) != 1:
                return annotation, optional
            annotation = args[0]
        else:
            return annotation, optional


AT = re.compile(r"^(?P<msg>.*?)(?: - at (?:`(?P<key>[^`]*)` in )?`\$(?P<path>[^`]*)`)?$", re.S)
PART = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
EXPECTED = re.compile(r"^Expected `(?P<type>[^`]+)`(?:, got `(?P<got>[^`]+)`)?(?P<rest>.*)$")
BOUND = re.compile(r"^\s*(?:of length )?(?P<op>>=|<=|>|<) (?P<bound>\S+)$")
TYPE_WORDS = {
    "int": ("a whole number", "write a whole number without quotes"),
    "float": ("a number", "write a number without quotes, e.g. 1.0e-4"),
    "str": ("text", "write text (quote it)"),
    "bool": ("true or false", "write true or false"),
    "array": ("a list", "write a YAML list, e.g. [0, 1]"),
    "object": ("a mapping", "write a mapping (indented keys under it)"),
}


def problem_from(exc: msgspec.ValidationError, data: Any, root: Any) -> Problem:
    """One msgspec error as a Problem: dotted field path, the value found there, and a fix."""
    match = AT.match(str(exc))
    assert match is not None  # the pattern accepts any text
    parts = [p[0] or p[1] for p in PART.findall(match["path"] or "")]
    message = match["msg"]
    cause = exc.__cause__
    if isinstance(cause, FieldError):
        inner = cause.problem
        return replace(inner, field=dotted(parts + ([inner.field] if inner.field else [])) or None)
    if match["key"] is not None:
        return problem(dotted(parts), f"has a key that is not text ({message.lower()})", "quote the key")
    unknown = re.match(r"Object contains unknown field `(.+)`", message)
    if unknown:
        return problem(dotted([*parts, unknown[1]]), "unknown key", "remove the key, or check its spelling against SPEC §3")
    missing = re.match(r"Object missing required field `(.+)`", message)
    if missing:
        return problem(dotted([*parts, missing[1]]), "required field is missing", "add the field")
    found = value_at(data, parts)
    if message.startswith("Invalid enum value"):
        choices = literal_choices(root, parts)
        listed = ", ".join(str(c) for c in choices) if choices else "the documented values"
        return problem(dotted(parts), f"must be one of {listed}", f"use one of: {listed}", **found)
    expected = EXPECTED.match(message)
    if expected:
        return problem(dotted(parts), *describe_expected(expected), **found)
    return problem(dotted(parts) or None, message, "correct the value", **found)


def describe_expected(expected: re.Match[str]) -> tuple[str, str]:
    """msgspec's `Expected ...` as a sentence and a fix."""
    kinds = [k.strip() for k in expected["type"].split("|") if k.strip() != "null"]
    bound = BOUND.match(expected["rest"])
    if bound and not expected["got"]:
        op, limit = bound["op"], bound["bound"]
        if kinds == ["str"] or expected["rest"].strip().startswith("of length"):
            return ("must not be empty", "write a value") if limit in ("1", "0") and op in (">=", ">") else (f"length must be {op} {limit}", "change its length")
        sentence = {">": f"must be greater than {limit}", ">=": f"must be {limit} or more", "<": f"must be less than {limit}", "<=": f"must be at most {limit}"}[op]
        if (op, limit) in ((">", "0"), (">=", "1")):
            fix = "use a positive number"
        elif (op, limit) == (">=", "0"):
            fix = "use a number that is not negative"
        else:
            fix = {">": f"use a number above {limit}", ">=": f"use {limit} or more", "<": f"use a number below {limit}", "<=": f"use {limit} or less"}[op]
        return sentence, fix
    if "int" in kinds and "float" in kinds:
        kinds.remove("int")  # "a number" covers both
    words = [TYPE_WORDS.get(k, (k, f"write {k}")) for k in kinds]
    sentence = "must be " + " or ".join(w[0] for w in words)
    return sentence, words[0][1] if len(words) == 1 else "write " + " or ".join(w[0] for w in words)


def dotted(parts: list[str]) -> str:
    return ".".join(p for p in parts if p != "...")


def value_at(data: Any, parts: list[str]) -> dict[str, Any]:
    """{"value": ...} for the value at a path in the raw data, or {} when it is not there."""
    node = data
    for part in parts:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return {}
    return {"value": node}


def literal_choices(root: Any, parts: list[str]) -> tuple[Any, ...]:
    """The allowed values of a Literal field, found by walking the record types along a path."""
    kind = root
    for part in parts:
        kind, _ = unwrap(kind)
        if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
            by_name = {f.name: f.type for f in fields(kind)}
            if part not in by_name:
                return ()
            kind = by_name[part]
        elif typing.get_origin(kind) in (list, dict):
            kind = typing.get_args(kind)[-1]
        else:
            return ()
    kind, _ = unwrap(kind)
    return typing.get_args(kind) if typing.get_origin(kind) is Literal else ()
