"""`gpuwizard runs` and a run's closing summary (cli/runs.py) say a preset's scaling from its finished runs: an
efficiency above 100% only with its caveat (issue 35 item 3; analysis/compare/runs.scaling_line's rule)."""

from __future__ import annotations

import json

from gpuwizard.core import paths
from gpuwizard.runs.rundir import RunDir
from support.runs import copy_runs

ONE, TWO = "20261201-005642-demo-cmp", "20261201-005700-demo-cmp"
"""Two real finished demo-cmp runs (tests/data/runs): 1 process and 2 processes, 1.64x the samples/s (82%)."""
CAVEAT = "above 100%: the runs' load or batch per process differed, so it is no scaling"


def faster_two() -> RunDir:
    """The 2-process run as if it had read 3x the 1-process samples/s: 150%, which no added process gives."""
    copy_runs(paths.data_dir(), ONE, TWO)
    run = RunDir(paths.data_dir() / "runs" / TWO)
    record = json.loads((run.path / "progress.json").read_text())
    (run.path / "progress.json").write_text(json.dumps(record | {"samples_per_s_mean": 3 * 240.6827586206897}))
    return run


def test_the_runs_listing_gives_an_efficiency_above_100_percent_only_with_its_caveat(gw):
    copy_runs(paths.data_dir(), ONE, TWO)
    plain = gw("runs")
    assert plain.code == 0 and "1.64x, efficiency 82%" in plain.out and CAVEAT not in plain.out
    faster_two()
    said = gw("runs")
    assert said.code == 0 and f"3.00x, efficiency 150%, {CAVEAT}" in said.out


def test_a_finished_runs_closing_summary_gives_its_scaling_with_the_caveat():
    from gpuwizard.cli.runs import final_summary

    run = faster_two()
    text = final_summary(run, run.status())
    assert text.endswith(
        f"\nscaling of demo-cmp: 2 processes: 3.00x the 1-process samples/s (efficiency 150%, {CAVEAT})"
    )
