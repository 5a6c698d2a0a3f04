"""Ask the trainer itself: run the exact command through the installed trainer's own parser, without training,
and compare what it will do with the plan (`gpuwizard check`, and before every launch).

A trainer module says how to ask (Trainer.trainer_query) with a check script from scripts/ here; the answer
crosses a process boundary, so it is a typed record, and it is remembered per command and environment stamp.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuwizard.core.errors import Problem, problem, warning
from gpuwizard.model.job import TrainerQuery
from gpuwizard.runs.records import Record
from gpuwizard.trainers.check import envcache

SCRIPTS_DIR = Path(__file__).resolve().parent / "scripts"
MARK = "GPUWIZARD-CHECK "
CACHE = "trainer-check"
REL_TOLERANCE = 1e-5
"""Floats pass through `:g` (6 significant digits) on their way into a flag."""

LABELS: dict[str, str] = {
    "per_device_batch": "batch {} per process",
    "global_batch": "global batch {}",
    "grad_accum": "accumulation {}",
    "lr": "lr {}",
    "steps": "{} steps",
    "warmup_steps": "warmup {}",
    "decay_steps": "decay over {} steps",
    "decay_lr": "decay to lr {}",
    "dataset": "dataset {}",
    "lr_schedule": "{} schedule",
    "gpus": "{} GPUs",
    "output_dir": "into {}",
    "model": "model {}",
    "weights": "weights {}",
    "fsdp_devices": "--fsdp-devices {}",
    "resume": "resume {}",
    "overwrite": "overwrite {}",
    "checkpoint_dir": "checkpoints in {}",
    "group_lrs": "lr of each optimizer group {}",
    "epoch_samples": "{} samples an epoch",
}
"""The shared value keys, in summary order; a trainer may report others, shown as `key value`."""

FIELDS: dict[str, str] = {
    "per_device_batch": "batch.size",
    "global_batch": "batch.size",
    "grad_accum": "batch.grad_accum",
    "lr": "optim.lr",
    "steps": "optim.steps",
    "warmup_steps": "optim.warmup_ratio",
    "decay_steps": "optim.steps",
    "decay_lr": "optim.lr",
    "dataset": "dataset.repo_id",
    "gpus": "hardware.gpus",
    "output_dir": "output_dir",
    "resume": "output_dir",
    "model": "policy",
    "fsdp_devices": "trainer_options.fsdp_devices",
    "overwrite": "trainer_options.overwrite",
    "checkpoint_dir": "output_dir",
}
"""The preset field a mismatch of each key points at."""


def check_script(name: str) -> str:
    """The path of one check script (run by the training interpreter, so a file path, not a module)."""
    return str(SCRIPTS_DIR / name)


class CheckAnswer(BaseModel):
    """What a check script printed: the trainer's own reading of the command, or its refusal."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["parsed", "refused", "unavailable"]
    parser: str | None = None
    values: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    error: str | None = None
    detail: str | None = None
    watch: list[str] = Field(default_factory=list)


class Mismatch(BaseModel):
    key: str
    planned: Any
    trainer: Any
    field: str | None = None
    fix: str | None = None


class TrainerCheck(Record):
    """The result shown in `check`, the wizard's preview and before a launch; trainer-check.json in a run folder."""

    status: Literal["accepted", "mismatch", "refused", "not checked"]
    summary: str
    parser: str | None = None
    values: dict[str, Any] = Field(default_factory=dict)
    expected: dict[str, Any] = Field(default_factory=dict)
    mismatches: list[Mismatch] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    error: str | None = None
    detail: str | None = None
    cached: bool = False
    seconds: float = 0.0

    @property
    def blocks(self) -> bool:
        """A refusal or a value that differs from the plan stops a launch."""
        return self.status in ("mismatch", "refused")

    def problems(self) -> list[Problem]:
        """One paragraph per mismatch or refusal (errors), or a warning when it could not be checked."""
        if self.status == "not checked":
            return [warning(None, self.summary, "run `gpuwizard check` on the training machine before a long run")]
        if self.status == "refused":
            missing = (self.error or "").startswith(("ImportError", "ModuleNotFoundError"))
            return [
                problem(
                    None,
                    f"{self.parser or 'the trainer'} refuses this command: {self.error}",
                    "install the missing package in the training environment (launch.python), as the message says"
                    if missing
                    else "change the value the trainer's message names (a preset field, trainer_options or "
                    "launch.extra_args); `gpuwizard check PRESET --json` shows its whole output",
                )
            ]
        return [
            problem(
                m.field,
                f"{self.parser or 'the trainer'} will use {m.key} {show(m.trainer)} where the plan says "
                f"{show(m.planned)}",
                m.fix
                or "look for a launch.extra_args or trainer_options value that overrides it; if there is none, this "
                "is a gpuwizard bug: report it with `gpuwizard check PRESET --json`",
            )
            for m in self.mismatches
        ]


