"""The strict pydantic base for every user-written record, and its validation errors as Problems.

Errors are read from pydantic's structured `errors()` (loc, type, input, ctx), never from message
text, so every mistake in a file is reported at once, each naming its dotted field, value and fix.
"""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError, PydanticUndefined

from gpuwizard.core.errors import Problem, closest, problem, unknown

RULE = "gpuwizard_rule"
MISSING: Any = PydanticUndefined
ModelT = TypeVar("ModelT", bound=BaseModel)


MAX_WHOLE = 2**63 - 1
"""The largest whole number any setting may hold: what a trainer's 64-bit integer (and torch) can carry."""


def uncarriable(value: Any, loc: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str, str, Any]]:
    """(location, what, fix, value) for each value under `value` that passes its type yet no consumer can carry:
    a NUL byte (no argument, path or environment holds one), a whole number past 64 bits, a subnormal float."""
    if isinstance(value, str):
        if "\0" in value:
            yield (
                loc,
                "contains a NUL byte, which no argument, path or environment variable can carry",
                "remove it",
                value,
            )
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        if abs(value) > MAX_WHOLE:
            yield loc, f"is too large (at most {MAX_WHOLE:,})", "use a realistic number", value
    elif isinstance(value, float):
        if value and abs(value) < sys.float_info.min:
            yield loc, "is too close to 0 to compute with (a subnormal number)", "use a realistic number, or 0", value
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from uncarriable(item, (*loc, index))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from uncarriable(key, (*loc, key))
            yield from uncarriable(item, (*loc, key))


class Rules:
    """Collects every cross-field mistake of one record so they are raised together, each at its own field."""

    def __init__(self, title: str):
        self.title = title
        self.found: list[InitErrorDetails] = []

    def add(
        self, field: str | tuple[Any, ...] | None, message: str, fix: str | None = None, value: Any = MISSING
    ) -> None:
        """A mistake at a dotted field ("launch.env.X") or at a location tuple (keys that hold dots)."""
        if isinstance(field, tuple):
            loc = field
        else:
            loc = tuple(int(p) if p.isdigit() else p for p in field.split(".")) if field else ()
        ctx = {"message": message, "fix": fix or "", "has_value": value is not MISSING}
        self.found.append(
            InitErrorDetails(
                type=PydanticCustomError(RULE, "{message}", ctx), loc=loc, input=None if value is MISSING else value
            )
        )

    def raise_any(self) -> None:
        if self.found:
            raise ValidationError.from_exception_data(self.title, self.found)


class Strict(BaseModel):
    """Base for every typed section: unknown keys, wrong types and non-finite numbers are errors, and so is a value
    of the right type that nothing downstream can carry (`uncarriable`)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, validate_default=False)

    @field_validator("*", mode="after")
    @classmethod
    def _carriable(cls, value: Any) -> Any:
        rules = Rules(cls.__name__)
        for loc, message, fix, bad in uncarriable(value):
            rules.add(loc, message, fix, bad)
        rules.raise_any()
        return value


def rule_error(field: str | None, message: str, fix: str | None = None, value: Any = MISSING) -> ValidationError:
    """One cross-field mistake as a ValidationError (for checks outside a model)."""
    rules = Rules("check")
    rules.add(field, message, fix, value)
    return ValidationError.from_exception_data(rules.title, rules.found)


def to_data(record: BaseModel, omit_defaults: bool = False) -> Any:
    """Plain dicts and lists (YAML- and JSON-ready), fields in declaration order."""
    return record.model_dump(mode="json", exclude_defaults=omit_defaults)


def updated(record: ModelT, **changes: Any) -> ModelT:
    """A copy with some fields replaced (the caller passes values of the right types)."""
    return record.model_copy(update=changes)


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


def model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """The type found by walking field names (and list/dict items) from a model along `loc`."""
    kind: Any = root
    for part in loc:
        kind, _ = unwrap(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            if part not in kind.model_fields:
                return None
            kind = kind.model_fields[part].annotation
        elif typing.get_origin(kind) in (list, dict):
            kind = typing.get_args(kind)[-1]
        else:
            return None
    return unwrap(kind)[0]


TYPE_WORDS = {
    "int": ("must be a whole number", "write a whole number without quotes"),
    "float": ("must be a number", "write a number without quotes, e.g. 1.0e-4"),
    "string": ("must be text", "write text (quote it)"),
    "bool": ("must be true or false", "write true or false"),
    "list": ("must be a list", "write a YAML list, e.g. [0, 1]"),
    "dict": ("must be a mapping", "write a mapping (indented keys under it)"),
}
TYPE_OF_ERROR = {
    "int_type": "int",
    "int_parsing": "int",
    "int_from_float": "int",
    "float_type": "float",
    "float_parsing": "float",
    "string_type": "string",
    "bool_type": "bool",
    "bool_parsing": "bool",
    "list_type": "list",
    "dict_type": "dict",
    "model_type": "dict",
    "model_attributes_type": "dict",
}


def bound_words(kind: str, limit: Any) -> tuple[str, str]:
    """A numeric bound from an error's ctx as a sentence and a fix."""
    if (kind, limit) in (("gt", 0), ("ge", 1)):
        return ("must be 1 or more" if kind == "ge" else "must be greater than 0"), "use a positive number"
    if (kind, limit) == ("ge", 0):
        return "must be 0 or more", "use a number that is not negative"
    return {
        "gt": (f"must be greater than {limit}", f"use a number above {limit}"),
        "ge": (f"must be {limit} or more", f"use {limit} or more"),
        "lt": (f"must be less than {limit}", f"use a number below {limit}"),
        "le": (f"must be at most {limit}", f"use {limit} or less"),
    }[kind]


