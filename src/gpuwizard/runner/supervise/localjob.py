"""What the supervisor does for a job on this machine (slurmjob.py: one SLURM runs): lock the output folder, start
the job in its own session and cgroup, follow, sample and stop its process tree, check what it left."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runner.host.cgroup import JobCgroup
from gpuwizard.runner.host.locks import OutputLock
from gpuwizard.runner.host.procs import MARKER, JobProcesses, marker_value
from gpuwizard.runner.supervise.jobhost import JobHost
from gpuwizard.runner.supervise.outputpump import OutputPump
from gpuwizard.runner.supervise.stacks import dump_stacks
from gpuwizard.runs.owner import OutputOwner, write_owner
from gpuwizard.runs.records import Event, ProcessRef, RanksSample
from gpuwizard.trainers.registry import get_trainer

POLL_S = 0.1
TICK_S = 1.0
PROGRESS_EVERY_S = 0.5
PR_SET_PDEATHSIG = 1
FOLDER_GONE = "run folder deleted"


def job_preexec(cgroup: JobCgroup | None) -> Callable[[], None]:
    """What the launcher's child does before exec: join the job's cgroup (before it can fork), start with no signal
    blocked, and get SIGTERM when the supervisor dies, even by kill -9, so torchrun stops its ranks instead of
    training on unsupervised (Linux prctl; elsewhere `gpuwizard stop` remains)."""

    def preexec() -> None:
        import ctypes

        if cgroup is not None:
            try:
                cgroup.join()
            except OSError:
                pass  # checked from outside: the job is then tracked by its marker
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):
            pass

    return preexec


def mark_output_dir(sup: JobHost) -> None:
    """Mark the output folder as this run's (and its resume chain's): a resume takes only its own chain's
    checkpoints. OSError when the marker cannot be written."""
    cfg = sup.job_cfg
    if cfg.output_dir is not None:
        chain = cfg.resume_chain or sup.run.run_id
        write_owner(Path(cfg.output_dir), OutputOwner(run_id=sup.run.run_id, chain=chain, node_rank=cfg.node_rank))


def hold_output_dir(sup: JobHost) -> bool:
    """Lock the output folder for this run's lifetime (released by the kernel when this process ends) and mark it as
    this run's."""
    if sup.job_cfg.output_dir is None:
        return True
    sup.output_lock = OutputLock(Path(sup.job_cfg.output_dir), sup.job_cfg.node_rank)
    try:
        holder = sup.output_lock.acquire(sup.run.run_id)
    except OSError as exc:
        reason = f"could not lock the output folder {sup.job_cfg.output_dir}: {exc.strerror or exc}; not started"
    else:
        if holder is None:
            try:
                mark_output_dir(sup)
                return True
            except OSError as exc:
                sup.output_lock.release()
                why = exc.strerror or exc
                reason = f"could not mark the output folder {sup.job_cfg.output_dir} as this run's: {why}; not started"
        else:
            reason = f"run {holder} is still writing to {sup.job_cfg.output_dir}; not started"
    sup.run.update_status(state=RunState.FAILED, exit_code=int(ExitCode.NOT_STARTED), ended=time.time(), error=reason)
    return False


