"""Messages that background workers post to screens (workers never touch widgets)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from gpuwizard.analysis.compare import Comparison
    from gpuwizard.core.errors import Problem
    from gpuwizard.gpus.inventory import Inventory
    from gpuwizard.model.job import BuildContext, LaunchSpec, Plan
    from gpuwizard.model.preset import Preset
    from gpuwizard.runner.follow import RunUpdate
    from gpuwizard.trainers.check import TrainerCheck


class PresetLoaded(Message):
    """The wizard's preset, loaded after the first frame, or the paragraph saying why it could not be."""

    def __init__(self, preset: Preset | None, error: str | None):
        super().__init__()
        self.preset, self.error = preset, error


class InventoryReady(Message):
    def __init__(self, inventory: Inventory):
        super().__init__()
        self.inventory = inventory


class PlanReady(Message):
    """The plan of one preset, its command (None while it has errors), and what stops it from starting on this
    machine (None while the machine is not yet known)."""

    def __init__(
        self,
        seq: int,
        preset: Preset,
        plan: Plan,
        ctx: BuildContext,
        spec: LaunchSpec | None,
        blockers: list[Problem] | None,
    ):
        super().__init__()
        self.seq, self.preset, self.plan, self.ctx, self.spec, self.blockers = seq, preset, plan, ctx, spec, blockers


class TrainerChecked(Message):
    """The installed trainer's own reading of one previewed command (`key` says which), or why it failed."""

    def __init__(self, key: str, check: TrainerCheck | None, error: str | None = None):
        super().__init__()
        self.key, self.check, self.error = key, check, error


class RunStarted(Message):
    """A launch attempt ended: a run folder, or the paragraph saying why not (and, where the checks refused it, each
    problem they found)."""

    def __init__(
        self, run_path: Path | None, error: str | None, warnings: list[str], problems: list[Problem] | None = None
    ):
        super().__init__()
        self.run_path, self.error, self.warnings, self.problems = run_path, error, warnings, problems or []


class RunPolled(Message):
    """What the follower read since the last poll, and how many log lines the index now holds."""

    def __init__(self, update: RunUpdate, line_count: int):
        super().__init__()
        self.update, self.line_count = update, line_count


class SearchDone(Message):
    """A search of the whole log ended: the matching line, or None."""

    def __init__(self, needle: str, line: int | None):
        super().__init__()
        self.needle, self.line = needle, line


class RunsLoaded(Message):
    """The run history as `gpuwizard runs --json` rows, newest first."""

    def __init__(self, rows: list[dict]):
        super().__init__()
        self.rows = rows


class CompareReady(Message):
    """A comparison of the marked runs and its text, or (result None) why it could not be made."""

    def __init__(self, result: Comparison | None, text: str):
        super().__init__()
        self.result, self.text = result, text
