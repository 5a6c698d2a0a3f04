"""One rank of `gpuwizard gpus --bandwidth` (started by runner/bandwidth/measure.py, one process per rank): times
torch.distributed.all_reduce per message size and, on rank 0, prints one marked JSON line per size.

The ranks meet through a FileStore in the measurement's private folder, so nothing listens on a TCP port; gloo's and
NCCL's own sockets are on loopback (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME=lo, set by the launcher). Each timed
iteration starts after a one-element all-reduce that lines the ranks up, and ends when the device is done
(torch.cuda.synchronize on GPUs); its time is the slowest rank's (a MAX all-reduce of the times after the size)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta

from gpuwizard.runner.host.targets import ALLREDUCE

MARK = "GWBW "
"""The prefix of rank 0's lines that the launcher reads (anything else on stdout is not the measurement's)."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=ALLREDUCE)
    parser.add_argument("--backend", choices=["gloo", "nccl"], required=True)
    parser.add_argument("--store", required=True, help="the FileStore's file (must not exist yet)")
    parser.add_argument("--sizes", required=True, help="message sizes in bytes, comma-separated")
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--iterations", type=int, required=True)
    parser.add_argument("--timeout-s", type=float, default=120.0, help="how long a collective may wait for a rank")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    rank, world, local = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    import torch
    import torch.distributed as dist

    cuda = args.backend == "nccl"
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    def done() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    store = dist.FileStore(args.store, world)
    dist.init_process_group(
        args.backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=args.timeout_s)
    )
    line_up = torch.zeros(1, device=device)
    for size in (int(s) for s in args.sizes.split(",")):
        data = torch.zeros(size // 4, dtype=torch.float32, device=device)  # zeros: sums never overflow
        for _ in range(args.warmup):
            dist.all_reduce(data)
        done()
        times = []
        for _ in range(args.iterations):
            dist.all_reduce(line_up)
            done()
            start = time.perf_counter()
            dist.all_reduce(data)
            done()
            times.append(time.perf_counter() - start)
        slowest = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(MARK + json.dumps({"size_bytes": size, "times": slowest.cpu().tolist()}), flush=True)
        del data
    dist.destroy_process_group()
    if rank == 0:
        print(MARK + json.dumps({"done": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
