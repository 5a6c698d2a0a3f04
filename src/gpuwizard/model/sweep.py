"""A sweep: one preset run over a grid of field values and seeds, each combination a full preset of its own. The grid
comes from `--set FIELD=V1,V2` and `--seeds N` or a sweep file; every mistake is refused before anything starts."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from gpuwizard.core import yamlio
from gpuwizard.core.errors import Problem, UserError, problem, unknown
from gpuwizard.core.schema import Strict, model_at, problems_from, to_data, unwrap
from gpuwizard.model.preset import Preset
from gpuwizard.model.trainer_options import OPTIONS
from gpuwizard.model.trust import code_items

MAX_RUNS = 256
"""The most runs one sweep starts: past it a grid is a typo more often than a plan (and would queue for days)."""
FIXED_FIELDS = ("version", "name", "trainer")
"""What every run of a sweep shares: its name ties the runs to the preset's history, its trainer to its checks."""
Metric = Literal["final_loss", "loss_at_equal_samples", "duration_s"]


class SweepFile(Strict):
    """A sweep written down (sweep format version 1): the preset, the grid of field values, the seeds."""

    version: Literal[1] = Field(1, description="Sweep format version.")
    preset: str | None = Field(
        None, description="The preset to sweep (a name or a file); PRESET on the command line wins."
    )
    grid: dict[str, list[Any]] = Field(
        {}, description="Dotted preset fields and the values each run takes, e.g. optim.lr: [1.0e-4, 2.0e-4]."
    )
    seeds: int | None = Field(
        None, ge=1, le=MAX_RUNS, description="Runs per combination, seeded 0..N-1 through the trainer's seed option."
    )
    metric: Metric = Field(
        "final_loss", description="final_loss | loss_at_equal_samples | duration_s: the best is the lowest."
    )


@dataclass(frozen=True)
class Combination:
    """One run of the sweep: the fields it sets and the preset it runs."""

    values: dict[str, Any]
    preset: Preset

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values.items())


def sweep_schema() -> dict[str, Any]:
    """The JSON Schema of a sweep file (for editors' YAML language servers)."""
    schema = SweepFile.model_json_schema()
    schema["title"] = "gpuwizard sweep"
    return schema


def parse_sweep_file(data: Any, source: str) -> SweepFile:
    if not isinstance(data, dict):
        raise UserError(
            problem(
                None,
                "a sweep file must be a YAML mapping (version, preset, grid, seeds)",
                "see `gpuwizard sweep schema`",
            ),
            source,
        )
    try:
        return SweepFile.model_validate(data)
    except ValidationError as exc:
        raise UserError(problems_from(exc, SweepFile), source) from None


def scalar(text: str) -> Any:
    """A value as typed on the command line: 1e-4 is a number (YAML alone reads it as text), the rest as YAML
    reads it."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return yamlio.loads(text, "--set") if text.strip() else text


def parse_sets(items: list[str]) -> dict[str, list[Any]]:
    """--set FIELD=V1,V2 ... as a grid; a malformed one is one paragraph."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        field, sep, values = item.partition("=")
        if not sep or not field.strip():
            raise UserError(problem("--set", "must be FIELD=VALUE,VALUE", "e.g. --set optim.lr=1e-4,2e-4", value=item))
        parts = [v.strip() for v in values.split(",") if v.strip()]
        if not parts:
            raise UserError(
                problem("--set", f"{field} has no values", f"give one or more, e.g. --set {field}=V1,V2", value=item)
            )
        grid[field.strip()] = [scalar(v) for v in parts]
    return grid


def field_problem(preset: Preset, dotted: str) -> Problem | None:
    """A grid field that is no field of the preset (with the closest name), or one every run must share."""
    parts = dotted.split(".")
    if parts[0] in FIXED_FIELDS:
        return problem(
            f"grid.{dotted}",
            "is the same for every run of a sweep",
            "sweep another field, or sweep another preset",
            value=dotted,
        )
    if dotted in ("hardware.devices", "hardware.node_rank", "hardware.nodes"):
        return problem(
            f"grid.{dotted}",
            "the sweep places each run on this machine's free devices itself",
            "sweep hardware.gpus (how many each run takes) instead",
            value=dotted,
        )
    root: type[BaseModel] = Preset
    walked = parts
    if parts[0] == "trainer_options":
        root, walked = OPTIONS[preset.trainer], parts[1:]
    if parts[0] == "launch" and parts[1:2] == ["env"] and len(parts) == 3:
        return None
    for depth in range(1, len(walked) + 1):
        parent = model_at(root, tuple(walked[: depth - 1])) if depth > 1 else root
        kind = unwrap(parent)[0] if parent is not None else None
        if isinstance(kind, type) and issubclass(kind, BaseModel) and walked[depth - 1] not in kind.model_fields:
            names = [".".join([*parts[: len(parts) - len(walked) + depth - 1], n]) for n in kind.model_fields]
            return problem(
                f"grid.{dotted}",
                unknown("is no field of the preset", ".".join(parts[: len(parts) - len(walked) + depth]), names),
                "use a dotted preset field, e.g. optim.lr, batch.size or trainer_options.seed "
                "(`gpuwizard presets schema`)",
                value=dotted,
            )
    return None


