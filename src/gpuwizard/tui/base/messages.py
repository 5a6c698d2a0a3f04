"""Messages that background workers post to screens (workers never touch widgets). Each is a dataclass; one that
carries a whole new state (a plan, an inventory, a trainer check, the run history) is superseded by the next one of
its kind queued behind it (`can_replace`), so a screen behind its workers draws only the newest; one that carries an
increment (new log lines and events, a launch's outcome) never is."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from gpuwizard.analysis.compare.runs import Comparison, RunFacts
    from gpuwizard.core.errors import Problem
    from gpuwizard.gpus.inventory import Inventory
    from gpuwizard.model.job import BuildContext, LaunchSpec, Plan
    from gpuwizard.model.preset import Preset
    from gpuwizard.runner.control.follow import RunUpdate
    from gpuwizard.runner.sweep.view import SweepRow
    from gpuwizard.runs.sweeps import Sweep
    from gpuwizard.trainers.check import TrainerCheck
    from gpuwizard.trainers.check.doctor import DoctorReport


class NewState(Message):
    """A message that a newer one of the same class, queued right behind it, makes obsolete."""

    def can_replace(self, message: Message) -> bool:
        return type(message) is type(self)


@dataclass
class PresetLoaded(NewState):
    """The wizard's preset, loaded after the first frame, or the paragraph saying why it could not be."""

    preset: Preset | None
    error: str | None
    source: str | None = None
    """The file it was read from (None: a preset handed over in memory, the user's own)."""


@dataclass
class LaunchPhase(NewState):
    """What the launch after ctrl+r is doing now, shown with its elapsed time until the monitor or a refusal."""

    what: str


@dataclass
class InventoryReady(NewState):
    inventory: Inventory


@dataclass
class PlanReady(NewState):
    """The plan of one preset, its command (None while it has errors), and what stops it from starting on this
    machine (None while the machine is not yet known)."""

    seq: int
    preset: Preset
    plan: Plan
    ctx: BuildContext
    spec: LaunchSpec | None
    blockers: list[Problem] | None


@dataclass
class TrainerChecked(NewState):
    """The installed trainer's own reading of one previewed command (`key` says which), or why it failed."""

    key: str
    check: TrainerCheck | None
    error: str | None = None


@dataclass
class DoctorChecked(NewState):
    """The preflight of one previewed command (`key` says which), or why it could not be asked."""

    key: str
    report: DoctorReport | None
    error: str | None = None


@dataclass
class RunStarted(Message):
    """A launch attempt ended: a run folder, or the paragraph saying why not (and, where the checks refused it, each
    problem they found)."""

    run_path: Path | None
    error: str | None
    warnings: list[str]
    problems: list[Problem] = field(default_factory=list)


@dataclass
class RunPolled(Message):
    """What the follower read since the last poll, and how many log lines the index now holds."""

    update: RunUpdate
    line_count: int


@dataclass
class NoiseRead(NewState):
    """A gauged run's noise scale as its gauge file says now, short enough for the progress line."""

    text: str


@dataclass
class SearchDone(NewState):
    """A search of the whole log ended: the matching line, or None."""

    needle: str
    line: int | None


@dataclass
class RunsLoaded(NewState):
    """The run history as `gpuwizard runs --json` rows, newest first, and the sweep ids, newest first."""

    rows: list[dict[str, Any]]
    sweeps: list[str] = field(default_factory=list)


@dataclass
class CompareReady(NewState):
    """A comparison of the marked runs and its text, or (result None) why it could not be made."""

    result: Comparison | None
    text: str


@dataclass
class EnvsFound(NewState):
    """The training environments found: (interpreter, where, trainers) for those with the wanted trainer, then the
    rest."""

    fitting: list[tuple[str, str, dict[str, str]]]
    others: list[tuple[str, str, dict[str, str]]]


@dataclass
class SweepPolled(NewState):
    """A sweep as its record and its runs' folders say now: one row per run (runner.sweep.run_rows and each run's
    elapsed time, step total, ETA, or why its folder cannot be read), and once it has ended its comparison and best;
    `error` when sweep.json itself cannot be read."""

    sweep: Sweep | None
    rows: list[SweepRow]
    alive: bool
    compared: tuple[Comparison, RunFacts] | None
    error: str | None = None


@dataclass
class SweepLookFailed(NewState):
    """A look at the sweep raised: said on the screen (its table is then as of the last look) and tried again."""

    error: str


@dataclass
class SweepDone(Message):
    """A stop, resume or save of a sweep, done in a worker: what to say, and whether it went wrong."""

    text: str
    failed: bool = False


@dataclass
class SweepStarted(Message):
    """A sweep from the wizard: its folder, or every problem that refused its grid before anything started."""

    folder: Path | None
    problems: list[Problem] = field(default_factory=list)


@dataclass
class OpenSweep(Message):
    """A screen asks the app to show this sweep's screen (the Runs screen and the wizard need not import it)."""

    folder: Path
