"""Two gloo ranks; rank 0 enters one more all_reduce than rank 1, then both dump their Flight Recorder buffers.

Run under torchrun (tests/test_flight.py). `torch._C._distributed_c10d._dump_fr_trace` is what the NCCL watchdog
writes on a timeout; gloo never dumps on its own, so the job asks for it.
"""

import os
import sys
import time

import torch
import torch._C._distributed_c10d as c10d
import torch.distributed as dist

out = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(4)
for _ in range(3):
    dist.all_reduce(t)
if rank == 0:
    dist.all_reduce(t, async_op=True)  # rank 1 never enters this collective
time.sleep(1)
with open(os.path.join(out, f"rank_{rank}"), "wb") as dump:
    dump.write(c10d._dump_fr_trace(True, True, False))
os._exit(0)  # rank 0's collective never completes; no teardown
