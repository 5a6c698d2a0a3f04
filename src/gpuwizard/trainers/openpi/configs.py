"""What a named openpi TrainConfig does on its own: asked of the installed openpi where it is here (its own
`_config.get_config`, once per environment, remembered in the trainer-check EnvCache), else read from the catalog.

The plan builds on these values (batch, lr schedule, steps, model type, dataset, weights), so a config missing from
the catalog plans right wherever the training environment is; the plan says which source it used.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from gpuwizard.model.catalog import OpenpiConfig, load_catalog, openpi_config
from gpuwizard.model.job import TrainerQuery
from gpuwizard.model.trainer_options import OpenpiOptions
from gpuwizard.model.trust import is_trusted
from gpuwizard.trainers.base import interpreter_missing, resolve_python, workdir_for
from gpuwizard.trainers.check import CheckAnswer, ask, check_script

if TYPE_CHECKING:
    from gpuwizard.model.preset import Preset

ANSWER_FIELDS = {
    "batch_size": "global_batch",
    "num_train_steps": "steps",
    "peak_lr": "lr",
    "warmup_steps": "warmup_steps",
    "decay_steps": "decay_steps",
    "decay_lr": "decay_lr",
    "model": "model",
    "repo_id": "dataset",
    "weights": "weights",
    "pytorch_weight_path": "pytorch_weights",
    "overwrite": "overwrite",
    "data": "data",
    "log_interval": "log_interval",
    "variant": "variant",
}
"""OpenpiConfig's fields and the probe's keys for them (check/scripts/check_openpi.py)."""


@dataclass(frozen=True)
class ConfigSource:
    """A TrainConfig's own values and where they were read."""

    facts: OpenpiConfig
    where: str
    """Words for the plan: the installed openpi, the catalog, or why neither could say."""
    known: bool
    """The installed openpi or the catalog knows the config (False: openpi's TrainConfig defaults are assumed)."""
    from_trainer: bool = False
    refusal: str | None = None
    """The installed openpi's own message for a name it does not have."""


def training_python(preset: Preset) -> str:
    """The training interpreter: launch.python, else the checkout's .venv that `uv run` uses, else the one on PATH."""
    if not preset.launch.python and OpenpiOptions.of(preset).uv:
        return str(Path(workdir_for(preset)[0], ".venv", "bin", "python"))
    return resolve_python(preset)


@functools.lru_cache(maxsize=32)
def asked(python: str, workdir: str, env: tuple[tuple[str, str], ...], name: str) -> tuple[CheckAnswer | None, str]:
    """The installed openpi's own values for config `name` (None and why where it cannot be asked)."""
    if missing := interpreter_missing(python):
        return None, missing
    query = TrainerQuery(
        argv=[python, check_script("check_openpi.py"), "--defaults", name], expected={}, cwd=workdir, timeout_s=180
    )
    answer, _, _ = ask(query, {**os.environ, **dict(env)})
    return answer, answer.error or ""


def from_answer(values: dict[str, Any]) -> OpenpiConfig:
    return OpenpiConfig.model_validate({f: values[k] for f, k in ANSWER_FIELDS.items() if values.get(k) is not None})


def config_source(preset: Preset) -> ConfigSource:
    """The named config's values: the installed openpi's where it answers, else the catalog's, else the defaults."""
    name = OpenpiOptions.of(preset).config_name
    listed = openpi_config(load_catalog(), name) if name else None
    if not name:
        return ConfigSource(OpenpiConfig(), "no config named", False)
    env = tuple(sorted((key, str(value)) for key, value in preset.launch.env.items()))
    if is_trusted(preset):
        answer, why = asked(training_python(preset), workdir_for(preset)[0], env, name)
    else:
        answer, why = None, "the preset is not trusted yet, so nothing of it runs before you say so"
    if answer is not None and answer.status == "parsed":
        try:
            where = f"the installed openpi's own TrainConfig ({answer.parser})"
            return ConfigSource(from_answer(answer.values), where, True, True)
        except ValidationError as exc:
            why = f"its answer did not fit ({exc.errors()[0]['msg']})"
    if answer is not None and answer.status == "refused":
        return ConfigSource(listed or OpenpiConfig(), "the installed openpi", listed is not None, True, answer.error)
    if listed is not None:
        return ConfigSource(listed, f"gpuwizard's catalog; the installed openpi was not asked: {why}", True)
    return ConfigSource(OpenpiConfig(), f"the installed openpi was not asked ({why})", False)
