"""torch's NCCL Flight Recorder: every CUDA run records its last collectives and dumps them into the run folder on a
collective timeout; after such a run, torch's own analyzer names the ranks that never entered the collective."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gpuwizard.core.kinds import EventKind, Severity
from gpuwizard.runs.records import Event

DUMP_DIR = "flight_recorder"
BUFFER_ENTRIES = "2000"
ANALYZER = "torch.distributed.flight_recorder.fr_trace"
ANALYZER_TIMEOUT_S = 120

MISSING = re.compile(
    r"Not all ranks joining collective, sequence number: (?P<seq>\d+)(?P<body>.*?)(?=Not all ranks joining|\Z)", re.S
)
COLLECTIVE = re.compile(r"^collective: (?P<name>\S+)", re.M)
MISSING_RANKS = re.compile(r"^missing ranks: \{(?P<ranks>[\d, ]*)\}", re.M)
NO_DUMP = re.compile(r"Missing dump files from ranks \{(?P<ranks>[\d, ]*)\}")


def flight_recorder_env(run_dir: Path) -> dict[str, str]:
    """Both spellings where torch renamed them (TORCH_NCCL_* before 2.7, TORCH_FR_* since); the dump-on-timeout
    switch kept its NCCL name."""
    prefix = str(run_dir / DUMP_DIR / "rank_")
    return {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": BUFFER_ENTRIES,
        "TORCH_FR_BUFFER_SIZE": BUFFER_ENTRIES,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
        "TORCH_FR_DUMP_TEMP_FILE": prefix,
    }


@dataclass(frozen=True)
class Finding:
    """A collective some ranks never entered (or ranks that left no dump at all, seq None)."""

    missing_ranks: tuple[int, ...]
    collective: str | None = None
    seq: int | None = None


def ranks_of(text: str) -> tuple[int, ...]:
    return tuple(sorted(int(r) for r in re.findall(r"\d+", text)))


def parse_analysis(text: str) -> list[Finding]:
    """The analyzer's report (fr_trace's log lines, torch 2.13: flight_recorder/components/utils.py error_analysis
    and types.py EntryState.log)."""
    found = []
    for block in MISSING.finditer(text):
        body = block["body"]
        ranks = MISSING_RANKS.search(body)
        if ranks is None:
            continue
        name = COLLECTIVE.search(body)
        found.append(Finding(ranks_of(ranks["ranks"]), name["name"] if name else None, int(block["seq"])))
    for no_dump in NO_DUMP.finditer(text):
        found.append(Finding(ranks_of(no_dump["ranks"])))
    return found


def analyze(python: str, run_dir: Path) -> Event | None:
    """Run the analyzer in the training environment on the run's dumps; one event naming the missing ranks."""
    dumps = run_dir / DUMP_DIR
    if not dumps.is_dir() or not any(dumps.iterdir()):
        return None
    try:
        out = subprocess.run(
            [python, "-m", ANALYZER, str(dumps)],
            capture_output=True,
            text=True,
            timeout=ANALYZER_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return Event(
            kind=EventKind.FLIGHT_RECORDER,
            severity=Severity.WARNING,
            title="the Flight Recorder dumps could not be analyzed",
            detail=f"{python} -m {ANALYZER}: {exc}",
        )
    findings = parse_analysis(out.stdout + "\n" + out.stderr)
    if not findings:
        return None
    first = findings[0]
    ranks = ", ".join(map(str, first.missing_ranks))
    if first.collective is None:
        title = f"rank(s) {ranks} left no Flight Recorder dump: they died or hung before the timeout"
    else:
        title = f"rank(s) {ranks} never entered {first.collective} (collective #{first.seq})"
    return Event(
        kind=EventKind.FLIGHT_RECORDER,
        severity=Severity.ERROR,
        title=title,
        detail=f"torch's Flight Recorder analyzer on the dumps in {dumps}: "
        + "; ".join(
            f"#{f.seq} {f.collective}: ranks {', '.join(map(str, f.missing_ranks))} missing"
            if f.collective
            else f"no dump from ranks {', '.join(map(str, f.missing_ranks))}"
            for f in findings[:5]
        ),
        suggestion="Look at what those ranks did instead (their log lines, a stack dump): code that runs on some "
        "ranks only (rank-0 saves or eval, uneven data shards) keeps the others waiting in the collective.",
        rank=first.missing_ranks[0] if first.missing_ranks else None,
        data={"findings": [f.__dict__ for f in findings]},
    )
