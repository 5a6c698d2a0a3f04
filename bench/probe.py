"""The probe's honesty and cost: the samples/s it predicts for a configuration against a full run of that
configuration (goal: within 15%), and the default probe of 2 process counts x 2 batches, then the compared pair again
in the other order (goal: under 4 min), of a long job (each configuration stopped once steady) and of the shipped
demo-cpu (each capped at the job's 300 steps)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from common import isolated_env, record
from jobs import gw, write_preset


def run(quick: bool = False) -> None:
    print("9. Probe")
    env = isolated_env()
    steps = 4000 if quick else 12000
    name = write_preset(env, "probe-bench", gpus=2, steps=steps, batch=8)
    start = time.perf_counter()
    result = gw(env, "probe", name, "--json")
    cost = time.perf_counter() - start
    assert result.returncode == 0, result.stdout + result.stderr
    probe = json.loads(result.stdout)
    what = "default probe (2 process counts x 2 batches, then 1 alternating round) of the demo"
    record("probe", what, cost, "s", None, "< 240 s", cost < 240)
    startup_row(probe, cost, "default probe")
    start = time.perf_counter()
    shipped = gw(env, "probe", "demo-cpu", "--json")
    cost = time.perf_counter() - start
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr
    load = os.getloadavg()[0]
    record("probe", f"`probe demo-cpu` (shipped, 300 steps; load {load:.1f})", cost, "s", None, "< 240 s", cost < 240)
    startup_row(json.loads(shipped.stdout), cost, "`probe demo-cpu`")
    for row in probe["rows"]:
        if row["outcome"] != "measured" or row["per_device_batch"] != 8:
            continue
        full = gw(env, "run", name, "--headless", "--gpus", str(row["gpus"]))
        assert full.returncode == 0, full.stdout + full.stderr
        runs = sorted((Path(env["GPUWIZARD_DATA_DIR"]) / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
        progress = json.loads((runs[-1] / "progress.json").read_text())
        actual = progress["samples_per_s_mean"] or progress["samples_per_s"]
        ratio = row["samples_per_s"] / actual
        record(
            "probe",
            f"predicted samples/s, {row['gpus']} process(es) x batch 8 (its windows {spread(row)}; ref: a {steps}-step "
            "run)",
            row["samples_per_s"],
            "samples/s",
            actual,
            "ratio 0.85-1.15",
            0.85 <= ratio <= 1.15,
        )


def startup_row(probe: dict, wall_s: float, what: str) -> None:
    """A probe's wall time against the sum of its configurations' start-up (launch to the first logged step): the
    ratio says how much of the probe is spent starting jobs rather than measuring them."""
    firsts = [r["first_step_s"] for r in probe["rows"] if r.get("first_step_s") is not None]
    if not firsts:
        return
    record(
        "probe",
        f"{what}: wall time against its {len(firsts)} configurations' start-up, summed (each "
        f"{min(firsts):.1f}-{max(firsts):.1f} s)",
        wall_s,
        "s",
        sum(firsts),
        "start-up share stated",
    )


def spread(row: dict) -> str:
    """The slowest-fastest sub-window of a probe row, as the probe's table shows it."""
    low, high = row.get("rate_low"), row.get("rate_high")
    return f"{low:.0f}-{high:.0f} /s" if low is not None and high is not None else "no spread kept"
