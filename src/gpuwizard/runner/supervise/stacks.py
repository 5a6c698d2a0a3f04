"""Stack dumps of every rank with py-spy, and which rank is not where the others are."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuwizard.runs.events import Stacks
from gpuwizard.runs.records import RankState

SYNC_POINTS = frozenset(
    {
        "all_reduce",
        "allreduce",
        "barrier",
        "monitored_barrier",
        "broadcast",
        "broadcast_object_list",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "all_to_all",
        "reduce",
        "recv",
        "send",
        "wait",
        "wait_tensor",
        "synchronize",
        "wait_for_everyone",
        "gather",
        "gather_for_metrics",
        "reduce_across_ranks",
        # DDP all-reduces gradients inside backward(), so a rank blocked there waits on its peers
        "backward",
        "_engine_run_backward",
    }
)


def ptrace_note() -> str | None:
    """Why py-spy may be refused here, or None when it should work."""
    if os.geteuid() == 0:
        return None
    try:
        scope = int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip())
    except (OSError, ValueError):
        return None
    if scope >= 1:
        return (
            f"kernel.yama.ptrace_scope is {scope}: py-spy needs root, CAP_SYS_PTRACE, "
            "or `sudo sysctl kernel.yama.ptrace_scope=0`"
        )
    return None


def find_py_spy() -> str | None:
    """py-spy beside this interpreter (the gpuwizard[hang] extra), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def main_thread_frames(dump: list[dict[str, Any]]) -> list[str]:
    """Function names of the main thread, innermost first, from `py-spy dump --json`."""
    threads = dump if isinstance(dump, list) else []
    main = next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0] if threads else {})
    return [f"{f.get('name')} ({Path(f.get('filename', '?')).name}:{f.get('line')})" for f in main.get("frames", [])]


def in_collective(frames: list[str]) -> bool:
    """Is the innermost part of the stack a collective or a call that waits on one?"""
    return any(frame.split(" ")[0].split(".")[-1] in SYNC_POINTS for frame in frames[:12])


def dump_stacks(ranks: list[RankState], out_dir: Path, timeout_s: float = 20.0, healthy: bool = False) -> Stacks:
    """Dump every live rank's Python stack and name the ranks outside a collective; `healthy`: the run is making
    progress (a dump the user asked for), so where the ranks are is a snapshot of work, not a stall's place."""
    py_spy = find_py_spy()
    if py_spy is None:
        return Stacks(
            ok=False,
            note="py-spy is not installed: `pip install py-spy` (or gpuwizard[hang]) enables stack dumps of every rank",
            per_rank={},
            outside_collective=[],
            files=[],
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    per_rank: dict[int, list[str]] = {}
    files, failures, unreadable = [], [], []
    procs = {
        r.rank: subprocess.Popen(
            [py_spy, "dump", "--pid", str(r.pid), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for r in ranks
        if r.alive
    }
    for rank, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            failures.append(f"rank {rank}: py-spy timed out")
            unreadable.append(rank)
            continue
        if proc.returncode != 0:
            failures.append(f"rank {rank}: {err.strip().splitlines()[-1] if err.strip() else 'py-spy failed'}")
            unreadable.append(rank)
            continue
        try:
            dump = json.loads(out)
        except ValueError:
            failures.append(f"rank {rank}: unreadable py-spy output")
            unreadable.append(rank)
            continue
        target = out_dir / f"rank{rank}.json"
        target.write_text(json.dumps(dump, indent=1))
        files.append(str(target))
        per_rank[rank] = main_thread_frames(dump)
    outside = sorted(r for r, frames in per_rank.items() if not in_collective(frames))
    inside = sorted(r for r in per_rank if r not in outside)
    if not per_rank:
        note = "; ".join(failures) or "no live ranks to dump"
        hint = ptrace_note()
        return Stacks(
            ok=False, note=note + (f" ({hint})" if hint else ""), per_rank={}, outside_collective=[], files=files
        )
    if healthy and not unreadable:
        note = healthy_note(inside, outside)
    elif unreadable:
        note = (
            f"rank(s) {', '.join(map(str, unreadable))} could not be read while rank(s) "
            f"{', '.join(map(str, sorted(per_rank)))} could: the unreadable one is the suspect (stopped or wedged)"
        )
    elif outside and inside:
        waiting = ", ".join(map(str, inside))
        note = f"rank(s) {', '.join(map(str, outside))} are not in a collective while rank(s) {waiting} wait in one"
    elif inside:
        note = "every rank is inside a collective: the communication path itself is stuck (network, P2P, a dead peer)"
    else:
        note = "no rank is inside a collective: a host-side stall (data loading, I/O, a Python deadlock)"
    if failures:
        note += "; " + "; ".join(failures)
    outside = outside if inside and not unreadable else []
    return Stacks(ok=True, note=note, per_rank=per_rank, outside_collective=outside, files=files, unreadable=unreadable)


def healthy_note(inside: list[int], outside: list[int]) -> str:
    """Where the ranks of a run that is making progress are: a collective is part of every step (DDP all-reduces
    in backward), so neither place is a stall."""
    places = [
        f"rank(s) {', '.join(map(str, inside))} in a collective" if inside else "",
        f"rank(s) {', '.join(map(str, outside))} computing or loading data" if outside else "",
    ]
    return "the run is healthy (it is making progress): a snapshot of working ranks, " + " and ".join(
        p for p in places if p
    )
