"""The preflight's time (`gpuwizard doctor`, before every launch): uncached (the training interpreter asked: torch,
LeRobot, a timed decode of the dataset's video) and cached (the remembered answer and the host section, asked fresh),
on LeRobot 0.6.1 (GPUWIZARD_LEROBOT_PYTHON) with a tiny video dataset written by its own writer. Wall time with its
spread, and the CPU seconds of the processes it started (this machine is shared: wall time waits on the others)."""

from __future__ import annotations

import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, isolated_env, record

sys.path.insert(0, str(ROOT / "tests"))
from support.video_dataset import write_video_dataset  # the dataset the trainer test decodes


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(call, repeat: int) -> tuple[list[float], list[float]]:
    """Wall and child-CPU seconds of each of `repeat` calls."""
    walls, cpus = [], []
    for _ in range(repeat):
        cpu, start = children_cpu(), time.perf_counter()
        call()
        walls.append(time.perf_counter() - start)
        cpus.append(children_cpu() - cpu)
    return walls, cpus


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} s, {min(values):.2f}-{max(values):.2f} s over {len(values)}"


def run(quick: bool = False) -> None:
    print("Doctor (the preflight)")
    python = os.environ.get("GPUWIZARD_LEROBOT_PYTHON")
    if not python:
        print("  skipped: set GPUWIZARD_LEROBOT_PYTHON (scripts/trainer-envs.sh)")
        return
    os.environ.update(isolated_env())
    from gpuwizard.gpus.inventory import read_inventory
    from gpuwizard.model import trust
    from gpuwizard.model.preset import parse_preset
    from gpuwizard.planning.plan import build_command, plan_here
    from gpuwizard.trainers.check.doctor import doctor
    from gpuwizard.trainers.registry import get_trainer

    folder = Path(tempfile.mkdtemp(prefix="gpuwizard-doctor-"))
    dataset = write_video_dataset(python, folder / "so100_video")
    data = {
        "version": 1,
        "name": "bench-doctor",
        "trainer": "lerobot",
        "policy": "act",
        "dataset": {"repo_id": "local/so100_video", "root": str(dataset)},
        "hardware": {"gpus": 2, "device": "cpu"},
        "mixed_precision": "no",
        "launch": {"python": python, "env": {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}},
        "trainer_options": {"num_workers": 2},
        "output_dir": str(folder / "out"),
    }
    preset = parse_preset(data, "bench")
    trust.grant_for_session(preset)
    inventory = read_inventory()
    _, ctx = plan_here(preset, inventory)
    spec = build_command(ctx)
    query = get_trainer("lerobot").trainer_query(ctx, spec)

    def ask(use_cache: bool) -> None:
        result = doctor(ctx, spec, query, inventory, ctx.python, use_cache)
        assert result.status == "ready" and result.cached is use_cache, result.summary

    repeat = 3 if quick else 5
    cold, cold_cpu = timed(lambda: ask(False), repeat)
    warm, warm_cpu = timed(lambda: ask(True), repeat * 2)
    print(f"  uncached: {spread(cold)}; CPU of its processes {spread(cold_cpu)}")
    print(f"  cached:   {spread(warm)}; CPU of its processes {spread(warm_cpu)}")
    record(
        "doctor",
        "doctor uncached (torch, LeRobot, video decoded), median",
        statistics.median(cold),
        "s",
        None,
        "< 20 s",
        statistics.median(cold) < 20,
    )
    record(
        "doctor",
        "doctor cached (remembered answer + host section), median",
        statistics.median(warm),
        "s",
        None,
        "< 5 s",
        statistics.median(warm) < 5,
    )


if __name__ == "__main__":
    run("--quick" in sys.argv)
