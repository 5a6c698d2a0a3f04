"""A job that floods its log like a chatty trainer; every 100th line is a demo-format step line, so the parser has
real work among the noise.

`flood_job.py N`: N lines, one write each (as under PYTHONUNBUFFERED=1).
`flood_job.py --rate R --seconds S [--done FILE]`: R lines a second for S seconds, written in blocks (as fast as it
can where R is more than this machine writes), then one summary line; FILE gets the wall time it ended and the
lines it wrote, as JSON, so a benchmark can tell how long the supervisor took to record the end.
"""

import argparse
import json
import os
import time

EVERY = 100
NOISE = "debug: rank0 fetched 8 samples from shard 3\n"
BLOCK_STEPS = 100
"""Step lines per write in paced mode: one write of 10,000 lines (about 450 kB)."""


def one_write_each(total: int) -> None:
    import sys

    write = sys.stdout.write
    for i in range(total):
        if i % EVERY == 0:
            write(f"[demo] step {i // EVERY}/{total // EVERY} loss=0.1234 lr=1.000e-03 samples/s=812.3\n")
        else:
            write(f"debug: rank0 batch {i} fetched 8 samples from shard {i % 17} in 0.{i % 1000:03d} ms\n")


def paced(rate: float, seconds: float) -> int:
    """Blocks of lines at `rate` lines a second for `seconds`; returns the lines written."""
    total_steps = int(rate * seconds) // EVERY
    noise = NOISE * (EVERY - 1)
    start, written, step = time.monotonic(), 0, 0
    while (now := time.monotonic()) - start < seconds:
        due = rate * (now - start)
        if written >= due:
            time.sleep(min(0.01, (written - due) / rate))
            continue
        block = "".join(
            f"[demo] step {s}/{total_steps} loss=0.1234 lr=1.000e-03 samples/s=812.3\n{noise}"
            for s in range(step + 1, step + 1 + BLOCK_STEPS)
        ).encode()
        os.write(1, block)
        step += BLOCK_STEPS
        written += BLOCK_STEPS * EVERY
    os.write(1, f"flood done: {written} lines in {time.monotonic() - start:.1f} s\n".encode())
    return written + 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("total", nargs="?", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--done")
    args = parser.parse_args()
    if args.rate is None:
        one_write_each(args.total)
        return
    lines = paced(args.rate, args.seconds)
    if args.done:
        with open(args.done + ".tmp", "w") as fh:
            json.dump({"ended": time.time(), "lines": lines}, fh)
        os.replace(args.done + ".tmp", args.done)


if __name__ == "__main__":
    main()
