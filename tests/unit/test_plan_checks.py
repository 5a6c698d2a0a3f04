"""The command line's own help and version, the checks `plan` shares with `run`, and the messages and figures the
plan shows (issue 20: "ready" means it will start, errors that say how to fix themselves)."""

from __future__ import annotations

import os
import re

import pytest

from gpuwizard.analysis.compare.runs import compare, compare_text
from gpuwizard.core.units import fmt_hours
from gpuwizard.runs.rundir import RunDir
from support.runs import CMP_RUNS, copy_runs

COMMANDS = ["", "gpus", "plan", "preview", "run", "attach", "runs", "stop", "compare", "presets", "sweep"]


def test_version(gw):
    from gpuwizard import __version__

    result = gw("--version")
    assert result.code == 0 and result.out.strip() == f"gpuwizard {__version__}"


def entries_without_help(text: str) -> list[str]:
    """Argument entries of an argparse help text that have no help: a line at the entry indent with nothing after
    the argument, and no more-indented line under it."""
    lines = text.splitlines()
    missing = []
    in_section = False
    for i, line in enumerate(lines):
        if line.endswith(":") and not line.startswith(" "):
            in_section = line in ("positional arguments:", "options:")
            continue
        if not in_section or not re.match(r"^  \S", line):
            continue
        described = re.search(r"\S\s{2,}\S", line.strip()) is not None
        continued = i + 1 < len(lines) and re.match(r"^ {3,}\S", lines[i + 1]) is not None
        if not described and not continued:
            missing.append(line.strip())
    return missing


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_help(gw, command):
    result = gw(*([command] if command else []), "--help")
    assert result.code == 0
    assert entries_without_help(result.out) == [], result.out


def test_the_help_checker_finds_an_option_without_help():
    text = "options:\n  -h, --help  show this help message and exit\n  --json\n  --log       stream it\n"
    assert entries_without_help(text) == ["--json"]


def test_plan_and_preview_refuse_more_cpu_processes_than_cores(gw):
    cores = os.cpu_count() or 1
    for command in ("plan", "preview"):
        result = gw(command, "demo-cpu", "--gpus", cores + 1)
        assert result.code == 2, f"{command} accepted what run refuses"
        assert f"a CPU run starts one process per GPU slot, and this machine has {cores} cores" in result.err
    assert gw("plan", "demo-cpu", "--gpus", min(2, cores)).code == 0


def test_unquoted_no_says_to_quote_it(gw, write_preset):
    path = write_preset(
        "version: 1\nname: unquoted\ntrainer: demo\npolicy: demo\ndataset: {repo_id: a/b}\nmixed_precision: no\n"
    )
    result = gw("plan", path)
    assert result.code == 2
    assert (
        "mixed_precision = False: must be one of no, bf16, fp16; YAML reads an unquoted no as false. Fix: quote "
        'it: mixed_precision: "no".' in result.err
    )


@pytest.mark.parametrize(
    "minutes,shown",
    [(1.05, "1 min"), (1.6, "2 min"), (0.2, "<1 min"), (59.4, "59 min"), (59.7, "1.0 h"), (90, "1.5 h")],
)
def test_estimates_round_to_the_nearest_minute(minutes, shown):
    assert fmt_hours(minutes / 60) == shown


def test_compare_text_names_every_run_whole_and_fits_80_columns(isolated_dirs):
    copy_runs(isolated_dirs / "data", *CMP_RUNS)
    text = compare_text(compare([RunDir(isolated_dirs / "data" / "runs" / run_id) for run_id in CMP_RUNS]))
    lines = text.splitlines()
    for run_id in CMP_RUNS:
        assert any(line.split()[-1:] == [run_id] for line in lines), f"{run_id} whole on a line of its own"
    table = lines[: lines.index("") + 4]
    assert all(len(line) <= 80 for line in table), table
