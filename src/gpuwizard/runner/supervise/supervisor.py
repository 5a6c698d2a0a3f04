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
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.model.settings import notify_settings
from gpuwizard.runner.control.launches import launch_over
from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runner.detect.stalls import STOPPED_STATUSES
from gpuwizard.runner.host.cgroup import JobCgroup
from gpuwizard.runner.host.locks import OutputLock
from gpuwizard.runner.supervise.localjob import TICK_S, follow_local, hold_output_dir, mark_output_dir, start_job
from gpuwizard.runner.supervise.notify import Notice, final_notice, hang_notice, start_command, wanted
from gpuwizard.runner.supervise.stacks import dump_stacks
from gpuwizard.runs.records import Event, GpuSample, ProcessRef, RecordError, Status
from gpuwizard.runs.rundir import RunDir
from gpuwizard.runs.tail import Chunk
from gpuwizard.trainers.registry import get_trainer

if TYPE_CHECKING:
    from gpuwizard.gpus.sampler import GpuSampler

GPU_SAMPLE_MAX_AGE_S = 3 * TICK_S
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
    def __init__(self, run: RunDir):
        self.run = run
        self.job_cfg = run.job()
        self.stop_reason: str | None = None
        self.stop_requests = 0
        self.checkpoint_seen: float | None = None
        self.linked_before: str | None = None
        """What `checkpoints/last` named when the current checkpoint write began."""
        self.stop_wait_shown = False
        self.dump_requested = False
        self.job: subprocess.Popen[bytes] | None = None
        self.gpu_sampler: GpuSampler | None = None
        self.run_pids: set[int] = set()
        self.lost_gpus: set[int] = set()
        self.job_umask = 0o022
        self.failure: str | None = None
        self.disk_full_said: str | None = None
        """The job's own ENOSPC error, the verdict only if the job then fails."""
        self.output_lock: OutputLock | None = None
        self.write_error: str | None = None
        self.cgroup: JobCgroup | None = None
        self.folder_id: tuple[int, int] | None = None
        self.gpu_seen: dict[int, float] = {}
        self.lr_mismatch: str | None = None
        """The lr check's finding: a job that exits 0 after it did not train at the planned lr."""

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requests += 1  # a second one does not wait for a checkpoint write
        self.stop_reason = self.stop_reason or "user"

    def request_dump(self, signum: int, frame: FrameType | None) -> None:
        self.dump_requested = True

    def persist(self, write: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        """A write to the run folder that must not kill the supervisor (a full disk): the job stays watched, and the
        first failure is kept as the reason shown when the run ends."""
        try:
            write(*args, **kwargs)
        except OSError as exc:
            self.write_error = self.write_error or write_problem(exc)

    def set_status(self, **fields: Any) -> None:
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
        if monitor.checkpoint_started is not None and monitor.checkpoint_started != self.checkpoint_seen:
            self.checkpoint_seen = monitor.checkpoint_started
            self.linked_before = self.saved_checkpoint()
        metrics = monitor.take_metrics()
        if metrics:
            self.persist(self.run.append_lines, self.run.metrics_file, metrics)

    def record(self, events: list[Event]) -> None:
        for event in events:
            self.persist(self.run.append_line, self.run.events_file, event)
            if event.kind == "loss_nonfinite":
                self.stop_reason = self.stop_reason or "diverged"
                self.failure = event.title
            elif event.kind == "disk_full":
                self.disk_full_said = self.disk_full_said or event.detail
            elif event.kind == "lr_mismatch":
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

    def write_gpu_samples(self, samples: list[GpuSample]) -> None:
        """Called on the sampler thread, which alone writes gpu.jsonl."""
        seen = time.monotonic()
        for sample in samples:
            self.gpu_seen[sample.index] = seen
            self.persist(self.run.append_line, self.run.gpu_file, sample)

    def gpu_samples(self, mono: float) -> list[GpuSample]:
        """The sampler thread's fresh samples (a stuck NVML call never stalls the log); a lost device is one event."""
        if self.gpu_sampler is None:
            return []
        samples = [
            s for s in self.gpu_sampler.latest() if mono - self.gpu_seen.get(s.index, -1e9) <= GPU_SAMPLE_MAX_AGE_S
        ]
        for s in samples:
            if s.lost and s.index not in self.lost_gpus:
                self.lost_gpus.add(s.index)
                self.record(
                    [
                        Event(
                            kind="gpu_lost",
                            severity="error",
                            title=f"GPU {s.index} fell off the bus",
                            detail="NVML reports the device as lost (Xid 79 class); the job cannot continue on it.",
                            suggestion="Check `dmesg` for Xid errors, reseat or reset the GPU, then retry on the other "
                            "devices.",
                        )
                    ]
                )
        return samples

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
        if self.stop_reason != "user" or self.stop_requests > 1 or started is None:
            return False
        if get_trainer(self.job_cfg.trainer).checkpoint_parts and self.saved_checkpoint() != self.linked_before:
            return False  # `last` moved on: the write is complete
        limit = monitor.checkpoint_allowance()
        if now - started >= limit:
            return False
        if not self.stop_wait_shown:
            self.stop_wait_shown = True
            self.set_status(state=RunState.STOPPING, stop_reason=self.stop_reason)
            self.record(
                [
                    Event(
                        kind="stop_waits_for_checkpoint",
                        severity="warning",
                        title="the stop waits for the checkpoint being written",
                        detail="Stopped mid-write, the run would have no checkpoint to resume from.",
                        suggestion="Stop again to stop at once (s in the monitor, Ctrl-C in a headless run, `gpuwizard "
                        "stop`); this checkpoint is then lost.",
                        data={"started_t": time.time() - (now - started), "limit_s": limit},  # wall time, for readers
                    )
                ]
            )
        return True

    def handle_hang(self, monitor: JobMonitor, event: Event) -> None:
        if self.folder_gone():
            return  # dumping stacks would make the folder again; the loop stops the job
        report = dump_stacks(monitor.last_ranks, self.run.stacks_dir)
        event.data["stacks"] = report.to_json()
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
            event.suggestion = monitor.suggestion(event.rank, event.data)
        event.detail += f" Stacks: {report.note}."
        self.record([event])
        self.tell(hang_notice(self.run.run_id, event, str(self.run.path)))
        if self.job_cfg.on_hang == "stop":
            self.stop_reason = self.stop_reason or "hang"  # a stop the user asked for stays the user's

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
            from gpuwizard.runner.supervise.slurmjob import follow_slurm

            self.mark_cluster_output()
            return follow_slurm(self)
        if self.stop_reason:
            return self.stopped_before_start()
        if not hold_output_dir(self):
            return self.end_unstarted()
        if self.stop_reason:
            return self.stopped_before_start()
        if not start_job(self):
            return self.end_unstarted()
        return follow_local(self)

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
            stop_reason=self.stop_reason,
            error="stopped before the job started",
        )
        return int(ExitCode.STOPPED)

    def end_unstarted(self) -> int:
        """The job could not start (the status already says why)."""
        self.release_space()
        return int(ExitCode.NOT_STARTED)

    def end_without_folder(self, survivors: list[int]) -> int:
        """The run folder was deleted: the job is stopped, and there is nowhere left to record it."""
        if self.output_lock is not None and not survivors:
            self.output_lock.release()
        left = f"; processes left: {survivors}" if survivors else "; nothing of it is left"
        print(f"gpuwizard: the run folder {self.run.path} was deleted: the job was stopped{left}", file=sys.stderr)
        return int(ExitCode.STOPPED)

    def finish(self, rc: int, survivors: list[int]) -> int:
        job_exit = rc if rc >= 0 else 128 - rc
        code: int
        if self.stop_reason == "hang":
            state, code = RunState.HUNG, ExitCode.HANG
        elif self.stop_reason == "user":
            state, code = RunState.STOPPED, ExitCode.STOPPED
        elif self.stop_reason == "diverged":
            state, code = RunState.FAILED, ExitCode.FAILED
        elif rc == 0 and self.lr_mismatch:  # every step ran, at another lr than planned: not a green run
            state, code = RunState.FAILED, ExitCode.FAILED
            self.failure = self.failure or f"{self.lr_mismatch} (the job itself exited 0)"
        elif rc == 0:
            state, code = RunState.FINISHED, ExitCode.OK
        else:
            state, code = RunState.FAILED, job_exit
        if self.cgroup is not None and not survivors:
            self.cgroup.remove()
        if self.output_lock is not None and not survivors:
            self.output_lock.release()  # before the final status: whoever waits on it may start the next run at once
        final = self.write_final(
            state=state, exit_code=int(code), job_exit_code=job_exit, ended=time.time(), survivors=survivors
        )
        if final is not None:
            self.tell(final_notice(final, str(self.run.path)))
        return int(code)

    def write_final(self, **fields: Any) -> Status | None:
        """The final status, whatever the disk: the reserved room is free by now; failing that, status.json is
        rewritten in the blocks it already has. The first write failure is the reason shown."""
        self.release_space()
        for in_place in (False, True):
            reason = self.failure or self.write_error
            extra = {"error": reason} if reason and "error" not in fields else {}
            try:
                return self.run.update_status(in_place=in_place, **fields, **extra)
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
