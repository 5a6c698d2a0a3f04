"""Scaling report: the demo's samples/s on 1 and 2 processes and the efficiency the run report shows users."""

from __future__ import annotations

from common import isolated_env, record
from jobs import gw, write_preset


def run(quick: bool = False) -> None:
    print("5. Scaling report")
    env = isolated_env()
    name = write_preset(env, "scaling", gpus=2, steps=400 if quick else 1000)
    for gpus in ("1", "2"):
        result = gw(env, "run", name, "--headless", "--gpus", gpus)
        assert result.returncode == 0, result.stdout + result.stderr
    import os

    from gpuwizard.runs import rundir

    os.environ["GPUWIZARD_DATA_DIR"] = env["GPUWIZARD_DATA_DIR"]
    rows = {r["world_size"]: r for r in rundir.scaling_report(name)}
    report = gw(env, "runs").stdout
    assert "scaling of scaling" in report, report
    record("scaling", "demo samples/s on 1 process", rows[1]["samples_per_s"], "samples/s", None, "(info)")
    record(
        "scaling",
        "demo samples/s on 2 processes (ref: 1 process)",
        rows[2]["samples_per_s"],
        "samples/s",
        rows[1]["samples_per_s"],
        "(info)",
    )
    record(
        "scaling",
        "scaling efficiency shown by `gpuwizard runs` (speedup / 2)",
        rows[2]["efficiency"],
        "",
        None,
        "(reported)",
    )
    os.environ.pop("GPUWIZARD_DATA_DIR", None)
