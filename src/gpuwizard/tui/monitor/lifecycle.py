"""Stopping, resuming, continuing and restarting the monitored run: every action that stops or replaces a running
job asks first, and a finished run is continued to more steps rather than repeated."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol

from textual.timer import Timer
from textual.widgets import Static

from gpuwizard.core.codes import RunState
from gpuwizard.core.kinds import EventKind
from gpuwizard.core.safetext import safe_text
from gpuwizard.runner.control.stopping import request_stop
from gpuwizard.runs.records import Event, Job, Progress, RecordError, Status
from gpuwizard.runs.rundir import RunDir
from gpuwizard.tui.base.messages import RunStarted

if TYPE_CHECKING:
    from textual.message import Message
    from textual.notifications import SeverityLevel
    from textual.worker import Worker

    from gpuwizard.tui.base.apphost import AppHost


def stop_grace_s(run: RunDir) -> float:
    """How long the supervisor waits before the forced kill (job.json; its default when that cannot be read)."""
    try:
        return run.job().stop_grace_s
    except RecordError:
        return float(Job.model_fields["stop_grace_s"].default)


class LifecycleHost(Protocol):
    """The monitor screen, as its stop and restart actions see it: the run it shows, the banner they write into while
    a restart starts, and the screen's own means (notices, dialogs, messages, workers, timers)."""

    @property
    def run(self) -> RunDir: ...
    @property
    def status(self) -> Status | None: ...
    @property
    def progress(self) -> Progress | None: ...
    @property
    def events(self) -> list[Event]: ...
    @property
    def final(self) -> bool: ...
    @property
    def app(self) -> AppHost: ...

    def p2p_applies(self) -> bool: ...
    def notify(
        self, message: str, *, severity: SeverityLevel = ..., timeout: float | None = ..., markup: bool = ...
    ) -> None: ...
    def post_message(self, message: Message) -> bool: ...
    def query_one(self, selector: str, expect_type: type[Static]) -> Static: ...
    def set_interval(self, interval: float, callback: Callable[[], object]) -> Timer: ...
    def run_worker(
        self, work: Callable[[], None], *, group: str, exit_on_error: bool, exclusive: bool, thread: bool
    ) -> Worker[None]: ...


