"""A job that floods its log at about 1M and 10M lines a second, under the real supervisor: the worst gap between
progress.json writes (written every 0.5 s), how far the step in it lags the job, how long after the job's end the
final status is recorded, and how many lines were not parsed; each over repeats, with their spread.

`python bench/flood.py [--quick] [--seconds=S]` (or `--only=flood` through run_all.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from common import PYTHON, ROOT, isolated_env, median, record
from ingest import make_run

RATES = (1_000_000, 10_000_000)
EVERY = 100
"""flood_job.py prints a step line every this many lines."""


def one_flood(rate: int, seconds: float) -> dict[str, float]:
    """One supervised flood; its figures, watched from outside (progress.json's mtime and step every 20 ms)."""
    from gpuwizard.runs.rundir import RunDir

    env = isolated_env(PYTHONUNBUFFERED="1")
    base = Path(env["GPUWIZARD_DATA_DIR"])
    done = base / "flood-done.json"
    argv = [PYTHON, str(ROOT / "bench" / "flood_job.py"), "--rate", str(rate), "--seconds", str(seconds)]
    run = RunDir(make_run(base, int(rate * seconds), argv=[*argv, "--done", str(done)]))
    sup = subprocess.Popen(
        [PYTHON, "-m", "gpuwizard.runner.supervise.supervisor", str(run.path)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    progress = run.path / "progress.json"
    writes: list[tuple[float, int | None]] = []  # (mtime, step) of each progress write seen
    try:
        while sup.poll() is None:
            try:
                mtime = progress.stat().st_mtime
            except OSError:
                mtime = None
            if mtime is not None and (not writes or mtime != writes[-1][0]):
                p = run.progress()
                writes.append((mtime, p.step if p else None))
            time.sleep(0.02)
        status, job = run.status(), json.loads(done.read_text())
    finally:
        if sup.poll() is None:
            sup.kill()
        run.log.unlink(missing_ok=True)  # gigabytes
    started, achieved = status.started or 0.0, job["lines"] / seconds
    gaps = [b[0] - a[0] for a, b in zip(writes, writes[1:], strict=False)]
    lags = [t - (started + step * EVERY / achieved) for t, step in writes if step and t <= job["ended"]]
    sampled = [e for e in run.events()[0] if e.kind == "output_sampled"]
    return {
        "gap_s": max(gaps, default=float("inf")),
        "lag_s": max(lags, default=float("inf")),
        "finish_s": (status.ended or float("inf")) - job["ended"],
        "rate": achieved,
        "unparsed": sampled[-1].data["lines"] / job["lines"] if sampled else 0.0,
        "ok": float(status.state == "finished" and status.job_exit_code == 0),
    }


def spread(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    return f"{min(values) * scale:.{digits}f}-{max(values) * scale:.{digits}f}"


def run(quick: bool = False, seconds: float = 10.0) -> None:
    print("Flooding job: the supervisor's heartbeat and end")
    repeats = 2 if quick else 3
    for rate in RATES:
        found = [one_flood(rate, seconds) for _ in range(repeats)]
        label = f"{rate / 1e6:.0f}M lines/s for {seconds:.0f} s"
        rates = [f["rate"] for f in found]
        print(f"  {label}: the job printed {spread(rates, 1e-6)}M lines/s; {repeats} repeats")
        worst = {key: [f[key] for f in found] for key in ("gap_s", "lag_s", "finish_s", "unparsed", "ok")}
        record(
            "flood",
            f"{label}: worst gap between progress writes, median (spread {spread(worst['gap_s'])} s)",
            median(worst["gap_s"]),
            "s",
            0.5,
            "< 3 s",
            max(worst["gap_s"]) < 3,
        )
        record(
            "flood",
            f"{label}: worst lag of the step in progress.json (spread {spread(worst['lag_s'])} s)",
            median(worst["lag_s"]),
            "s",
            None,
            "< 5 s",
            max(worst["lag_s"]) < 5,
        )
        record(
            "flood",
            f"{label}: job end to final status (spread {spread(worst['finish_s'])} s)",
            median(worst["finish_s"]),
            "s",
            None,
            "< 5 s",
            max(worst["finish_s"]) < 5,
        )
        record(
            "flood",
            f"{label}: share of lines not parsed (spread {spread(worst['unparsed'], 100, 0)} %)",
            median(worst["unparsed"]) * 100,
            "%",
            None,
            "(info)",
        )
        record(
            "flood",
            f"{label}: runs recorded finished, exit 0",
            sum(worst["ok"]),
            "runs",
            repeats,
            "all",
            all(worst["ok"]),
        )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    secs = next((float(a.split("=", 1)[1]) for a in sys.argv if a.startswith("--seconds=")), 10.0)
    run(quick="--quick" in sys.argv, seconds=secs)
