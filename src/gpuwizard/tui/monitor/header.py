"""The monitor's two header lines: the run's title, and its progress figures fitted to the width (samples/s and
the ETA are the last to go)."""

from __future__ import annotations

from textual.content import Content

from gpuwizard.core.codes import RunState
from gpuwizard.core.safetext import safe_line
from gpuwizard.runs.records import Status

STATE_STYLES = {
    RunState.FINISHED: "bold $success",
    RunState.FAILED: "bold $error",
    RunState.HUNG: "bold $error",
    RunState.STOPPING: "bold $warning",
    RunState.STOPPED: "bold $warning",
}
BAR_CELLS = 15
"""The progress bar's width (app.tcss: #progress); the figures after it have one cell of padding."""
DROPPED_FIRST = ("lr ", "loss ")
"""Figures left out, in this order, where the line is too narrow: the curves show both."""


def run_title(run_id: str, status: Status | None, problem: str | None) -> Content:
    if status is None:
        text = problem or "reading the run folder..."
        return Content.assemble((" ? ", "reverse bold $warning"), safe_line(f" {run_id} · {text}"))
    s = status
    slurm = ""
    if s.slurm_job_id:
        slurm = f" · SLURM {s.slurm_job_id} {(s.slurm_state or '').lower()}"
        slurm += f" ({s.slurm_reason})" if s.slurm_reason else ""
    return Content.assemble(
        (safe_line(f" {s.state} "), f"reverse {STATE_STYLES.get(s.state, 'bold $accent')}"),
        safe_line(
            f" {run_id} · {s.trainer} · {s.policy} · {s.world_size}x{s.device}"
            + (" · smoke" if s.smoke else "")
            + slurm
        ),
    )


def fitted_stats(head: str, parts: list[str], width: int) -> tuple[str, bool]:
    """The figures that fit a header line `width` cells wide, and whether the progress bar keeps its place: first
    the lr goes, then the bar (the step count says as much), then the loss; what is left is cut at the end."""
    shown = list(parts)
    tries: list[tuple[list[str], bool]] = [(shown, True)]
    for prefix in DROPPED_FIRST:
        shown = [part for part in shown if not part.startswith(prefix)]
        tries += [(shown, True), (shown, False)] if prefix == "lr " else [(shown, False)]
    for kept, bar in tries:
        text = " · ".join([head, *kept])
        if len(text) <= width - 1 - (BAR_CELLS if bar else 0):
            return text, bar
    return text[: width - 1], False
