"""What the supervisor does for a job on this machine (slurmjob.py: one SLURM runs): lock the output folder, start
the job in its own session and cgroup, follow, sample and stop its process tree, check what it left."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.core.kinds import EventKind, Severity, StopReason
from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runner.host.cgroup import JobCgroup
from gpuwizard.runner.host.locks import OutputLock
from gpuwizard.runner.host.procs import MARKER, JobProcesses, marker_value
from gpuwizard.runner.supervise.jobhost import JobHost
from gpuwizard.runner.supervise.outputpump import OutputPump
from gpuwizard.runner.supervise.stacks import dump_stacks
from gpuwizard.runs.owner import OutputOwner, write_owner
from gpuwizard.runs.records import Event, GpuSample, ProcessRef, RanksSample
from gpuwizard.trainers.registry import get_trainer

if TYPE_CHECKING:
    from gpuwizard.gpus.sampler import GpuSampler

POLL_S = 0.1
TICK_S = 1.0
PROGRESS_EVERY_S = 0.5
GPU_SAMPLE_MAX_AGE_S = 3 * TICK_S
PR_SET_PDEATHSIG = 1


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


def mark_output_dir(host: JobHost) -> None:
    """Mark the output folder as this run's (and its resume chain's): a resume takes only its own chain's
    checkpoints. OSError when the marker cannot be written."""
    cfg, run_id = host.job_cfg, host.run.run_id
    if cfg.output_dir is not None:
        chain = cfg.resume_chain or run_id
        write_owner(Path(cfg.output_dir), OutputOwner(run_id=run_id, chain=chain, node_rank=cfg.node_rank))


def output_lock(host: JobHost) -> OutputLock | None:
    """The lock of the job's output folder, not taken yet (None: the job names no output folder)."""
    cfg = host.job_cfg
    return None if cfg.output_dir is None else OutputLock(Path(cfg.output_dir), cfg.node_rank)


def hold_output_dir(host: JobHost, lock: OutputLock | None) -> bool:
    """Lock the output folder for this run's lifetime (released by the kernel when this process ends) and mark it as
    this run's; False, with the status saying why, when another run holds it or it cannot be locked or marked."""
    if lock is None:
        return True
    output = host.job_cfg.output_dir
    try:
        holder = lock.acquire(host.run.run_id)
    except OSError as exc:
        reason = f"could not lock the output folder {output}: {exc.strerror or exc}; not started"
    else:
        if holder is None:
            try:
                mark_output_dir(host)
                return True
            except OSError as exc:
                lock.release()
                reason = f"could not mark the output folder {output} as this run's: {exc.strerror or exc}; not started"
        else:
            reason = f"run {holder} is still writing to {output}; not started"
    host.run.update_status(state=RunState.FAILED, exit_code=int(ExitCode.NOT_STARTED), ended=time.time(), error=reason)
    return False


