"""The detached process that owns one job: `python -m gpuwizard.runner.supervise.supervisor RUN_DIR`.

It starts the job in its own session, tails the log into the monitor, samples ranks and GPUs,
records events, dumps stacks on a suspected hang, and stops the whole process tree on request
(SIGTERM) or, when asked to, on a hang. It outlives the wizard and a dropped SSH connection.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import ParamSpec, Unpack

from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.core.kinds import EventKind, Severity, StopReason
from gpuwizard.model.settings import notify_settings
from gpuwizard.runner.control.launches import launch_over
from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runner.detect.stalls import STOPPED_STATUSES
from gpuwizard.runner.supervise.jobhost import SupervisedJob
from gpuwizard.runner.supervise.localjob import hold_output_dir, mark_output_dir, output_lock, start_job
from gpuwizard.runner.supervise.notify import Notice, final_notice, hang_notice, start_command, wanted
from gpuwizard.runner.supervise.stacks import dump_stacks
from gpuwizard.runner.supervise.stopstate import StopState
from gpuwizard.runs.events import CheckpointWait, Hang
from gpuwizard.runs.records import Event, ProcessRef, RecordError, Status, StatusUpdate
from gpuwizard.runs.rundir import RunDir
from gpuwizard.runs.tail import Chunk
from gpuwizard.trainers.registry import get_trainer

P = ParamSpec("P")
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
"""Blocked by whoever spawns a supervisor, unblocked once its handlers are in: a stop sent while it still imports is
kept pending, not fatal (a supervisor killed there would leave a 'starting' run that later reads 'lost')."""
RESERVE_BYTES = 256 << 10
"""Written when the supervisor starts, freed when the job has ended: room for the final records on a full disk."""


def disk_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def write_problem(exc: OSError) -> str:
    reason = f"could not write the run folder: {exc.strerror or exc}"
    return f"disk full: {reason}" if disk_full(exc) else reason


class Supervisor:
    """Owns one job (jobhost.SupervisedJob) from its start to its final status; the job sees it as a JobHost."""

    def __init__(self, run: RunDir):
        self.run = run
        self.job_cfg = run.job()
        self.stop = StopState()
        self.dump_requested = False
        self.job_umask = 0o022
        self.failure: str | None = None
        self.disk_full_said: str | None = None
        """The job's own ENOSPC error, the verdict only if the job then fails."""
        self.write_error: str | None = None
        self.folder_id: tuple[int, int] | None = None
        self.lr_mismatch: str | None = None
        """The lr check's finding: a job that exits 0 after it did not train at the planned lr."""

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop.request()

    def request_dump(self, signum: int, frame: FrameType | None) -> None:
        self.dump_requested = True

    def take_dump_request(self) -> bool:
        """A stack dump asked for (SIGUSR1) since the job last looked, taken once."""
        asked, self.dump_requested = self.dump_requested, False
        return asked

    def fail(self, why: str | None) -> bool:
        """The reason the run failed, unless one is known already: True when `why` is the one shown."""
        if self.failure or not why:
            return False
        self.failure = why
        return True

    def persist(self, write: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> None:
        """A write to the run folder that must not kill the supervisor (a full disk): the job stays watched, and the
        first failure is kept as the reason shown when the run ends."""
        try:
            write(*args, **kwargs)
        except OSError as exc:
            self.write_error = self.write_error or write_problem(exc)

    def set_status(self, **fields: Unpack[StatusUpdate]) -> None:
        """A status change while the job runs: a full disk or a vanished folder never kills the supervisor."""
        try:
            self.persist(self.run.update_status, **fields)
        except RecordError as exc:
            self.write_error = self.write_error or f"could not read the run's status: {exc}"

    def folder_gone(self) -> bool:
        """The run folder was deleted (or replaced): nobody could follow or stop the job through it any more."""
        if self.folder_id is None:
            return False  # not started yet
        try:
            st = os.stat(self.run.path)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return (st.st_dev, st.st_ino) != self.folder_id

    def reserve_space(self) -> None:
        try:
            with open(self.run.space_reserve, "wb") as fh:
                fh.write(bytes(RESERVE_BYTES))
                fh.flush()
                os.fsync(fh.fileno())
        except OSError:
            self.release_space()

    def release_space(self) -> None:
        with contextlib.suppress(OSError):
            self.run.space_reserve.unlink(missing_ok=True)

    def ingest(self, monitor: JobMonitor, chunk: Chunk) -> None:
        """New log text into the monitor: its events, and the losses it read as metrics.jsonl lines."""
        self.record(monitor.feed_text(chunk.text, chunk.line_count, bar=chunk.bar))
        self.stop.checkpoint_began(monitor.checkpoint_started, self.saved_checkpoint)
        metrics = monitor.take_metrics()
        if metrics:
            self.persist(self.run.append_lines, self.run.metrics_file, metrics)

    def record(self, events: list[Event]) -> None:
        for event in events:
            self.persist(self.run.append_line, self.run.events_file, event)
            if event.kind == EventKind.LOSS_NONFINITE:
                self.stop.stop_for(StopReason.DIVERGED)
                self.failure = event.title
            elif event.kind == EventKind.DISK_FULL:
                self.disk_full_said = self.disk_full_said or event.detail
            elif event.kind == EventKind.LR_MISMATCH:
                self.lr_mismatch = self.lr_mismatch or event.title

    def full_disk(self) -> str | None:
        """A failed job whose run folder or output folder has no room left (the reserve still held) failed on it,
        whatever its log says (torch.save's own message names no errno); else one whose own error said ENOSPC (its
        checkpoint disk may be another). A job that exited 0 is never called disk full, whatever it printed."""
        for label, folder in (("the run folder", self.run.path), ("output_dir", self.job_cfg.output_dir)):
            try:
                fs = os.statvfs(folder) if folder else None
            except OSError:
                continue
            if fs is not None and fs.f_bavail * fs.f_frsize < RESERVE_BYTES:
                return f"disk full: no space left on the disk of {label} ({folder}) when the job failed"
        return f"disk full: {self.disk_full_said}" if self.disk_full_said else None

    def tell(self, notice: Notice) -> None:
        """settings.notify.command, once per ending or hang, whoever is attached (terminals ring on their own)."""
        settings = notify_settings()
        if settings.command and wanted(notice, settings):
            failure = start_command(settings.command, notice)
            if failure:
                print(failure, file=sys.stderr, flush=True)  # supervisor.log

    def saved_checkpoint(self) -> str | None:
        output = self.job_cfg.output_dir
        return get_trainer(self.job_cfg.trainer).saved_checkpoint(Path(output)) if output else None

    def waits_for_checkpoint(self, monitor: JobMonitor, now: float) -> bool:
        """A stop the user asked for while a checkpoint is being written waits for the write to finish, at most the
        hang detector's allowance for one: stopped mid-write, it would leave a step folder nothing resumes from. A
        second stop does not wait."""
        started = monitor.checkpoint_started
        if started is None or not self.stop.may_wait():
            return False
        if get_trainer(self.job_cfg.trainer).checkpoint_parts and self.saved_checkpoint() != self.stop.linked_before:
            return False  # `last` moved on: the write is complete
        limit = monitor.checkpoint_allowance()
        if now - started >= limit:
            return False
        if self.stop.first_wait():
            self.set_status(state=RunState.STOPPING, stop_reason=self.stop.reason)
            self.record(
                [
                    Event(
                        kind=EventKind.STOP_WAITS_FOR_CHECKPOINT,
                        severity=Severity.WARNING,
                        title="the stop waits for the checkpoint being written",
                        detail="Stopped mid-write, the run would have no checkpoint to resume from.",
                        suggestion="Stop again to stop at once (s in the monitor, Ctrl-C in a headless run, `gpuwizard "
                        "stop`); this checkpoint is then lost.",
                        data=CheckpointWait(started_t=time.time() - (now - started), limit_s=limit).data(),  # wall time
                    )
                ]
            )
        return True

    def handle_hang(self, monitor: JobMonitor, event: Event) -> None:
        if self.folder_gone():
            return  # dumping stacks would make the folder again; the loop stops the job
        report = dump_stacks(monitor.last_ranks, self.run.stacks_dir)
        hang = Hang.of(event)
        if hang is not None:
            event.data = hang.model_copy(update={"stacks": report}).data()
        stopped = [r.rank for r in monitor.last_ranks if r.alive and r.status in STOPPED_STATUSES]
        suspect: int | None
        if stopped:
            suspect = stopped[0]  # not running at all: whatever the other stacks say
        elif report.ok and len(report.unreadable) == 1:
            suspect = report.unreadable[0]
        elif report.ok and len(report.outside_collective) == 1:
            suspect = report.outside_collective[0]
        else:
            suspect = event.rank
        if suspect != event.rank:
            event.rank = suspect
            event.suggestion = monitor.suggestion(event.rank, hang)
        event.detail += f" Stacks: {report.note}."
        self.record([event])
        self.tell(hang_notice(self.run.run_id, event, str(self.run.path)))
        if self.job_cfg.on_hang == "stop":
            self.stop.stop_for(StopReason.HANG)  # a stop the user asked for stays the user's

    def run_forever(self) -> int:
        self.job_umask = os.umask(0o077)  # what the supervisor writes is private; the job keeps the user's umask
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, self.request_dump)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # a stop sent while it started is handled now
        st = os.stat(self.run.path)
        self.folder_id = (st.st_dev, st.st_ino)
        self.run.update_status(supervisor=ProcessRef.of(os.getpid()), state=RunState.STARTING)
        launch_over(self.run)
        self.reserve_space()
        if self.job_cfg.scheduler == "slurm":
            from gpuwizard.runner.supervise.slurmjob import slurm_job

            self.mark_cluster_output()
            submitted = slurm_job(self)
            return int(ExitCode.NOT_STARTED) if submitted is None else self.follow(submitted)
        if self.stop.reason:
            return self.stopped_before_start()
        lock = output_lock(self)
        if not hold_output_dir(self, lock):
            return self.end_unstarted()
        if self.stop.reason:
            return self.stopped_before_start()
        started = start_job(self, lock, self.job_umask)
        return self.end_unstarted() if started is None else self.follow(started)

    def follow(self, job: SupervisedJob) -> int:
        """The job followed one pass at a time until it has ended, then its final record."""
        while job.tick():
            time.sleep(job.pause_s)
        return job.end()

    def mark_cluster_output(self) -> None:
        """A SLURM job's output folder is marked from here where this machine sees it (a shared file system); no
        folder is made for it here."""
        output = self.job_cfg.output_dir
        if output and Path(output).parent.is_dir():
            with contextlib.suppress(OSError):
                mark_output_dir(self)

    def stopped_before_start(self) -> int:
        """Stopped while it was still starting: the job never ran, and the status says so (not 'lost' later)."""
        self.write_final(
            state=RunState.STOPPED,
            exit_code=int(ExitCode.STOPPED),
            ended=time.time(),
            stop_reason=self.stop.reason,
            error="stopped before the job started",
        )
        return int(ExitCode.STOPPED)

    def end_unstarted(self) -> int:
        """The job could not start (the status already says why)."""
        self.release_space()
        return int(ExitCode.NOT_STARTED)

    def finish(self, rc: int, survivors: list[int]) -> int:
        """The final status from the job's exit code and the stop reason, then the notice the user asked for."""
        job_exit = rc if rc >= 0 else 128 - rc
        code: int
        if self.stop.reason == StopReason.HANG:
            state, code = RunState.HUNG, ExitCode.HANG
        elif self.stop.reason == StopReason.USER:
            state, code = RunState.STOPPED, ExitCode.STOPPED
        elif self.stop.reason == StopReason.DIVERGED:
            state, code = RunState.FAILED, ExitCode.FAILED
        elif rc == 0 and self.lr_mismatch:  # every step ran, at another lr than planned: not a green run
            state, code = RunState.FAILED, ExitCode.FAILED
            self.failure = self.failure or f"{self.lr_mismatch} (the job itself exited 0)"
        elif rc == 0:
            state, code = RunState.FINISHED, ExitCode.OK
        else:
            state, code = RunState.FAILED, job_exit
        final = self.write_final(
            state=state, exit_code=int(code), job_exit_code=job_exit, ended=time.time(), survivors=survivors
        )
        if final is not None:
            self.tell(final_notice(final, str(self.run.path)))
        return int(code)

    def write_final(self, **fields: Unpack[StatusUpdate]) -> Status | None:
        """The final status, whatever the disk: the reserved room is free by now; failing that, status.json is
        rewritten in the blocks it already has. The first write failure is the reason shown."""
        self.release_space()
        for in_place in (False, True):
            reason = self.failure or self.write_error
            update = StatusUpdate(**fields)
            if reason and "error" not in fields:
                update["error"] = reason
            try:
                return self.run.update_status(in_place=in_place, **update)
            except OSError as exc:
                self.write_error = self.write_error or write_problem(exc)
            except RecordError as exc:
                self.write_error = self.write_error or f"could not read the run's status: {exc}"
                break
        print(f"gpuwizard: the final status of {self.run.path} was not written: {self.write_error}", file=sys.stderr)
        return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    run = RunDir(Path(args[0]))
    try:
        return Supervisor(run).run_forever()
    except Exception as exc:
        import traceback

        try:
            traceback.print_exc()
        except OSError:
            pass  # supervisor.log is on the full disk too
        try:
            job_id = run.status().slurm_job_id
            if job_id:
                from gpuwizard.runner.host.slurm import cancel

                cancel(job_id)  # nothing left in the queue without anyone following it
            run.update_status(
                in_place=True,
                state=RunState.FAILED,
                exit_code=int(ExitCode.FAILED),
                error=f"supervisor: {type(exc).__name__}: {exc}",
                ended=time.time(),
            )
        except Exception:
            pass
        return int(ExitCode.FAILED)


if __name__ == "__main__":
    raise SystemExit(main())
