"""The supervisor's loop for a job `run` submitted with sbatch: it follows the SLURM job instead of a process tree."""

from __future__ import annotations

import time

from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.runner.detect.detectors import JobMonitor
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


def follow_slurm(sup: JobHost) -> int:
    """Follow the SLURM job `run` submitted: queued (with squeue's reason), running (the log streams into the run
    folder from sbatch --output), ended (state and exit code from scontrol). Stop is scancel."""
    from gpuwizard.runner.host import slurm

    job_id = sup.run.status().slurm_job_id
    if job_id is None:
        sup.run.update_status(
            state=RunState.FAILED,
            exit_code=int(ExitCode.NOT_STARTED),
            ended=time.time(),
            error="no SLURM job id was recorded for this run",
        )
        return int(ExitCode.NOT_STARTED)
    monitor = JobMonitor(sup.job_cfg.expect, get_trainer(sup.job_cfg.trainer))
    pump = OutputPump(sup.run.log)
    submitted = time.monotonic()
    queue_limit = sup.job_cfg.expect.first_step_timeout_s or sup.job_cfg.expect.hang_timeout_s
    shown: tuple[str, str | None] | None = None
    long_wait_reported = running = False
    state: slurm.JobState | None = None
    last_poll = last_progress = -float("inf")
    while True:
        now = time.monotonic()
        slow = running and not monitor.progress.finished
        if now - last_poll >= (RUNNING_POLL_S if slow else QUEUED_POLL_S):
            last_poll = now
            state = slurm.job_state(job_id) or state
            if state is not None and (state.state, state.reason) != shown:
                shown = (state.state, state.reason)
                sup.persist(sup.run.update_status, slurm_state=state.state, slurm_reason=state.reason)
                if state.queued and state.reason:
                    sup.record([slurm_queued_event(job_id, state.reason, now - submitted, long_wait=False)])
            if state is not None and state.queued and not long_wait_reported and now - submitted > queue_limit:
                long_wait_reported = True
                sup.record([slurm_queued_event(job_id, state.reason, now - submitted, long_wait=True)])
            if state is not None and not state.queued and not running:
                running = True
                monitor.restart_clock(now)  # the clocks start when it runs
                sup.set_status(state=RunState.RUNNING, started=time.time())
            if state is not None and state.ended:
                break
        pump.pump(sup, monitor)
        if running:
            for event in monitor.tick(now, [], None):
                sup.record([event])
                if event.kind == "hang_suspected" and sup.job_cfg.on_hang == "stop":
                    sup.stop_reason = sup.stop_reason or "hang"
        if now - last_progress >= PROGRESS_WRITE_S:
            last_progress = now
            sup.persist(sup.run.write, "progress.json", monitor.progress)
        if sup.stop_reason:
            sup.set_status(state=RunState.STOPPING, stop_reason=sup.stop_reason)
            slurm.cancel(job_id)
            deadline = time.monotonic() + sup.job_cfg.stop_grace_s + 60
            while time.monotonic() < deadline:
                state = slurm.job_state(job_id) or state
                if state is None or state.ended:
                    break
                time.sleep(0.5)
            break
        time.sleep(LOG_POLL_S)
    time.sleep(LOG_POLL_S)
    pump.drain(sup, monitor)
    pump.close()
    sup.release_space()
    sup.persist(sup.run.write, "progress.json", monitor.progress)
    final = slurm.job_state(job_id) or state
    if final is not None and final.state == "CANCELLED":
        sup.stop_reason = sup.stop_reason or "user"  # scancel from outside is a stop too
    if final is not None:
        sup.persist(sup.run.update_status, slurm_state=final.state, slurm_reason=final.reason)
    rc = final.exit_code if final is not None and final.exit_code is not None else 1
    if final is not None and final.state not in ("COMPLETED", "CANCELLED") and not sup.failure:
        sup.failure = f"SLURM job {job_id} ended {final.state}" + (f" ({final.reason})" if final.reason else "")
        rc = rc or 1
    return sup.finish(rc, [])


def slurm_queued_event(job_id: str, reason: str | None, waited_s: float, long_wait: bool) -> Event:
    from gpuwizard.runner.host.slurm import pending_advice

    why = reason or "no reason given yet"
    if long_wait:
        return Event(
            kind="slurm_pending_long",
            severity="warning",
            title=f"SLURM job {job_id} still queued after {waited_s:.0f} s: {why}",
            detail=f"{why}: {pending_advice(reason)}.",
            suggestion="Wait, ask for fewer nodes or GPUs or a shorter time, or pick another partition "
            "(slurm.partition); `s` (or `gpuwizard stop`) cancels it.",
            data={"job_id": job_id, "reason": reason, "waited_s": round(waited_s, 1)},
        )
    return Event(
        kind="slurm_pending",
        severity="info",
        title=f"SLURM job {job_id} queued: {why}",
        detail=f"{why}: {pending_advice(reason)}.",
        data={"job_id": job_id, "reason": reason},
    )
