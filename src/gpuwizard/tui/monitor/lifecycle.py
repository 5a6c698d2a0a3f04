"""Stopping, resuming, continuing and restarting the monitored run: every action that stops or replaces a running
job asks first, and a finished run is continued to more steps rather than repeated."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual import work
from textual.timer import Timer
from textual.widgets import Static

from gpuwizard.core.codes import RunState
from gpuwizard.core.safetext import safe_text
from gpuwizard.runner.control.stopping import request_stop
from gpuwizard.runs.records import Event, Job, Progress, RecordError, Status
from gpuwizard.runs.rundir import RunDir
from gpuwizard.tui.base.messages import RunStarted

if TYPE_CHECKING:
    from textual.message import Message

    from gpuwizard.tui.base.apphost import AppHost


class RunLifecycle:
    """Mixed into the monitor screen, whose run, status, progress and events it reads."""

    run: RunDir
    status: Status | None
    progress: Progress | None
    events: list[Event]
    app: AppHost
    notify: Callable[..., None]
    post_message: Callable[[Message], bool]
    p2p_applies: Callable[[], bool]
    query_one: Callable[..., Any]
    set_interval: Callable[..., Timer]
    show_banner: Callable[[], None]
    relaunching: tuple[str, float] | None = None
    """What the restart after `r`, `m` or `p` is doing and since when (monotonic), until a monitor or refusal shows."""
    relaunch_timer: Timer | None = None

    if TYPE_CHECKING:

        @property
        def final(self) -> bool: ...

    def stop_grace_s(self) -> float:
        """How long the supervisor waits before the forced kill (job.json; its default when that cannot be read)."""
        try:
            return self.run.job().stop_grace_s
        except RecordError:
            return Job.model_fields["stop_grace_s"].default

    def step_text(self) -> str:
        """Where the run is, to follow "Stop run ID": "at step 94/600" or "before its first step"."""
        p, s = self.progress or Progress(), self.status
        total = p.total or (s.steps if s else None)
        return f"at step {p.step}/{total}" if p.step is not None else "before its first step"

    def action_stop(self) -> None:
        s = self.status
        if s is None or self.final:
            self.notify("The run has already ended.")
            return
        from gpuwizard.tui.dialogs.modals import Confirm

        if s.state == RunState.STOPPING:
            if not any(e.kind == "stop_waits_for_checkpoint" for e in self.events):
                self.notify("The run is already stopping.")
                return
            question = (
                "Stop at once? The checkpoint being written is lost; a resume starts from an earlier one, if any."
            )
        else:
            question = (
                f"Stop run {self.run.run_id} {self.step_text()}? Every process of it is signalled, then killed "
                f"after {self.stop_grace_s():.0f} s; a checkpoint being written is waited for."
            )

        def stop(yes: bool | None) -> None:
            if yes:
                request_stop(self.run)
                self.notify("Stopping every rank...")

        self.app.push_screen(Confirm(question), stop)

    def replace_run(self, what: str, start: Callable[[], None]) -> None:
        """Every action that stops a running job to start another asks first, as stop does."""
        if self.final:
            start()
            return
        from gpuwizard.tui.dialogs.modals import Confirm

        def answer(yes: bool | None) -> None:
            if yes:
                start()

        question = (
            f"Stop run {self.run.run_id} {self.step_text()} and start {what}? "
            "Its progress since the last checkpoint is lost."
        )
        self.app.push_screen(Confirm(question), answer)

    def restart(self, smoke: bool, env: list[str], resume: bool = False, steps: int | None = None) -> None:
        if not self.final:
            request_stop(self.run)
        if steps is not None:
            message = f"Continuing to {steps} steps"
        elif resume:
            message = "Resuming from the last checkpoint"
        elif smoke:
            message = "Starting a smoke repro (50 steps, batch 2)"
        else:
            message = "Restarting with " + " ".join(env)
        self.notify(message + "...")
        self.relaunching = (message, time.monotonic())
        self.say_relaunching()
        self.relaunch_timer = self.set_interval(1.0, self.say_relaunching)
        self.relaunch(smoke, env, resume, steps)

    def say_relaunching(self) -> None:
        """Until the new run's monitor or a refusal shows: what is being done, for how long (a LeRobot check and start
        take up to two minutes)."""
        if self.relaunching is None:
            return
        what, since = self.relaunching
        box = self.query_one("#banner", Static)
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

    @work(thread=True, exclusive=True, group="relaunch", exit_on_error=False)
    def relaunch(self, smoke: bool, env: list[str], resume: bool, steps: int | None) -> None:
        from gpuwizard.core.errors import UserError
        from gpuwizard.runner.launch.start import relaunch

        deadline = time.monotonic() + self.stop_grace_s() + 60  # the forced kill, then a loaded machine
        while not self.run.status().final:
            if time.monotonic() > deadline:
                self.post_message(RunStarted(None, f"Run {self.run.run_id} has not ended yet; nothing started.", []))
                return
            time.sleep(0.2)
        try:
            run = relaunch(self.run, smoke=smoke, env=env, resume=resume, steps=steps)
        except UserError as exc:
            self.post_message(RunStarted(None, exc.paragraph(), []))
            return
        self.post_message(RunStarted(run.path, None, []))

    def on_run_started(self, message: RunStarted) -> None:
        if self.relaunching is not None and message.error:  # the banner said it was starting: now it says why not
            self.query_one("#banner", Static).update(safe_text(f"{self.relaunching[0]}: not started. {message.error}"))
        self.relaunch_over()
        if message.error:
            self.notify(safe_text(message.error), severity="error", timeout=10, markup=False)
        elif message.run_path is not None:
            self.app.open_monitor(RunDir(message.run_path), replace=True)

    def can_continue(self) -> bool:
        if self.status is None or self.status.state != RunState.FINISHED or self.status.smoke:
            return False
        from gpuwizard.trainers.registry import get_trainer

        return get_trainer(self.status.trainer).continue_schedule is not None

    def action_resume(self) -> None:
        s = self.status
        if s is None or not self.final:
            self.notify("The run is still going: stop it first (s), then resume it.", severity="warning")
        elif s.smoke:
            self.notify("A smoke run cannot be resumed; start the full run from the wizard.", severity="warning")
        elif s.state == RunState.FINISHED:
            self.offer_continue(s)
        elif self.progress is None or self.progress.step is None:
            self.notify(
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

        steps = load_preset_file(self.run.path / "preset.yaml").optim.steps

        def go(text: str | None) -> None:
            if text is None:
                return
            if not text.isdigit() or int(text) <= steps:
                self.notify(f"optim.steps must be a whole number above {steps}, not {text!r}.", severity="error")
                return
            self.restart(smoke=False, env=[], resume=True, steps=int(text))

        question = (
            f"Run {self.run.run_id} finished all its {s.steps} steps. Continue it to more optim.steps (now "
            f"{steps})? {schedule[0].upper()}{schedule[1:]}."
        )
        self.app.push_screen(AskText(question, "optim.steps", str(2 * steps)), go)

    def action_smoke(self) -> None:
        self.replace_run("a 50-step smoke repro at batch 2", lambda: self.restart(smoke=True, env=[]))

    def action_retry_p2p(self) -> None:
        if not self.p2p_applies():
            self.notify("NCCL_P2P_DISABLE only matters to NCCL, on CUDA runs of several processes.", severity="warning")
            return
        self.replace_run(
            "it again from step 0 with NCCL_P2P_DISABLE=1",
            lambda: self.restart(smoke=False, env=["NCCL_P2P_DISABLE=1"]),
        )
