"""`gpuwizard gpus --bandwidth`: one process per rank (runner/bandwidth/allreduce.py), reads rank 0's figures as they
come, and stops every rank when it ends, fails, stalls or is interrupted.

The ranks are this interpreter's own children, each in a session of its own (the terminal's Ctrl-C reaches only
gpuwizard, which then stops them) and with SIGTERM as their parent-death signal (localjob.job_preexec), so none
outlives a kill -9 of gpuwizard either. They meet through a FileStore in a private temporary folder (one a kill -9 left
behind, the next measurement removes): no rendezvous port, and gloo's / NCCL's sockets on loopback
(trainers/base.loopback_env)."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from gpuwizard.core.errors import Problem, problem
from gpuwizard.gpus.bandwidth import (
    ITERATIONS,
    WARMUP,
    BandwidthRecord,
    SizeResult,
    bandwidth_dir,
    host_name,
    size_result,
)
from gpuwizard.runner.bandwidth.allreduce import MARK
from gpuwizard.runner.host.targets import ALLREDUCE
from gpuwizard.runs.records import start_ticks

POLL_S = 0.2
STALL_S = 180.0
"""No figure for this long (gloo's own timeout is 120 s a collective): the measurement is stuck and is stopped."""
EXIT_GRACE_S = 5.0
FIELD = "gpus --bandwidth"
FAILURE_LOG = "last-failure.log"
SCRATCH = "gw-bandwidth-"
OWNER = re.compile(re.escape(SCRATCH) + r"(\d{1,7})-(\d{1,20})-")
"""A scratch folder's name: its gpuwizard's pid and start time (clock ticks since boot), then tempfile's own."""


@dataclass(frozen=True)
class Measurement:
    """What to measure: on which devices, with how many ranks, which message sizes (bytes)."""

    device: Literal["cpu", "cuda"]
    ranks: int
    sizes: tuple[int, ...]
    devices: tuple[str, ...]
    hardware: str
    warmup: int = WARMUP
    iterations: int = ITERATIONS
    stall_s: float = STALL_S

    @property
    def backend(self) -> Literal["gloo", "nccl"]:
        return "nccl" if self.device == "cuda" else "gloo"


def rank_command(m: Measurement, store: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        ALLREDUCE,
        f"--backend={m.backend}",
        f"--store={store}",
        "--sizes=" + ",".join(str(s) for s in m.sizes),
        f"--warmup={m.warmup}",
        f"--iterations={m.iterations}",
    ]


def rank_env(m: Measurement, rank: int) -> dict[str, str]:
    """The rank's environment: torchrun's variables, loopback sockets, no GPU on the CPU."""
    from gpuwizard.core.paths import PACKAGE_DIR
    from gpuwizard.trainers.base import loopback_env

    env = dict(os.environ)
    inherited = env.get("PYTHONPATH", "")
    env |= {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(m.ranks),
        "LOCAL_WORLD_SIZE": str(m.ranks),
        "MASTER_ADDR": "127.0.0.1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(PACKAGE_DIR.parent), inherited) if p),
        **loopback_env(m.device),
    }
    if m.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


class MeasurementFailed(Exception):
    """A rank died or the measurement stalled: `problem` says which, how, and what to do."""

    def __init__(self, found: Problem):
        super().__init__(found.paragraph())
        self.problem = found


class Ranks:
    """The started ranks, their error files, and stopping every one of them."""

    def __init__(self, m: Measurement, folder: Path):
        from gpuwizard.runner.supervise.localjob import job_preexec

        self.m, self.folder = m, folder
        self.procs: list[subprocess.Popen[bytes]] = []
        self.errors: list[Path] = []
        store = folder / "store"
        for rank in range(m.ranks):
            err_path = folder / f"rank{rank}.err"
            with open(err_path, "wb") as err:
                self.procs.append(
                    subprocess.Popen(
                        rank_command(m, store),
                        env=rank_env(m, rank),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                        stderr=err,
                        start_new_session=True,
                        preexec_fn=job_preexec(None),
                    )
                )
            self.errors.append(err_path)

    @property
    def out(self) -> IO[bytes]:
        assert self.procs[0].stdout is not None
        return self.procs[0].stdout

    def failed(self) -> tuple[int, int] | None:
        """(rank, exit code) of a rank that ended badly: one killed by a signal first, it is the cause."""
        ended = [(r, code) for r, p in enumerate(self.procs) if (code := p.poll()) is not None and code != 0]
        return min(ended, key=lambda rc: (rc[1] >= 0, rc[0])) if ended else None

    def all_ended(self) -> bool:
        return all(p.poll() is not None for p in self.procs)

    def stop(self) -> None:
        """SIGTERM to each rank still running, SIGKILL after the grace period; every one reaped."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + EXIT_GRACE_S
        for p in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.procs and self.procs[0].stdout is not None:
            self.procs[0].stdout.close()


def measure(m: Measurement, progress: Callable[[SizeResult], None] = lambda r: None) -> BandwidthRecord:
    """Run the measurement; MeasurementFailed when a rank dies or it stalls (KeyboardInterrupt passes through; every
    rank is stopped either way)."""
    started = time.monotonic()
    tidy_left_behind()
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH}{os.getpid()}-{start_ticks(os.getpid())}-") as tmp:
        ranks = Ranks(m, Path(tmp))
        try:
            results = read_results(ranks, progress)
        finally:
            ranks.stop()
    return BandwidthRecord(
        host=host_name(),
        device=m.device,
        backend=m.backend,
        ranks=m.ranks,
        devices=list(m.devices),
        hardware=m.hardware,
        warmup=m.warmup,
        created=time.time(),
        seconds=round(time.monotonic() - started, 2),
        sizes=results,
    )


def tidy_left_behind() -> None:
    """Remove the scratch folders of measurements whose gpuwizard is gone (killed with -9, its ranks after it): only
    this user's, only where the process named in the folder's name, by pid and start time, no longer runs."""
    base = Path(tempfile.gettempdir())
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for entry in entries:
        owner = OWNER.match(entry.name)
        try:
            mine = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.getuid()
        except OSError:
            continue
        if owner is not None and mine and start_ticks(int(owner[1])) != int(owner[2]):
            shutil.rmtree(entry.path, ignore_errors=True)


def read_results(ranks: Ranks, progress: Callable[[SizeResult], None]) -> list[SizeResult]:
    """Rank 0's figures as they come, until its last line and every rank's exit."""
    m, fd = ranks.m, ranks.out.fileno()
    results: list[SizeResult] = []
    pending, finished, eof, last = b"", False, False, time.monotonic()
    while True:
        if eof:
            time.sleep(POLL_S)  # rank 0 closed its output: its exit code comes next
        elif select.select([fd], [], [], POLL_S)[0]:
            chunk = os.read(fd, 1 << 16)
            eof = not chunk
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                data = marked(line)
                if data is None:
                    continue
                if data.get("done"):
                    finished = True
                else:
                    results.append(size_result(int(data["size_bytes"]), [float(t) for t in data["times"]], m.ranks))
                    progress(results[-1])
                    last = time.monotonic()
        if finished:
            wait_ended(ranks)
            return results
        bad = ranks.failed()
        if bad is None and eof and ranks.procs[0].poll() == 0:
            bad = (0, 0)  # rank 0 ended well without its last line
        if bad is not None:
            raise MeasurementFailed(died(ranks, *bad, len(results)))
        if time.monotonic() - last > m.stall_s:
            raise MeasurementFailed(stalled(ranks, len(results)))


def marked(line: bytes) -> dict[str, Any] | None:
    """A line of rank 0's that carries a figure, parsed; None for anything else it printed."""
    text = line.decode(errors="replace")
    if not text.startswith(MARK):
        return None
    try:
        data = json.loads(text.removeprefix(MARK))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def wait_ended(ranks: Ranks) -> None:
    deadline = time.monotonic() + EXIT_GRACE_S
    while not ranks.all_ended() and time.monotonic() < deadline:
        time.sleep(POLL_S / 4)


def how_it_ended(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}" if code else "exited without its figures"


def error_line(path: Path) -> str:
    """The rank's own last error line (an exception's, else its last line), at most 240 characters."""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    errors = [ln for ln in lines if ln.split(":", 1)[0].rsplit(".", 1)[-1].endswith(("Error", "Exception"))]
    found = (errors or lines or [""])[-1]
    return found if len(found) <= 240 else found[:237] + "..."


def keep_output(ranks: Ranks, rank: int) -> Path | None:
    """The failed rank's whole output, kept past the temporary folder."""
    target = bandwidth_dir() / FAILURE_LOG
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(ranks.errors[rank].read_bytes()[-(1 << 20) :])
    except OSError:
        return None
    return target


def died(ranks: Ranks, rank: int, code: int, measured: int) -> Problem:
    m = ranks.m
    said = error_line(ranks.errors[rank])
    kept = keep_output(ranks, rank)
    fix = (
        "a rank killed from outside needs only a rerun (one the kernel killed for memory: smaller --sizes)"
        if code < 0
        else "the error quoted is the rank's own: on GPUs see that `gpuwizard gpus` lists every device as free, on "
        "the CPU that the cores are not all taken, then run it again"
    )
    return problem(
        FIELD,
        f"rank {rank} of the {m.ranks} {m.backend} processes {how_it_ended(code)} after {measured} of "
        f"{len(m.sizes)} message sizes" + (f" ({said})" if said else "") + "; every other rank was stopped and "
        "nothing was saved" + (f" (its whole output: {kept})" if kept else ""),
        fix,
    )


def stalled(ranks: Ranks, measured: int) -> Problem:
    m = ranks.m
    return problem(
        FIELD,
        f"the {m.ranks} {m.backend} processes gave no figure for {m.stall_s:.0f} s (after {measured} of "
        f"{len(m.sizes)} sizes): a rank is stuck in its all-reduce; every rank was stopped and nothing was saved",
        "see that no other job holds the devices (`gpuwizard gpus`), or measure fewer processes (--processes) or "
        "smaller sizes (--sizes)",
    )