def start_job(sup: JobHost) -> bool:
    cfg = sup.job_cfg
    env = dict(os.environ)
    for name in cfg.unset:
        env.pop(name, None)
    env.update(cfg.env)
    env[MARKER] = marker_value(sup.run.path)  # every process of the job carries it, daemons included
    safe_name = re.sub(r"[^A-Za-z0-9_.-]", "_", sup.run.run_id)[:80]
    sup.cgroup = JobCgroup.create(safe_name)
    log_fd = os.open(sup.run.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        sup.job = subprocess.Popen(
            cfg.argv,
            preexec_fn=job_preexec(sup.cgroup),
            umask=sup.job_umask,
            cwd=cfg.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except (OSError, ValueError) as exc:
        os.write(log_fd, f"gpuwizard: could not start {cfg.argv[0]}: {exc}\n".encode())
        if sup.cgroup is not None:
            sup.cgroup.remove()
        sup.run.update_status(
            state=RunState.FAILED,
            exit_code=int(ExitCode.NOT_STARTED),
            job_exit_code=int(ExitCode.NOT_STARTED),
            ended=time.time(),
            error=f"could not start {cfg.argv[0]}: {exc}",
        )
        return False
    finally:
        os.close(log_fd)
    if sup.cgroup is not None and not sup.cgroup.contains(sup.job.pid):
        sup.cgroup.remove()  # it could not join (the marker still finds every process)
        sup.cgroup = None
    sup.set_status(state=RunState.RUNNING, job=ProcessRef.of(sup.job.pid), started=time.time())
    return True


def follow_local(sup: JobHost) -> int:
    """The job start_job started, followed to its end; then what it left behind (flight records, GPU memory held)."""
    assert sup.job is not None
    monitor = JobMonitor(sup.job_cfg.expect, get_trainer(sup.job_cfg.trainer))
    procs = JobProcesses(sup.job.pid, launcher=sup.job, cgroup=sup.cgroup, marker=marker_value(sup.run.path))
    if sup.job_cfg.device == "cuda":
        from gpuwizard.gpus.sampler import GpuSampler, open_sample_source

        source = open_sample_source()
        sup.run_pids = procs.pids()
        if source is not None:
            sup.gpu_sampler = GpuSampler(
                source,
                interval=TICK_S,
                history=10,
                run_pids=lambda: sup.run_pids,
                on_sample=sup.write_gpu_samples,
            ).start()
    pump = OutputPump(sup.run.log)
    last_tick = last_progress = -float("inf")  # durations on the monotonic clock: a wall-clock jump is no hang
    rc: int | None = None
    ended_itself = False
    while True:
        caught_up = pump.pump(sup, monitor)  # bounded: a job that floods its log never starves what follows
        mono = time.monotonic()
        if mono - last_tick >= TICK_S:
            last_tick = mono
            if sup.folder_gone():
                sup.stop_reason = FOLDER_GONE
            procs.refresh()
            ranks = procs.sample_ranks()
            if ranks:
                sup.persist(sup.run.append_line, sup.run.ranks_file, RanksSample(t=time.time(), ranks=ranks))
            sup.run_pids = procs.pids()
            gpus = sup.gpu_samples(mono)
            for event in monitor.tick(mono, ranks, gpus):
                if event.kind == "hang_suspected":
                    sup.handle_hang(monitor, event)
                else:
                    sup.record([event])
        if sup.dump_requested:
            sup.dump_requested = False
            procs.refresh()
            report = dump_stacks(
                procs.sample_ranks(), sup.run.stacks_dir, healthy=monitor.progressing(time.monotonic())
            )
            sup.record(
                [
                    Event(
                        kind="stack_dump",
                        severity="info",
                        title="stack dump of every rank",
                        detail=report.note,
                        data=report.to_json(),
                    )
                ]
            )
        if mono - last_progress >= PROGRESS_EVERY_S and sup.stop_reason != FOLDER_GONE:
            last_progress = mono
            sup.persist(sup.run.write, "progress.json", monitor.progress)
        rc = sup.job.poll()
        if rc is not None:
            ended_itself = True
            time.sleep(POLL_S)
            if sup.stop_reason != FOLDER_GONE:  # a folder made anew in its place is not this run's
                pump.drain(sup, monitor)
            survivors = procs.stop(grace_s=2) if procs.remaining() else []  # what the job left running
            break
        if sup.stop_reason and not sup.waits_for_checkpoint(monitor, time.monotonic()):
            if sup.stop_reason != FOLDER_GONE:
                sup.set_status(state=RunState.STOPPING, stop_reason=sup.stop_reason)
            survivors = procs.stop(grace_s=sup.job_cfg.stop_grace_s)
            rc = sup.job.wait()
            pump.summarize(sup)
            break
        time.sleep(POLL_S if caught_up else 0)  # behind the job: read on at once
    procs.close()
    pump.close()
    if sup.stop_reason == FOLDER_GONE or sup.folder_gone():
        return sup.end_without_folder(survivors)
    if rc not in (None, 0) and sup.stop_reason is None:
        sup.failure = sup.failure or sup.full_disk()
    sup.release_space()  # the job has ended: its room is for the final records
    sup.persist(sup.run.write, "progress.json", monitor.progress)
    if sup.job_cfg.device == "cuda" and sup.job_cfg.python:
        from gpuwizard.runner.supervise.flight import analyze

        flight = analyze(sup.job_cfg.python, sup.run.path)
        if flight is not None:
            sup.record([flight])
            sup.failure = sup.failure or flight.title
    if sup.gpu_sampler is not None:
        from gpuwizard.gpus.sampler import run_memory_held

        sup.gpu_sampler.stop(close=False)
        held = run_memory_held(sup.gpu_sampler.source, set(procs.known))
        sup.gpu_sampler.source.close()
        if held:
            sup.set_status(gpu_memory_held_mb={str(i): mb for i, mb in held.items()})
            sup.record(
                [
                    Event(
                        kind="gpu_memory_held",
                        severity="error",
                        title="GPU memory still held after the job ended",
                        detail=", ".join(f"GPU {i}: {mb:.0f} MB" for i, mb in sorted(held.items())),
                        suggestion="Find the holder with `nvidia-smi --query-compute-apps=pid,used_memory "
                        "--format=csv` and kill it.",
                    )
                ]
            )
    if ended_itself and sup.stop_reason == "user":
        sup.stop_reason = None  # it ended on its own before a stop reached it: its own end is the truth
    return sup.finish(rc, survivors)
