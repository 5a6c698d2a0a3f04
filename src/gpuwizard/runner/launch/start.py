"""Starting a prepared run: its folder published, its supervisor detached in a new session, a start cut short
undone."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.core.errors import UserError, problem
from gpuwizard.core.kinds import StopReason
from gpuwizard.runner.control.launches import announce_launch, clear_interrupted_launches, withdraw_launch
from gpuwizard.runner.host.interrupt import StartCancelled
from gpuwizard.runner.host.targets import SUPERVISOR
from gpuwizard.runner.launch.prepare import PreparedRun, prepare_run, restore_secrets
from gpuwizard.runner.launch.staging import SBATCH_SCRIPT, write_run_folder
from gpuwizard.runs.records import RecordError
from gpuwizard.runs.rundir import RunDir, new_run_dir, publish


def start_run(
    prepared: PreparedRun,
    on_hang: Literal["report", "stop"] = "report",
    wait_s: float = 120.0,
    *,
    cancelled: Callable[[], bool] | None = None,
    on_launched: Callable[[RunDir], None] | None = None,
    submit: Callable[[RunDir, dict[str, str]], None] | None = None,
) -> RunDir:
    """Write the run folder and start its supervisor in a new session; returns once the job is launched.

    Interrupted anywhere on the way (Ctrl-C, StartCancelled, `cancelled()` turning true between its steps), it leaves
    no half-made folder, no process and no run that still says 'starting': the run ends as stopped before it returns.
    A start that fails ends as failed. `on_launched(run)` is called once the job is launched, still inside that
    guard: an interrupt after it is for the run, no longer for its start. `submit(run, secrets)` hands a SLURM run
    to the cluster (default: sbatch its own script; a sweep's run joins its job array)."""
    clear_interrupted_launches()
    started = StartUp()

    def go_on() -> None:
        if cancelled is not None and cancelled():
            raise StartCancelled("cancelled before the job started")

    try:
        with held_signals():
            started.announced = announce_launch()
            started.run, started.stage = run, stage = new_run_dir(prepared.preset.name)
        secret_env = write_run_folder(prepared, on_hang, run, stage)
        go_on()
        with held_signals():
            publish(stage, run)
            started.published = True
        if prepared.preset.launch.scheduler == "slurm":
            (submit or submit_to_slurm)(run, secret_env)
        go_on()
        from gpuwizard.runner.supervise.supervisor import STOP_SIGNALS

        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # the child starts with them blocked, and a
        try:  # Ctrl-C meanwhile is raised only once the supervisor is known here (so abandon stops it)
            started.supervisor = spawn_supervisor(run, secret_env)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        wait_until_launched(run, started.supervisor, wait_s, go_on)
        if on_launched is not None:
            on_launched(run)
        withdraw_launch(started.announced)
        return run
    except BaseException as exc:
        started.abandon(exc)
        if isinstance(exc, StartCancelled):
            exc.recorded = started.run if started.published else None
        if isinstance(exc, OSError) and not started.published:
            where = f"write the run folder {started.run.path}" if started.run else "create the run folder"
            raise UserError(
                problem(None, f"cannot {where}: {exc.strerror or exc}", "free disk space or set GPUWIZARD_DATA_DIR")
            ) from None
        raise


def spawn_supervisor(run: RunDir, secret_env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The supervisor, in its own session (called with its stop signals blocked: it keeps them so until its handlers
    are in, see supervisor.STOP_SIGNALS); it and every process of its job carry the run marker. One that cannot be
    started (the interpreter cannot be executed, no memory for it) is one paragraph."""
    from gpuwizard.runner.host.procs import MARKER, marker_value

    env = {**os.environ, **secret_env, MARKER: marker_value(run.path)}  # secrets by environment, never the folder
    log_fd = os.open(run.path / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", SUPERVISOR, str(run.path)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserError(
            problem(
                None,
                f"the run's supervisor could not be started ({sys.executable}: {reason}); run {run.run_id} is "
                "recorded as failed and its job never ran",
                f"check that {sys.executable} exists and can be executed (a removed or replaced virtual environment "
                "does this), then run again",
            )
        ) from None
    finally:
        os.close(log_fd)


HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@contextlib.contextmanager
def held_signals() -> Iterator[None]:
    """SIGINT and SIGTERM wait for the end of the block: a step of the start and the note that it was taken are
    never parted by an interrupt (which abandon would then undo by half)."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


ABANDON_WAIT_S = 30.0
"""How long an interrupted start waits for its supervisor to record the stop (the job's stop grace is 10 s)."""


@dataclass
class StartUp:
    """How far start_run got, so an interrupt anywhere undoes exactly that much."""

    announced: Path | None = None
    run: RunDir | None = None
    stage: RunDir | None = None
    published: bool = False
    supervisor: subprocess.Popen[bytes] | None = None

    def abandon(self, cause: BaseException) -> None:
        """Undo a start cut short; a second Ctrl-C meanwhile does not leave it half done. An interrupted start ends
        as stopped, a failed one as failed, each with the reason."""
        if isinstance(cause, StartCancelled):
            why, interrupted = cause.why, True
        elif isinstance(cause, KeyboardInterrupt):
            why, interrupted = "interrupted before the job started", True
        elif isinstance(cause, UserError):
            why, interrupted = cause.paragraph(), False
        else:
            why, interrupted = f"the start failed: {type(cause).__name__}: {cause}", False
        while True:
            try:
                self._abandon(why, interrupted)
                return
            except KeyboardInterrupt:
                continue

    def _abandon(self, why: str, interrupted: bool) -> None:
        try:
            self._undo(why, interrupted)
        finally:
            withdraw_launch(self.announced)

    def _undo(self, why: str, interrupted: bool) -> None:
        if self.run is None or self.stage is None:
            return  # new_run_dir cleans up after itself
        shutil.rmtree(self.stage.path, ignore_errors=True)
        if not self.published:
            with contextlib.suppress(OSError):
                self.run.path.rmdir()
            return
        if self.supervisor is not None:
            self.supervisor.terminate()  # kept pending until its handlers are in; it then ends the run itself
            deadline = time.monotonic() + ABANDON_WAIT_S
            while self.supervisor.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        if self.supervisor is None or self.supervisor.poll() is None:
            from gpuwizard.runner.control.stopping import stop_all

            # a supervisor that did not end in time, or one spawned before the interrupt could record it here: what
            # carries the run's marker is ended from here, so nothing trains on under a run recorded as stopped
            stop_all(self.run.path)
        try:
            status = self.run.status()
        except RecordError:
            return  # the folder went with a refused submission
        if status.final:
            return
        if status.slurm_job_id:
            from gpuwizard.runner.host.slurm import cancel

            cancel(status.slurm_job_id)
        with contextlib.suppress(OSError, RecordError):
            if interrupted:
                self.run.update_status(
                    state=RunState.STOPPED,
                    exit_code=int(ExitCode.STOPPED),
                    stop_reason=StopReason.USER,
                    ended=time.time(),
                    error=why,
                )
            else:
                self.run.update_status(
                    state=RunState.FAILED, exit_code=int(ExitCode.NOT_STARTED), ended=time.time(), error=why
                )


def submit_to_slurm(run: RunDir, secrets: dict[str, str]) -> None:
    """sbatch the run's script from here (the submitting host, with the user's environment and the run's secrets);
    a refusal is sbatch's own message in one paragraph, and the run folder goes away with it."""
    from gpuwizard.runner.host.slurm import refused, submit

    job_id, message = submit(str(run.path / SBATCH_SCRIPT), secrets)
    if job_id is None:
        shutil.rmtree(run.path, ignore_errors=True)
        raise refused(message, "the job", "run again")
    run.update_status(slurm_job_id=job_id, slurm_state="PENDING")


def wait_until_launched(
    run: RunDir, supervisor: subprocess.Popen[bytes], wait_s: float, go_on: Callable[[], None] | None = None
) -> None:
    """Watch the supervisor process itself until it has launched the job (or ended); a slow start is not a lost one.
    `go_on()` is called on each look (it raises to cut the start short)."""
    deadline = time.monotonic() + wait_s
    while (status := run.status()).state == RunState.STARTING and status.slurm_state is None:
        if supervisor.poll() is not None:
            if run.status().state == RunState.STARTING:  # it died before it could say so itself
                run.update_status(
                    state=RunState.FAILED,
                    exit_code=int(ExitCode.FAILED),
                    ended=time.time(),
                    error=f"the supervisor exited with code {supervisor.returncode} before starting the job; see "
                    f"{run.path / 'supervisor.log'}",
                )
            return
        if time.monotonic() > deadline:
            supervisor.terminate()
            raise UserError(
                problem(
                    None,
                    f"the run's supervisor did not start the job within {wait_s:.0f} s",
                    f"see {run.path / 'supervisor.log'}",
                )
            )
        if go_on is not None:
            go_on()
        time.sleep(0.05)


def relaunch(
    run: RunDir, smoke: bool = False, env: list[str] | None = None, resume: bool = False, steps: int | None = None
) -> RunDir:
    """Start a run again from its folder's preset (secrets restored): a smoke repro, a retry with more environment,
    or a resume from its last checkpoint linked to it (to `steps` optim.steps: a finished run continued); UserError
    when that cannot start."""
    from gpuwizard.model.preset import with_field
    from gpuwizard.model.preset_files import load_preset_file

    preset = restore_secrets(load_preset_file(run.path / "preset.yaml"))
    if steps is not None:
        preset = with_field(preset, "optim.steps", steps)
    prepared = prepare_run(preset, smoke=smoke, env=env, resume=resume, resume_run=run.run_id if resume else None)
    return start_run(prepared, on_hang="report")
