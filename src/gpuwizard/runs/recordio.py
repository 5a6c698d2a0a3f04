"""How a run-folder record is read: one model carrying a format version per file, every value bounded, and a
missing, truncated, garbage or foreign file a RecordError with one line saying which, never a traceback (what each
record holds: records.py)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from gpuwizard.core.schema import problems_from, rule_error
from gpuwizard.core.yamlio import read_regular

FORMAT = 1
MAX_RECORD_BYTES = 16 << 20
RecordT = TypeVar("RecordT", bound="Record")
MAX_RECORD_INT = 2**53
"""Whole numbers past this are no count, step or code (and their division by another overflows a float)."""
Seconds = Annotated[float, Field(ge=0, le=1e11, allow_inf_nan=False)]
"""A clock reading (Unix or monotonic) or a duration: finite, not negative, before the year 5000."""
Pid = Annotated[int, Field(gt=0, le=1 << 22)]
"""A process id within Linux's pid_max, so signalling one never overflows."""
Count = Annotated[int, Field(ge=1, le=MAX_RECORD_INT)]
"""A number of processes, nodes or samples that is divided by."""


def known_or(words: type[StrEnum], otherwise: Any) -> BeforeValidator:
    """Reads a word of `words` as its member, and one it does not hold (a newer gpuwizard wrote it) as `otherwise`,
    so the record still reads."""

    def member(value: Any) -> Any:
        return (words(value) if value in known else otherwise) if isinstance(value, str) else value

    known = frozenset(words)
    return BeforeValidator(member)


class RecordError(Exception):
    """A run-folder file that cannot be read as its record; `str()` is one line saying why."""


def whole_numbers(value: Any) -> Iterator[int]:
    """Every int under a value (lists and mappings too), bools aside."""
    if isinstance(value, int) and not isinstance(value, bool):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from whole_numbers(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from whole_numbers(item)


class Record(BaseModel):
    """Strict, closed and versioned; NaN and infinities are kept where they are data (a loss can be NaN)."""

    model_config = ConfigDict(extra="forbid", strict=True, ser_json_inf_nan="constants")

    format: int = FORMAT

    @field_validator("*", mode="after")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        scalar = value is None or isinstance(value, str | float | bool | BaseModel)  # a record bounds its own
        if scalar or (type(value) is int and abs(value) <= MAX_RECORD_INT):
            return value  # without the walk: a listing of 5,000 runs validates 100,000 fields
        if any(abs(n) > MAX_RECORD_INT for n in whole_numbers(value)):
            raise rule_error(None, f"holds a whole number past {MAX_RECORD_INT:,}", "no record holds one", value)
        return value

    def to_json_text(self) -> str:
        return self.model_dump_json()


def parse_record(text: str | bytes, kind: type[RecordT], name: str) -> RecordT:
    """One record from JSON text; RecordError says what is wrong with it."""
    if not text.strip():
        raise RecordError(f"{name} is empty")
    try:
        data = json.loads(text)
    except ValueError:  # 4,300+ digit numbers included
        raise RecordError(f"{name} is not valid JSON (truncated or overwritten?)") from None
    except RecursionError:
        raise RecordError(f"{name} nests too deep to be a record") from None
    if not isinstance(data, dict):
        raise RecordError(f"{name} holds {type(data).__name__}, not a record")
    version = data.get("format")  # the one raw look-up: which reader applies
    if version != FORMAT:
        raise RecordError(
            f"{name} was written by another gpuwizard version (record format {version}; this one reads {FORMAT})"
        )
    try:
        return kind.model_validate(data)  # the parsed data, not the text again
    except ValidationError as exc:
        raise RecordError(f"{name} is damaged: {first_mistake(exc, kind)}") from None
    except RecursionError:  # nesting json could still read, called from deeper down
        raise RecordError(f"{name} nests too deep to be a record") from None


def first_mistake(exc: ValidationError, kind: type[BaseModel]) -> str:
    """The first field a program wrote wrong, and its value, without the fix a person would make to a preset."""
    return dataclasses.replace(problems_from(exc, kind)[0], fix=None).paragraph()


def read_small_file(path: Path) -> bytes:
    """A record file's bytes; RecordError for a missing, unreadable, non-regular or huge one."""
    try:
        return read_regular(path, MAX_RECORD_BYTES)
    except FileNotFoundError:
        raise RecordError(f"{path.name} is missing") from None
    except OSError as exc:
        raise RecordError(f"{path.name} cannot be read: {exc.strerror or exc}") from None


def read_record(path: Path, kind: type[RecordT]) -> RecordT:
    return parse_record(read_small_file(path), kind, path.name)


def parse_lines(text: str, kind: type[RecordT]) -> tuple[list[RecordT], int]:
    """The records of JSON lines, and how many lines could not be read as one."""
    records, bad = [], 0
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            records.append(parse_record(line, kind, kind.__name__))
        except RecordError:
            bad += 1
    return records, bad