def problems_from(exc: ValidationError, root: type[BaseModel], prefix: tuple[Any, ...] = ()) -> list[Problem]:
    """Every error of a validation as a Problem: dotted field path, the value found there, and a fix."""
    found = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        found.append(problem_of(err, loc, root, prefix))
    return found


def dotted(parts: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in parts)


def problem_of(err: Any, loc: tuple[Any, ...], root: type[BaseModel], prefix: tuple[Any, ...]) -> Problem:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    field = dotted(prefix + loc) or None
    if kind == RULE:
        extra = {"value": value} if ctx.get("has_value") else {}
        return problem(field, ctx["message"], ctx.get("fix") or None, **extra)
    if kind == "extra_forbidden":
        parent = model_at(root, loc[:-1])
        known = list(parent.model_fields) if isinstance(parent, type) and issubclass(parent, BaseModel) else []
        close = closest(loc[-1], known)
        if close:
            return problem(field, f"unknown key; did you mean {close}?", f"rename it to {close}")
        listed = ", ".join(known) if known else "see `gpuwizard presets schema`"
        return problem(field, "unknown key", f"remove it; the keys here are {listed}")
    if kind == "missing":
        return problem(field, "required field is missing", "add it")
    if kind in TYPE_OF_ERROR:
        sentence, fix = TYPE_WORDS[TYPE_OF_ERROR[kind]]
        return problem(field, sentence, fix, value=value)
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": "gt", "greater_than_equal": "ge", "less_than": "lt", "less_than_equal": "le"}[kind]
        limit = ctx.get(op)
        if (
            isinstance(value, int) and isinstance(limit, int) and op in ("gt", "lt")
        ):  # whole numbers: say the nearest allowed one
            op, limit = ("ge", limit + 1) if op == "gt" else ("le", limit - 1)
        return problem(field, *bound_words(op, limit), value=value)
    if kind == "literal_error":
        literal = model_at(root, loc)
        choices = typing.get_args(literal) if typing.get_origin(literal) is Literal else ()
        listed = ", ".join(str(c) for c in choices) or "the documented values"
        word = yaml_word(value, choices)
        if word is not None:  # YAML 1.1 reads an unquoted no/yes/off/on as a boolean
            leaf = str(loc[-1]) if loc else "the value"
            return problem(
                field,
                f"must be one of {listed}; YAML reads an unquoted {word} as {str(value).lower()}",
                f'quote it: {leaf}: "{word}"',
                value=value,
            )
        said = unknown(f"must be one of {listed}", value, choices)
        return problem(field, said, f"use one of: {listed}", value=value)
    if kind in ("string_too_short", "too_short"):
        return problem(field, "must not be empty", "write a value", value=value)
    if kind in ("string_too_long", "too_long"):
        return problem(field, f"is too long (at most {ctx.get('max_length')})", "shorten it", value=value)
    if kind == "finite_number":
        return problem(
            field, "must be a finite number", "write a number such as 1.0e-4 (not .inf or .nan)", value=value
        )
    return problem(field, err["msg"], "correct the value", value=value)


YAML_BOOLEAN_WORDS = {False: ("no", "off", "false", "n"), True: ("yes", "on", "true", "y")}


def yaml_word(value: Any, choices: tuple[Any, ...]) -> str | None:
    """The choice a YAML boolean was probably meant to be (unquoted `no` for the choice "no"), if any."""
    if not isinstance(value, bool):
        return None
    return next((word for word in YAML_BOOLEAN_WORDS[value] if word in choices), None)


def as_rules(exc: ValidationError, model: type[BaseModel]) -> ValidationError:
    """A nested model's errors, worded against that model, as rule errors the outer model merges at the same fields."""
    rules = Rules(model.__name__)
    for found in problems_from(exc, model):
        rules.add(found.field, found.message, found.fix, found.value if found.has_value else MISSING)
    return ValidationError.from_exception_data(rules.title, rules.found)


def schema_with_trainers(root: type[BaseModel], options: dict[str, type[BaseModel]]) -> dict[str, Any]:
    """JSON Schema of `root`, with `trainer_options` typed per trainer (if trainer is X then its options)."""
    schema = root.model_json_schema()
    defs = schema.setdefault("$defs", {})
    branches = []
    for name, model in options.items():
        sub = model.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(sub.pop("$defs", {}))
        defs[model.__name__] = sub
        branches.append(
            {
                "if": {"properties": {"trainer": {"const": name}}, "required": ["trainer"]},
                "then": {"properties": {"trainer_options": {"$ref": f"#/$defs/{model.__name__}"}}},
            }
        )
    schema["allOf"] = branches
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def undocumented_fields(schema: dict[str, Any]) -> list[str]:
    """Paths of properties in a JSON Schema that carry no description (every field must say what it is)."""
    defs = schema.get("$defs", {})

    def described(prop: dict[str, Any]) -> bool:
        if prop.get("description"):
            return True
        target = prop.get("$ref", "").rpartition("/")[2]  # a section's field shares its model's description
        return bool(target and defs.get(target, {}).get("description"))

    missing = []
    for where, node in [("", schema), *((f"$defs.{k}", v) for k, v in defs.items())]:
        for name, prop in node.get("properties", {}).items():
            if not described(prop):
                missing.append(f"{where}.{name}".lstrip("."))
    return missing