def start_job(host: JobHost, lock: OutputLock | None, umask: int) -> LocalJob | None:
    """The job started in its own session and cgroup, its output into log.txt; None when it could not start (the
    status says why)."""
    cfg, run = host.job_cfg, host.run
    env = dict(os.environ)
    for name in cfg.unset:
        env.pop(name, None)
    env.update(cfg.env)
    env[MARKER] = marker_value(run.path)  # every process of the job carries it, daemons included
    cgroup = JobCgroup.create(re.sub(r"[^A-Za-z0-9_.-]", "_", run.run_id)[:80])
    log_fd = os.open(run.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        popen = subprocess.Popen(
            cfg.argv,
            preexec_fn=job_preexec(cgroup),
            umask=umask,
            cwd=cfg.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except (OSError, ValueError) as exc:
        os.write(log_fd, f"gpuwizard: could not start {cfg.argv[0]}: {exc}\n".encode())
        if cgroup is not None:
            cgroup.remove()
        run.update_status(
            state=RunState.FAILED,
            exit_code=int(ExitCode.NOT_STARTED),
            job_exit_code=int(ExitCode.NOT_STARTED),
            ended=time.time(),
            error=f"could not start {cfg.argv[0]}: {exc}",
        )
        return None
    finally:
        os.close(log_fd)
    if cgroup is not None and not cgroup.contains(popen.pid):
        cgroup.remove()  # it could not join (the marker still finds every process)
        cgroup = None
    host.set_status(state=RunState.RUNNING, job=ProcessRef.of(popen.pid), started=time.time())
    return LocalJob(host, popen, cgroup, lock)


class LocalJob:
    """The job start_job started, owned by the supervisor: `tick` is one pass of following it (log, ranks, GPUs,
    hangs, stop), `end` what it left behind (flight records, GPU memory held) and its final record."""

    def __init__(
        self, host: JobHost, popen: subprocess.Popen[bytes], cgroup: JobCgroup | None, lock: OutputLock | None
    ):
        self.host, self.cfg, self.popen = host, host.job_cfg, popen
        self.cgroup, self.lock = cgroup, lock
        self.monitor = JobMonitor(self.cfg.expect, get_trainer(self.cfg.trainer))
        self.procs = JobProcesses(popen.pid, launcher=popen, cgroup=cgroup, marker=marker_value(host.run.path))
        self.run_pids: set[int] = set()
        self.gpu_seen: dict[int, float] = {}
        self.lost_gpus: set[int] = set()
        self.sampler = self.start_sampler() if self.cfg.device == "cuda" else None
        self.pump = OutputPump(host.run.log)
        self.last_tick = self.last_progress = -float("inf")  # on the monotonic clock: a wall-clock jump is no hang
        self.pause_s = POLL_S
        self.rc: int | None = None
        self.survivors: list[int] = []
        self.ended_itself = False

    def start_sampler(self) -> GpuSampler | None:
        from gpuwizard.gpus.sampler import GpuSampler, open_sample_source

        source = open_sample_source()
        self.run_pids = self.procs.pids()
        if source is None:
            return None
        return GpuSampler(
            source, interval=TICK_S, history=10, run_pids=lambda: self.run_pids, on_sample=self.write_gpu_samples
        ).start()

    def tick(self) -> bool:
        """One pass: the log, once a TICK_S the ranks and GPUs, a stack dump asked for, progress; False once the job
        has ended on its own or been stopped."""
        host, monitor = self.host, self.monitor
        caught_up = self.pump.pump(host, monitor)  # bounded: a job that floods its log never starves what follows
        mono = time.monotonic()
        if mono - self.last_tick >= TICK_S:
            self.last_tick = mono
            self.sample(mono)
        if host.take_dump_request():
            self.dump()
        if mono - self.last_progress >= PROGRESS_EVERY_S and host.stop.reason != StopReason.FOLDER_GONE:
            self.last_progress = mono
            host.persist(host.run.write, "progress.json", monitor.progress)
        self.rc = self.popen.poll()
        if self.rc is not None:
            self.ended_itself = True
            time.sleep(POLL_S)
            if host.stop.reason != StopReason.FOLDER_GONE:  # a folder made anew in its place is not this run's
                self.pump.drain(host, monitor)
            self.survivors = self.procs.stop(grace_s=2) if self.procs.remaining() else []  # what it left running
            return False
        if host.stop.reason and not host.waits_for_checkpoint(monitor, time.monotonic()):
            if host.stop.reason != StopReason.FOLDER_GONE:
                host.set_status(state=RunState.STOPPING, stop_reason=host.stop.reason)
            self.survivors = self.procs.stop(grace_s=self.cfg.stop_grace_s)
            self.rc = self.popen.wait()
            self.pump.summarize(host)
            return False
        self.pause_s = POLL_S if caught_up else 0  # behind the job: read on at once
        return True

    def sample(self, mono: float) -> None:
        """The folder still there, the ranks, the GPUs, and what the monitor makes of them (a hang among it)."""
        host = self.host
        if host.folder_gone():
            host.stop.folder_gone()
        self.procs.refresh()
        ranks = self.procs.sample_ranks()
        if ranks:
            host.persist(host.run.append_line, host.run.ranks_file, RanksSample(t=time.time(), ranks=ranks))
        self.run_pids = self.procs.pids()
        for event in self.monitor.tick(mono, ranks, self.gpu_samples(mono)):
            if event.kind == EventKind.HANG_SUSPECTED:
                host.handle_hang(self.monitor, event)
            else:
                host.record([event])

    def dump(self) -> None:
        """Every rank's stack, asked for with SIGUSR1 (`d` in the monitor)."""
        self.procs.refresh()
        healthy = self.monitor.progressing(time.monotonic())
        report = dump_stacks(self.procs.sample_ranks(), self.host.run.stacks_dir, healthy=healthy)
        self.host.record(
            [
                Event(
                    kind=EventKind.STACK_DUMP,
                    severity=Severity.INFO,
                    title="stack dump of every rank",
                    detail=report.note,
                    data=report.data(),
                )
            ]
        )

    def write_gpu_samples(self, samples: list[GpuSample]) -> None:
        """Called on the sampler thread, which alone writes gpu.jsonl."""
        seen = time.monotonic()
        for sample in samples:
            self.gpu_seen[sample.index] = seen
            self.host.persist(self.host.run.append_line, self.host.run.gpu_file, sample)

    def gpu_samples(self, mono: float) -> list[GpuSample]:
        """The sampler thread's fresh samples (a stuck NVML call never stalls the log); a lost device is one event."""
        if self.sampler is None:
            return []
        latest = self.sampler.latest()
        samples = [s for s in latest if mono - self.gpu_seen.get(s.index, -1e9) <= GPU_SAMPLE_MAX_AGE_S]
        for s in samples:
            if s.lost and s.index not in self.lost_gpus:
                self.lost_gpus.add(s.index)
                self.host.record(
                    [
                        Event(
                            kind=EventKind.GPU_LOST,
                            severity=Severity.ERROR,
                            title=f"GPU {s.index} fell off the bus",
                            detail="NVML reports the device as lost (Xid 79 class); the job cannot continue on it.",
                            suggestion="Check `dmesg` for Xid errors, reseat or reset the GPU, then retry on the other "
                            "devices.",
                        )
                    ]
                )
        return samples

    def end(self) -> int:
        """What the ended job left (flight records, GPU memory held, processes), then the final status."""
        assert self.rc is not None, "end() follows the tick() that saw the job end"
        host = self.host
        self.procs.close()
        self.pump.close()
        if host.stop.reason == StopReason.FOLDER_GONE or host.folder_gone():
            return self.end_without_folder()
        if self.rc != 0 and host.stop.reason is None:
            host.fail(host.full_disk())
        host.release_space()  # the job has ended: its room is for the final records
        host.persist(host.run.write, "progress.json", self.monitor.progress)
        if self.cfg.device == "cuda" and self.cfg.python:
            from gpuwizard.runner.supervise.flight import analyze

            flight = analyze(self.cfg.python, host.run.path)
            if flight is not None:
                host.record([flight])
                host.fail(flight.title)
        if self.sampler is not None:
            self.memory_held(self.sampler)
        if self.ended_itself:
            host.stop.ended_first()
        if not self.survivors:
            self.release()  # before the final status: whoever waits on it may start the next run at once
        return host.finish(self.rc, self.survivors)

    def memory_held(self, sampler: GpuSampler) -> None:
        """GPU memory the job's processes still hold once it has ended, said in the status and one event."""
        from gpuwizard.gpus.sampler import run_memory_held

        sampler.stop(close=False)
        held = run_memory_held(sampler.source, set(self.procs.known))
        sampler.source.close()
        if held:
            self.host.set_status(gpu_memory_held_mb={str(i): mb for i, mb in held.items()})
            self.host.record(
                [
                    Event(
                        kind=EventKind.GPU_MEMORY_HELD,
                        severity=Severity.ERROR,
                        title="GPU memory still held after the job ended",
                        detail=", ".join(f"GPU {i}: {mb:.0f} MB" for i, mb in sorted(held.items())),
                        suggestion="Find the holder with `nvidia-smi --query-compute-apps=pid,used_memory "
                        "--format=csv` and kill it.",
                    )
                ]
            )

    def release(self) -> None:
        """The job's cgroup and output folder let go: nothing of it is left running."""
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.lock is not None:
            self.lock.release()

    def end_without_folder(self) -> int:
        """The run folder was deleted: the job is stopped, and there is nowhere left to record it."""
        if self.lock is not None and not self.survivors:
            self.lock.release()
        left = f"; processes left: {self.survivors}" if self.survivors else "; nothing of it is left"
        print(f"gpuwizard: the run folder {self.host.run.path} was deleted: the job was stopped{left}", file=sys.stderr)
        return int(ExitCode.STOPPED)
