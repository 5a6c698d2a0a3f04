"""A stopped run is offered `r resumes it from its last checkpoint` only where it trained a step (a new user's
walk: a run stopped before its first step offered a resume that then refused with a CLI flag's paragraph)."""

from __future__ import annotations

from gpuwizard.core.codes import RunState
from gpuwizard.runs.records import Progress, Status
from gpuwizard.tui.monitor.banner import banner
from support.runs import status_record


def stopped(step: int | None) -> tuple[Status, Progress]:
    status = status_record(
        run_id="20261202-000000-demo-cpu",
        preset="demo-cpu",
        world_size=2,
        steps=300,
        state=RunState.STOPPED,
        command="torchrun",
        exit_code=4,
    )
    return status, Progress(step=step, total=300)


def said(step: int | None) -> str:
    status, progress = stopped(step)
    shown = banner([], status, progress, None, "/runs/x", 2.0, 78, 4, "")
    assert shown is not None
    return str(shown.body)


def test_a_run_stopped_before_its_first_step_is_not_offered_a_resume():
    text = said(None)
    assert "r resumes" not in text and "trained no step, so there is no checkpoint: w starts it again" in text


def test_a_run_stopped_after_some_steps_is_offered_its_resume():
    assert "r resumes it from its last checkpoint" in said(120)