def combinations_count(grid: dict[str, list[Any]], seeds: int | None) -> int:
    return math.prod(len(v) for v in grid.values()) * (seeds or 1)


def expand(preset: Preset, grid: dict[str, list[Any]], seeds: int | None) -> list[Combination]:
    """Every combination as a preset of its own, validated like a loaded file; UserError with a paragraph per mistake
    (an unknown field, a value the preset refuses, an empty grid, too many combinations)."""
    found = [p for p in (field_problem(preset, f) for f in grid) if p is not None]
    if seeds and "seed" not in OPTIONS[preset.trainer].model_fields:
        found.append(
            problem(
                "--seeds",
                f"the {preset.trainer} trainer has no seed option, so the runs would differ in nothing",
                "leave --seeds out and sweep another field",
                value=seeds,
            )
        )
    if seeds and "trainer_options.seed" in grid:
        found.append(problem("--seeds", "trainer_options.seed is in the grid already", "use one of them", value=seeds))
    empty = [f for f, values in grid.items() if not values]
    found += [
        problem(f"grid.{f}", "has no values", "list one or more values, or leave the field out", value=[])
        for f in empty
    ]
    if not grid and not seeds:
        found.append(
            problem(
                None,
                "the grid is empty: nothing to sweep",
                "add --set FIELD=V1,V2 (e.g. --set optim.lr=1e-4,2e-4) or --seeds N",
            )
        )
    if found:
        raise UserError(found, preset.name)
    count = combinations_count(grid, seeds)
    if count > MAX_RUNS:
        sizes = " x ".join(str(len(v)) for v in grid.values()) + (f" x {seeds} seeds" if seeds else "")
        raise UserError(
            problem(
                "grid",
                f"{sizes} makes {count:,} combinations, more than the {MAX_RUNS} one sweep starts",
                "sweep fewer values per field or fewer fields",
                value=count,
            ),
            preset.name,
        )
    axes = [[(f, v) for v in values] for f, values in grid.items()]
    if seeds:
        axes.append([("trainer_options.seed", s) for s in range(seeds)])
    refused: dict[tuple[str, str], Problem] = {}
    runs = []
    for chosen in itertools.product(*axes):
        values = dict(chosen)
        try:
            runs.append(Combination(values, with_values(preset, values)))
        except UserError as exc:
            for p in exc.problems:
                refused.setdefault((p.field or "", repr(p.value)), p)
    if refused:
        raise UserError(list(refused.values()), preset.name)
    if changed := code_problems(preset, grid, runs):
        raise UserError(changed, preset.name)
    return runs


def code_problems(preset: Preset, grid: dict[str, list[Any]], runs: list[Combination]) -> list[Problem]:
    """A grid that changes what the runs execute (model/trust.py's code items: the interpreter, the working folder, a
    variable that loads code, a setup line, the trainer's script): a sweep runs only the code of the preset the user
    trusted, and asks nothing per run, so such a field must be a preset of its own, trusted as one."""
    base = {(item.field, item.value) for item in code_items(preset)}
    fields: dict[str, None] = {}
    for run in runs:
        for field, _ in {(i.field, i.value) for i in code_items(run.preset)} ^ base:
            named = [k for k in grid if field == k or field.startswith(f"{k}.") or k.startswith(f"{field}.")]
            fields.update(dict.fromkeys(named or [field]))
    return [
        problem(
            f"grid.{field}",
            "would change the code the runs execute (the interpreter, the working folder, a variable that loads "
            "code, a setup line or the trainer's script), and a sweep runs only what the preset you trusted names",
            "make each value a preset of its own, trust it (`gpuwizard presets trust FILE`) and sweep that preset",
            value=field,
        )
        for field in fields
    ]


def with_values(preset: Preset, values: dict[str, Any]) -> Preset:
    """The preset with one combination's values, validated once as a whole."""
    data = to_data(preset)
    for dotted, value in values.items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    try:
        return Preset.model_validate(data)
    except ValidationError as exc:
        raise UserError(problems_from(exc, Preset)) from None
