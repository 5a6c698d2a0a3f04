"""All benchmarks, one table: `python bench/run_all.py [--quick] [--only startup,ingest,...]`.

Every figure is measured against a reference taken in the same run, so ratios hold on a noisy machine.
Results are written to bench/out/results.json.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import badinput
import biglog
import doctor
import flood
import hang
import history
import ingest
import listing
import overhead
import probe
import runstart
import scaling
import slurm
import startup
from common import RESULTS, ROOT, machine, save

SECTIONS = {
    "startup": startup.run,
    "ingest": ingest.run,
    "overhead": overhead.run,
    "hang": hang.run,
    "scaling": scaling.run,
    "history": history.run,
    "listing": listing.run,
    "biglog": biglog.run,
    "flood": flood.run,
    "slurm": slurm.run,
    "probe": probe.run,
    "runstart": runstart.run,
    "doctor": doctor.run,
    "badinput": badinput.run,
}


def main() -> int:
    quick = "--quick" in sys.argv
    only = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")), list(SECTIONS))
    print(f"gpuwizard benchmarks on {machine()}{' (quick)' if quick else ''}")
    print(f"  {'figure':<58} {'value':>12} {'unit':<10} {'reference':>14}  {'ratio':>13}  {'goal':<18} met")
    start = time.time()
    for name in only:
        if name == "startup":
            SECTIONS[name](repeat=3 if quick else 9)
        else:
            SECTIONS[name](quick=quick)
    save(ROOT / "bench" / "out" / "results.json")
    missed = [r["figure"] for r in RESULTS if r["met"] is False]
    print(f"done in {time.time() - start:.0f} s; goals missed: {missed or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