def show(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def same(planned: Any, trainer: Any) -> bool:
    if isinstance(planned, bool) or isinstance(trainer, bool):
        return bool(planned == trainer)
    if isinstance(planned, int | float) and isinstance(trainer, int | float):
        if isinstance(planned, int) and isinstance(trainer, int):
            return planned == trainer
        return math.isclose(planned, trainer, rel_tol=REL_TOLERANCE, abs_tol=1e-12)
    return bool(planned == trainer)


def describe(values: dict[str, Any], labels: dict[str, str]) -> str:
    """`batch 8 per process, lr 2e-05 on the logged group, 100,000 steps`: the shared keys first."""
    keys = [k for k in LABELS if k in values] + sorted(k for k in values if k not in LABELS)
    parts = []
    for key in keys:
        value = values[key]
        if value is None or (key == "grad_accum" and value == 1):
            continue
        text = LABELS[key].format(show(value)) if key in LABELS else f"{key} {show(value)}"
        parts.append(f"{text} {labels[key]}" if key in labels else text)
    return ", ".join(parts)


class _Common(TypedDict):
    """The fields every TrainerCheck that compare() makes shares."""

    parser: str | None
    notes: list[str]
    cached: bool
    seconds: float


def compare(answer: CheckAnswer, query: TrainerQuery, cached: bool, seconds: float) -> TrainerCheck:
    """The trainer's answer against the plan."""
    parser = answer.parser or "the trainer"
    common: _Common = {"parser": answer.parser, "notes": answer.notes, "cached": cached, "seconds": seconds}
    if answer.status == "unavailable":
        return TrainerCheck(status="not checked", summary=f"not checked: {answer.error}", **common)
    if answer.status == "refused":
        return TrainerCheck(
            status="refused",
            summary=f"refused by {parser}'s own parser: {answer.error}",
            error=answer.error,
            detail=answer.detail,
            expected=query.expected,
            **common,
        )
    mismatches = [
        Mismatch(key=key, planned=planned, trainer=answer.values[key], field=FIELDS.get(key), fix=query.fixes.get(key))
        for key, planned in query.expected.items()
        if planned is not None and key in answer.values and not same(planned, answer.values[key])
    ]
    missing = [k for k, v in query.expected.items() if v is not None and k not in answer.values]
    notes = list(answer.notes) + ([f"the parser did not report {', '.join(missing)}"] if missing else [])
    common["notes"] = notes
    shown = describe(answer.values, query.labels)
    if mismatches:
        differs = "; ".join(f"{m.key} {show(m.trainer)}, planned {show(m.planned)}" for m in mismatches)
        return TrainerCheck(
            status="mismatch",
            summary=f"differs from the plan in {parser}'s own parser: {differs}",
            values=answer.values,
            expected=query.expected,
            mismatches=mismatches,
            **common,
        )
    return TrainerCheck(
        status="accepted",
        summary=f"accepted by {parser}'s own parser: {shown}, as planned" if shown else f"accepted by {parser}",
        values=answer.values,
        expected=query.expected,
        **common,
    )


def parse_output(stdout: str) -> CheckAnswer | None:
    """The last marked line of a check script's output."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                return CheckAnswer.model_validate(json.loads(line[len(MARK) :]))
            except (ValueError, ValidationError, RecursionError):
                return None
    return None


@functools.cache
def scripts_stamp() -> str:
    """The check scripts' own contents: a gpuwizard upgrade that reads a trainer differently asks it again."""
    digest = hashlib.sha256()
    for path in sorted(SCRIPTS_DIR.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


SESSION_VARIABLES = frozenset(
    "_ OLDPWD PWD SHLVL TMUX TMUX_PANE STY WINDOW WINDOWID TERM_SESSION_ID ITERM_SESSION_ID KITTY_WINDOW_ID KITTY_PID "
    "WEZTERM_PANE ALACRITTY_WINDOW_ID SSH_CLIENT SSH_CONNECTION SSH_TTY SSH_AUTH_SOCK SSH_AGENT_PID GPG_TTY "
    "XDG_SESSION_ID XDG_VTNR DBUS_SESSION_BUS_ADDRESS INVOCATION_ID JOURNAL_STREAM COLUMNS LINES PROMPT_COMMAND "
    "PS1".split()
)
"""Variables that say which terminal, pane, login or shell a command came from: they differ between identical
calls (each tmux pane or window, each SSH login, the previous folder) and no trainer's parser reads them, so the
remembered answer's key leaves them out (the working folder is in the key as query.cwd)."""
SESSION_PREFIXES = ("VSCODE_",)


def cache_key(query: TrainerQuery, env: dict[str, str]) -> str:
    """A hash of everything the answer depends on (no value is kept in clear: the env may hold a token)."""
    kept = sorted((k, v) for k, v in env.items() if k not in SESSION_VARIABLES and not k.startswith(SESSION_PREFIXES))
    blob = json.dumps([query.argv, os.path.abspath(query.cwd), kept, scripts_stamp()])
    return hashlib.sha256(blob.encode()).hexdigest()


def ask(query: TrainerQuery, base_env: dict[str, str], use_cache: bool = True) -> tuple[CheckAnswer, bool, float]:
    """Run the check script (or reuse its remembered answer); returns the answer, whether it was cached, and seconds."""
    env = base_env | query.env
    exe = envcache.interpreter(query.argv[0])
    key = cache_key(query, env)
    cache = envcache.EnvCache(CACHE)
    if use_cache and (remembered := cache.get(key, exe)) is not None:
        try:
            return CheckAnswer.model_validate(remembered), True, 0.0
        except ValidationError:
            pass
    started = time.monotonic()
    try:
        out = subprocess.run(
            query.argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=query.timeout_s,
            env=env,
            cwd=query.cwd,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        answer = CheckAnswer(status="unavailable", error=f"the parser did not answer within {query.timeout_s:.0f} s")
        return answer, False, time.monotonic() - started
    except OSError as exc:
        answer = CheckAnswer(
            status="unavailable",
            error=f"no training environment here (cannot start {query.argv[0]}: {exc.strerror or exc})",
        )
        return answer, False, time.monotonic() - started
    seconds = time.monotonic() - started
    parsed = parse_output(out.stdout)
    if parsed is None:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or [f"exit code {out.returncode}"]
        return (
            CheckAnswer(status="unavailable", error=f"the check script gave no answer: {tail[0][:300]}"),
            False,
            seconds,
        )
    if parsed.status != "unavailable":
        cache.put(key, exe, parsed.model_dump(), parsed.watch)
    return parsed, False, seconds
