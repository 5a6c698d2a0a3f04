"""What the supervisor does for a job `run` submitted with sbatch: it follows the SLURM job instead of a process tree
(queued with squeue's reason, running while the log streams into the run folder from sbatch --output, ended with
scontrol's state and exit code); a stop is scancel."""

from __future__ import annotations

import time

from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.core.kinds import EventKind, Severity, StopReason
from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runner.host import slurm
from gpuwizard.runner.supervise.jobhost import JobHost
from gpuwizard.runner.supervise.outputpump import OutputPump
from gpuwizard.runs.records import Event
from gpuwizard.trainers.registry import get_trainer

LOG_POLL_S = 0.1
QUEUED_POLL_S = 1.0
RUNNING_POLL_S = 5.0
"""squeue once in this many seconds while the job trains (the log carries the progress); every QUEUED_POLL_S while
it is queued or once its log says training finished."""
PROGRESS_WRITE_S = 0.5


def slurm_job(host: JobHost) -> SlurmJob | None:
    """The SLURM job `run` submitted; None, with the status saying why, when no job id was recorded."""
    job_id = host.run.status().slurm_job_id
    if job_id is None:
        host.run.update_status(
            state=RunState.FAILED,
            exit_code=int(ExitCode.NOT_STARTED),
            ended=time.time(),
            error="no SLURM job id was recorded for this run",
        )
        return None
    return SlurmJob(host, job_id)


class SlurmJob:
    """One SLURM job, owned by the supervisor: `tick` is one pass of following it, `end` its final record."""

    pause_s = LOG_POLL_S

    def __init__(self, host: JobHost, job_id: str):
        self.host, self.cfg, self.job_id = host, host.job_cfg, job_id
        self.monitor = JobMonitor(self.cfg.expect, get_trainer(self.cfg.trainer))
        self.pump = OutputPump(host.run.log)
        self.submitted = time.monotonic()
        self.queue_limit = self.cfg.expect.first_step_timeout_s or self.cfg.expect.hang_timeout_s
        self.shown: tuple[str, str | None] | None = None
        self.long_wait_reported = self.running = False
        self.state: slurm.JobState | None = None
        self.last_poll = self.last_progress = -float("inf")

    def tick(self) -> bool:
        """One pass: squeue when due, the log, the monitor's events once it runs, progress, a stop; False once the job
        has ended or been cancelled."""
        host, monitor = self.host, self.monitor
        now = time.monotonic()
        slow = self.running and not monitor.progress.finished
        if now - self.last_poll >= (RUNNING_POLL_S if slow else QUEUED_POLL_S):
            self.last_poll = now
            if self.look(now):
                return False
        self.pump.pump(host, monitor)
        if self.running:
            for event in monitor.tick(now, [], None):
                host.record([event])
                if event.kind == EventKind.HANG_SUSPECTED and self.cfg.on_hang == "stop":
                    host.stop.stop_for(StopReason.HANG)
        if now - self.last_progress >= PROGRESS_WRITE_S:
            self.last_progress = now
            host.persist(host.run.write, "progress.json", monitor.progress)
        if host.stop.reason:
            self.cancel()
            return False
        return True

    def look(self, now: float) -> bool:
        """squeue's state and reason into the status (a wait said once, and once more when long); True once ended."""
        host, job_id = self.host, self.job_id
        state = self.state = slurm.job_state(job_id) or self.state
        if state is None:
            return False
        if (state.state, state.reason) != self.shown:
            self.shown = (state.state, state.reason)
            host.persist(host.run.update_status, slurm_state=state.state, slurm_reason=state.reason)
            if state.queued and state.reason:
                host.record([slurm_queued_event(job_id, state.reason, now - self.submitted, long_wait=False)])
        if state.queued and not self.long_wait_reported and now - self.submitted > self.queue_limit:
            self.long_wait_reported = True
            host.record([slurm_queued_event(job_id, state.reason, now - self.submitted, long_wait=True)])
        if not state.queued and not self.running:
            self.running = True
            self.monitor.restart_clock(now)  # the clocks start when it runs
            host.set_status(state=RunState.RUNNING, started=time.time())
        return state.ended

    def cancel(self) -> None:
        """scancel, then wait for SLURM to end the job: the grace the job asked for and a minute more."""
        self.host.set_status(state=RunState.STOPPING, stop_reason=self.host.stop.reason)
        slurm.cancel(self.job_id)
        deadline = time.monotonic() + self.cfg.stop_grace_s + 60
        while time.monotonic() < deadline:
            self.state = slurm.job_state(self.job_id) or self.state
            if self.state is None or self.state.ended:
                break
            time.sleep(0.5)

    def end(self) -> int:
        """The rest of the log, then the job's final state and exit code from SLURM into the final status."""
        host = self.host
        time.sleep(LOG_POLL_S)
        self.pump.drain(host, self.monitor)
        self.pump.close()
        host.release_space()
        host.persist(host.run.write, "progress.json", self.monitor.progress)
        final = slurm.job_state(self.job_id) or self.state
        if final is None:
            return host.finish(1, [])
        if final.state == "CANCELLED":
            host.stop.stop_for(StopReason.USER)  # scancel from outside is a stop too
        host.persist(host.run.update_status, slurm_state=final.state, slurm_reason=final.reason)
        rc = final.exit_code if final.exit_code is not None else 1
        why = f"SLURM job {self.job_id} ended {final.state}" + (f" ({final.reason})" if final.reason else "")
        if final.state not in ("COMPLETED", "CANCELLED") and host.fail(why):
            rc = rc or 1
        return host.finish(rc, [])


def slurm_queued_event(job_id: str, reason: str | None, waited_s: float, long_wait: bool) -> Event:
    why = reason or "no reason given yet"
    if long_wait:
        return Event(
            kind=EventKind.SLURM_PENDING_LONG,
            severity=Severity.WARNING,
            title=f"SLURM job {job_id} still queued after {waited_s:.0f} s: {why}",
            detail=f"{why}: {slurm.pending_advice(reason)}.",
            suggestion="Wait, ask for fewer nodes or GPUs or a shorter time, or pick another partition "
            "(slurm.partition); `s` (or `gpuwizard stop`) cancels it.",
            data={"job_id": job_id, "reason": reason, "waited_s": round(waited_s, 1)},
        )
    return Event(
        kind=EventKind.SLURM_PENDING,
        severity=Severity.INFO,
        title=f"SLURM job {job_id} queued: {why}",
        detail=f"{why}: {slurm.pending_advice(reason)}.",
        data={"job_id": job_id, "reason": reason},
    )
