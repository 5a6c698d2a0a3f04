"""The supervisor's log pump: a backlog it cannot parse in time is skipped down to the newest lines, counted and said
in one event; one it can parse is read whole, and nothing is said. A real run folder and supervisor, logs on disk."""

from __future__ import annotations

import sys

from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runner.supervise.outputpump import OutputPump
from gpuwizard.runner.supervise.supervisor import Supervisor
from gpuwizard.runs.tail import LogTail
from gpuwizard.trainers.registry import get_trainer
from support.runs import hand_made_run

NOISE = "debug: rank0 fetched 8 samples from shard 3\n" * 99


def flood_log(path, steps: int) -> int:
    """A log as bench/flood_job.py writes it: a step line, then 99 lines of noise; returns its line count."""
    with open(path, "w") as fh:
        for step in range(1, steps + 1):
            fh.write(f"[demo] step {step}/{steps} loss=0.1234 lr=1.000e-03 samples/s=812.3\n{NOISE}")
    return steps * 100


def supervised(tmp_path) -> tuple[Supervisor, JobMonitor]:
    run = hand_made_run(tmp_path / "runs" / "20261202-000000-pump", [sys.executable, "-c", "pass"])
    sup = Supervisor(run)
    return sup, JobMonitor(sup.job_cfg.expect, get_trainer("demo"))


def test_a_backlog_beyond_the_lag_limit_is_skipped_to_its_newest_lines_and_said(tmp_path):
    sup, monitor = supervised(tmp_path)
    lines = flood_log(sup.run.log, 3000)  # 13 MB: far more than the tiny limit below allows
    pump = OutputPump(sup.run.log, max_lag_s=2e-3, keep_s=1e-3)
    while not pump.pump(sup, monitor):
        pass
    pump.drain(sup, monitor)
    p = monitor.progress
    assert p.step == 3000, "the newest lines were parsed"
    sampled = [e for e in sup.run.events()[0] if e.kind == "output_sampled"]
    assert len(sampled) == 2 and "so far" in sampled[0].title and "in all" in sampled[1].title, "once, then the total"
    total = sampled[-1]
    assert "the job printed faster than gpuwizard can read" in total.title
    assert total.data["lines"] == pump.skipped_lines and 0 < pump.skipped_bytes < sup.run.log.stat().st_size
    assert abs(p.lines - lines) <= lines * 0.02, f"{p.lines} counted of {lines}: the skipped part estimated"


def test_a_backlog_it_can_parse_is_read_whole_and_nothing_is_said(tmp_path):
    sup, monitor = supervised(tmp_path)
    lines = flood_log(sup.run.log, 300)
    pump = OutputPump(sup.run.log)
    while not pump.pump(sup, monitor):
        pass
    pump.drain(sup, monitor)
    assert (monitor.progress.step, monitor.progress.lines, pump.skipped_bytes) == (300, lines, 0)
    assert [e for e in sup.run.events()[0] if e.kind == "output_sampled"] == []


def test_a_tail_that_skips_ahead_drops_the_line_it_lands_in(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("first\nsecond line\nthird\n")
    tail = LogTail(log)
    assert tail.backlog() == log.stat().st_size
    assert tail.skip_to(9) == 9 and tail.backlog() == log.stat().st_size - 9
    chunk = tail.read()
    assert chunk.lines == ["third"] and chunk.skipped == len("ond line\n")
    assert tail.skip_to(3) == 0, "never backwards"
