"""A job that floods its log like a chatty trainer: N lines, one write each (as under PYTHONUNBUFFERED=1).

Every 100th line is a demo-format step line, so the parser has real work among the noise.
"""

import sys

total = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
write = sys.stdout.write
for i in range(total):
    if i % 100 == 0:
        write(f"[demo] step {i // 100}/{total // 100} loss=0.1234 lr=1.000e-03 samples/s=812.3\n")
    else:
        write(f"debug: rank0 batch {i} fetched 8 samples from shard {i % 17} in 0.{i % 1000:03d} ms\n")
