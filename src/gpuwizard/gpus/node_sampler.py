"""`python -m gpuwizard.gpus.node_sampler RUN_DIR`: this node's GPU samples into the run folder.

A SLURM batch script starts it once per node (srun --overlap); each node appends to its own gpu-<node>.jsonl, which
the monitor on the submitting host reads when the run folder is on a filesystem the nodes share."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import threading
from pathlib import Path

from gpuwizard.gpus.sampler import open_sample_source
from gpuwizard.runs.records import GpuSample

NODE_FILE_PREFIX = "gpu-"


def node_name() -> str:
    """SLURM's name for this node (unique even where several slurmd share a host), else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def node_file(run_dir: Path, node: str) -> Path:
    return run_dir / f"{NODE_FILE_PREFIX}{node}.jsonl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="sample this node's GPUs into a gpuwizard run folder")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--samples", type=int, default=None, help="stop after this many rounds (default: SIGTERM)")
    args = parser.parse_args(argv)
    node = node_name()
    source = open_sample_source()
    if source is None:
        print(f"gpuwizard: no NVML on {node}: no GPU samples from this node", flush=True)
        return 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    path = node_file(args.run_dir, node)
    rounds = 0
    try:
        while not stop.is_set() and (args.samples is None or rounds < args.samples):
            samples: list[GpuSample] = source.sample(set())
            with open(path, "a", encoding="utf-8") as out:
                out.writelines(s.model_copy(update={"node": node}).to_json_text() + "\n" for s in samples)
            rounds += 1
            stop.wait(args.interval)
    finally:
        source.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