class RunLifecycle:
    """Stop, resume, continue, smoke repro and the P2P retry of the monitored run, for the screen that holds it."""

    def __init__(self, host: LifecycleHost):
        self.host = host
        self.relaunching: tuple[str, float] | None = None
        """What the restart after `r`, `m` or `p` is doing and since when (monotonic), until a monitor or refusal
        shows."""
        self.relaunch_timer: Timer | None = None

    def step_text(self) -> str:
        """Where the run is, to follow "Stop run ID": "at step 94/600" or "before its first step"."""
        p, s = self.host.progress or Progress(), self.host.status
        total = p.total or (s.steps if s else None)
        return f"at step {p.step}/{total}" if p.step is not None else "before its first step"

    def stop(self) -> None:
        s = self.host.status
        if s is None or self.host.final:
            self.host.notify("The run has already ended.")
            return
        from gpuwizard.tui.dialogs.modals import Confirm

        if s.state == RunState.STOPPING:
            if not any(e.kind == EventKind.STOP_WAITS_FOR_CHECKPOINT for e in self.host.events):
                self.host.notify("The run is already stopping.")
                return
            asked: str | Callable[[], str] = (
                "Stop at once? The checkpoint being written is lost; a resume starts from an earlier one, if any."
            )
        else:
            grace = stop_grace_s(self.host.run)

            def question() -> str:  # asked again each second: the run goes on while it is open
                return (
                    f"Stop run {self.host.run.run_id} {self.step_text()}? Every process of it is signalled, then "
                    f"killed after {grace:.0f} s; a checkpoint being written is waited for."
                )

            asked = question

        def stop(yes: bool | None) -> None:
            if yes:
                request_stop(self.host.run)
                self.host.notify("Stopping every rank...")

        self.host.app.push_screen(Confirm(asked), stop)

    def replace_run(self, what: str, start: Callable[[], None]) -> None:
        """Every action that stops a running job to start another asks first, as stop does."""
        if self.host.final:
            start()
            return
        from gpuwizard.tui.dialogs.modals import Confirm

        def answer(yes: bool | None) -> None:
            if yes:
                start()

        def question() -> str:  # asked again each second: the run goes on while it is open
            return (
                f"Stop run {self.host.run.run_id} {self.step_text()} and start {what}? "
                "Its progress since the last checkpoint is lost."
            )

        self.host.app.push_screen(Confirm(question), answer)

    def restart(self, smoke: bool, env: list[str], resume: bool = False, steps: int | None = None) -> None:
        if not self.host.final:
            request_stop(self.host.run)
        if steps is not None:
            message = f"Continuing to {steps} steps"
        elif resume:
            message = "Resuming from the last checkpoint"
        elif smoke:
            message = "Starting a smoke repro (50 steps, batch 2)"
        else:
            message = "Restarting with " + " ".join(env)
        self.host.notify(message + "...")
        self.relaunching = (message, time.monotonic())
        self.say_relaunching()
        self.relaunch_timer = self.host.set_interval(1.0, self.say_relaunching)
        self.relaunch(smoke, env, resume, steps)

    def say_relaunching(self) -> None:
        """Until the new run's monitor or a refusal shows: what is being done, for how long (a LeRobot check and start
        take up to two minutes)."""
        if self.relaunching is None:
            return
        what, since = self.relaunching
        box = self.host.query_one("#banner", Static)
        box.update(
            f"{what}: stopping this run, checking the command with the trainer's own parser, then starting the job"
            f"... {time.monotonic() - since:.0f} s"
        )
        box.border_subtitle = ""
        box.display = True

    def relaunch_over(self) -> None:
        self.relaunching = None
        if self.relaunch_timer is not None:
            self.relaunch_timer.stop()
            self.relaunch_timer = None

    def relaunch(self, smoke: bool, env: list[str], resume: bool, steps: int | None) -> None:
        """The new run started off the event loop, once this one has ended; it comes back as RunStarted."""
        work = partial(self.start_when_ended, self.host.run, smoke, env, resume, steps)
        self.host.run_worker(work, group="relaunch", exit_on_error=False, exclusive=True, thread=True)

    def start_when_ended(self, run: RunDir, smoke: bool, env: list[str], resume: bool, steps: int | None) -> None:
        from gpuwizard.core.errors import UserError
        from gpuwizard.runner.launch.start import relaunch

        deadline = time.monotonic() + stop_grace_s(run) + 60  # the forced kill, then a loaded machine
        while not run.status().final:
            if time.monotonic() > deadline:
                self.host.post_message(RunStarted(None, f"Run {run.run_id} has not ended yet; nothing started.", []))
                return
            time.sleep(0.2)
        try:
            started = relaunch(run, smoke=smoke, env=env, resume=resume, steps=steps)
        except UserError as exc:
            self.host.post_message(RunStarted(None, exc.paragraph(), []))
            return
        self.host.post_message(RunStarted(started.path, None, []))

    def run_started(self, message: RunStarted) -> None:
        if self.relaunching is not None and message.error:  # the banner said it was starting: now it says why not
            why = safe_text(f"{self.relaunching[0]}: not started. {message.error}")
            self.host.query_one("#banner", Static).update(why)
        self.relaunch_over()
        if message.error:
            self.host.notify(safe_text(message.error), severity="error", timeout=10, markup=False)
        elif message.run_path is not None:
            self.host.app.open_monitor(RunDir(message.run_path), replace=True)

    def can_continue(self) -> bool:
        if self.host.status is None or self.host.status.state != RunState.FINISHED or self.host.status.smoke:
            return False
        from gpuwizard.trainers.registry import get_trainer

        return get_trainer(self.host.status.trainer).continue_schedule is not None

    def resume(self) -> None:
        s = self.host.status
        if s is None or not self.host.final:
            self.host.notify("The run is still going: stop it first (s), then resume it.", severity="warning")
        elif s.smoke:
            self.host.notify("A smoke run cannot be resumed; start the full run from the wizard.", severity="warning")
        elif s.state == RunState.FINISHED:
            self.offer_continue(s)
        elif self.host.progress is None or self.host.progress.step is None:
            self.host.notify(
                "It trained no step, so there is no checkpoint to resume: w starts it again.", severity="warning"
            )
        else:
            self.restart(smoke=False, env=[], resume=True)

    def offer_continue(self, s: Status) -> None:
        """A finished run is not repeated: it goes on to more steps where the trainer can, or the resume's own
        refusal says why not."""
        from gpuwizard.trainers.registry import get_trainer

        schedule = get_trainer(s.trainer).continue_schedule
        if schedule is None or not self.can_continue():
            self.relaunch(False, [], True, None)  # refused before anything starts, in the CLI's words
            return
        from gpuwizard.model.preset_files import load_preset_file
        from gpuwizard.tui.dialogs.modals import AskText

        steps = load_preset_file(self.host.run.path / "preset.yaml").optim.steps

        def go(text: str | None) -> None:
            if text is None:
                return
            if not text.isdigit() or int(text) <= steps:
                self.host.notify(f"optim.steps must be a whole number above {steps}, not {text!r}.", severity="error")
                return
            self.restart(smoke=False, env=[], resume=True, steps=int(text))

        question = (
            f"Run {self.host.run.run_id} finished all its {s.steps} steps. Continue it to more optim.steps (now "
            f"{steps})? {schedule[0].upper()}{schedule[1:]}."
        )
        self.host.app.push_screen(AskText(question, "optim.steps", str(2 * steps)), go)

    def smoke(self) -> None:
        self.replace_run("a 50-step smoke repro at batch 2", lambda: self.restart(smoke=True, env=[]))

    def retry_p2p(self) -> None:
        if not self.host.p2p_applies():
            why = "NCCL_P2P_DISABLE only matters to NCCL, on CUDA runs of several processes."
            self.host.notify(why, severity="warning")
            return
        self.replace_run(
            "it again from step 0 with NCCL_P2P_DISABLE=1",
            lambda: self.restart(smoke=False, env=["NCCL_P2P_DISABLE=1"]),
        )
