"""What a job prints cannot forge what gpuwizard says of it (issue 29 item 7), and a trainer that logs no samples/s
per step still gets one (issue 28 item 2).

Upstream facts:
- transformers 5.24.0 trainer.py:2262-2268 (_maybe_log_save_evaluate): the per-step dict holds loss, grad_norm,
  learning_rate and epoch, no throughput; only the final dict has train_samples_per_second.
- transformers 5.24.0 trainer_callback.py:645 ProgressCallback: `tqdm(total=state.max_steps, dynamic_ncols=True)`,
  no description, one count per optimizer update: its `N it/s` (or `N s/it`, tqdm.format_meter) is the step rate.
- datasets' `Map` bar and other libraries' tqdm bars carry a description and their own total.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runner.detect.failures import FailureReader
from gpuwizard.runs.records import Expectations, LrSchedule
from gpuwizard.runs.tail import LogTail
from gpuwizard.trainers.registry import get_trainer
from support.data import DATA

HF_LOG = DATA / "logs" / "hf524_tiny_2proc_accum2_linear_lr.log"
"""gpuwizard run of tests/data/hf/tiny_train.py on 2 CPU processes, batch 4 x accumulation 2 (16 per update), 10
steps, --logging_steps 1, transformers 5.24.0."""
HF_BATCH = 16
BAR_RATE = re.compile(r"\| (\d+)/10 \[[^\]]*, (\d+\.\d+)it/s\]")


def hf_monitor(**kw: Any) -> JobMonitor:
    schedule = LrSchedule(peak=2e-3, warmup_steps=1, decay="linear", decay_start=1, decay_end=10, lag=1)
    base: dict[str, Any] = dict(
        steps=10,
        lr=2e-3,
        warmup_steps=1,
        schedule=schedule,
        log_interval=1,
        effective_batch=HF_BATCH,
        world_size=2,
        hang_timeout_s=300.0,
    )
    return JobMonitor(Expectations(**(base | kw)), get_trainer("hf"), now=0.0)


def pieces(text: str) -> list[str]:
    """The log as the job wrote it: every newline and every carriage return (a bar redraw) is one write."""
    return [p for p in re.split(r"(?<=[\r\n])", text) if p]


def feed_live(monitor: JobMonitor, text: str, tmp_path: Path, dt: float = 0.5) -> list:
    """Each write appended to a real file and read back by LogTail, as the supervisor polls a live log."""
    log, events, now = tmp_path / "log.txt", [], 0.0
    log.write_text("")
    tail = LogTail(log)
    for piece in pieces(text):
        with log.open("a") as fh:
            fh.write(piece)
        now += dt
        chunk = tail.read()
        events += monitor.feed_text(chunk.text, chunk.line_count, now=now, bar=chunk.bar)
    return events


def test_an_hf_log_gets_samples_per_s_from_its_bar_rate_times_the_banner_batch(tmp_path):
    """Every metric after the first bar with a rate carries that bar's it/s x the Trainer's total train batch."""
    monitor = hf_monitor()
    text = HF_LOG.read_text()
    assert feed_live(monitor, text, tmp_path) == []
    metrics = monitor.take_metrics()
    assert [m.step for m in metrics] == list(range(1, 11))
    rate_before = {}  # the last bar rate written before each dict
    last = None
    for piece in pieces(text):
        if match := BAR_RATE.search(piece):
            last = float(match[2])
        elif "{'loss'" in piece:
            rate_before[len(rate_before) + 1] = last
    timed = [m for m in metrics if rate_before[m.step] is not None]
    assert len(timed) >= 8
    for m in timed:
        assert m.samples_per_s == pytest.approx(rate_before[m.step] * HF_BATCH)
    assert monitor.progress.samples_per_s and monitor.progress.samples_per_s_mean


def test_without_a_bar_rate_samples_per_s_is_steps_over_time_times_the_batch(tmp_path):
    """tqdm before its rate is known prints `?it/s`: then the steps the log showed over the time they took."""
    monitor = hf_monitor()
    text = re.sub(r"\d+\.\d+(?:it/s|s/it)", "?it/s", HF_LOG.read_text())
    text = text[: text.index("{'train_runtime'")]  # the final dict has the Trainer's own whole-run mean
    assert feed_live(monitor, text, tmp_path, dt=0.5) == []
    rates = [m.samples_per_s for m in monitor.take_metrics() if m.samples_per_s is not None]
    assert len(rates) >= 5 and all(r > 0 for r in rates), "the run has a samples/s"
    steps_per_s = monitor.progress.steps_per_s
    assert steps_per_s and monitor.progress.samples_per_s == pytest.approx(steps_per_s * HF_BATCH)


def test_a_trainer_that_logs_its_own_rate_keeps_it():
    """The demo's step lines carry samples/s: its own figure, not one derived from its steps."""
    monitor = JobMonitor(hf_expect(), get_trainer("demo"), now=0.0)
    for step in range(1, 6):
        monitor.feed(f"[demo] step {step}/10 loss=0.5 lr=1.000e-04 samples/s=123.0", now=step)
        monitor.feed(f"Training:  {step * 10}%|#   | {step}/10 [00:01<00:04, 50.00step/s]", now=step + 0.5)
    assert monitor.progress.samples_per_s == 123.0


def hf_expect() -> Expectations:
    return Expectations(steps=10, lr=1e-4, warmup_steps=0, effective_batch=16, world_size=1, hang_timeout_s=30.0)


@pytest.mark.parametrize(
    "bar",
    [
        "Map: 100%|##########| 56/56 [00:00<00:00, 1234.56 examples/s]",
        "Running tokenizer on dataset:  50%|#####     | 28/56 [00:00<00:00, 99.0ba/s]",
        "100%|##########| 56/56 [00:01<00:00, 40.00it/s]",  # an eval bar: HF's prediction bar has no description
    ],
)
def test_another_progress_bar_is_not_the_runs_progress(bar, tmp_path):
    """A datasets 'Map' bar or an eval bar in the middle of a run leaves the step, the total and the rate alone."""
    monitor = hf_monitor()
    text = HF_LOG.read_text()
    cut = text.index("[transformers] Saving model checkpoint")
    feed_live(monitor, text[:cut], tmp_path)
    before = (monitor.progress.step, monitor.progress.total, monitor.progress.samples_per_s)
    monitor.feed_text(None, 0, now=1e6, bar=bar)
    monitor.feed(bar, now=1e6 + 1)
    assert (monitor.progress.step, monitor.progress.total, monitor.progress.samples_per_s) == before
    assert before[1] == 10 and before[0] is not None and before[0] <= 10


@pytest.mark.parametrize(
    "line",
    [
        "[transformers] retrying the batch after CUDA out of memory on a shared GPU",
        "INFO 2026-12-01 ot_train.py:12 sample text: 'Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=1)'",
        "[hf_tiny] note: NCCL error handling is enabled (TORCH_NCCL_ASYNC_ERROR_HANDLING=1)",
        "    raise RuntimeError('CUDA out of memory')  # the source line of a traceback",
        "dataset card: failed to pass monitoredBarrier is a known gloo message",
    ],
)
def test_words_of_an_error_inside_a_message_raise_no_event(line):
    assert FailureReader().feed_text(line) == []
    assert JobMonitor(hf_expect(), get_trainer("hf")).feed(line) == []


def test_the_errors_torch_prints_still_raise_their_events():
    """The c10d watchdog line of torch 2.6+ names its rank inside the process-group tag."""
    lines = [
        "[rank1]:[E1201 12:00:00.123456 4242 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID "
        "0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.",
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
        "tried to allocate 1125899906842624 bytes. Error code 12 (Cannot allocate memory)",
    ]
    events = FailureReader().feed_text("\n".join(lines))
    assert [(e.kind, e.rank) for e in events] == [
        ("collective_timeout", 1),
        ("out_of_memory", None),
        ("out_of_memory", None),
    ]


@pytest.mark.parametrize("wild", ["1e+308", "inf", "nan"])
def test_an_lr_gone_wild_after_a_good_check_is_a_mismatch(wild):
    """The first lr after warmup was right; a later 1e308 (or a non-number) is still no run at the planned lr."""
    monitor = JobMonitor(hf_expect(), get_trainer("demo"), now=0.0)
    assert monitor.feed("[demo] step 1/10 loss=0.5 lr=1.000e-04 samples/s=10.0", now=1) == []
    assert monitor.lr_checked
    events = monitor.feed(f"[demo] step 2/10 loss=0.5 lr={wild} samples/s=10.0", now=2)
    assert [e.kind for e in events] == ["lr_mismatch"]
    assert f"{float(wild):.3g}" in events[0].detail
    assert monitor.feed("[demo] step 3/10 loss=0.5 lr=1e+308 samples/s=10.0", now=3) == [], "said once"


@pytest.mark.parametrize(
    "error, advice",
    [
        ("FileNotFoundError: [Errno 2] No such file or directory: '/data/episodes.parquet'", "path"),
        ("ModuleNotFoundError: No module named 'diffusers'", "install"),
        ("PermissionError: [Errno 13] Permission denied: '/out/ckpt'", "permissions"),
        ("RuntimeError: injected crash at step 30 on rank 1", "smoke run"),
    ],
)
def test_a_failed_rank_gets_advice_for_its_error(error, advice):
    """A missing file is not a case for a smoke run; an unknown crash is."""
    table = (
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-12-01_00:00:00\n  host      : h\n"
        f"  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 42)\n  error_file: <N/A>\n  traceback : {error}\n"
        "============================================================\n"
    )
    events = [e for e in FailureReader().feed_text(table) if e.kind == "rank_failed"]
    assert len(events) == 1 and advice in events[0].suggestion
    assert ("smoke run" in events[0].suggestion) == (advice == "smoke run")


def test_openpi_gets_samples_per_s_from_its_tqdm_loggable_rate():
    """openpi logs no throughput (scripts/train.py:266-267 writes `Step N: loss=...`); its non-TTY bar,
    tqdm_loggable's `Progress on: ... rate:163.0s/it` (tqdm_logging.py: f"{1/rate:,.1f}s/{unit}" below one step a
    second), is the step rate. The line is from the real debug run (tests/trainers/test_openpi.py)."""
    expect = Expectations(steps=4, lr=1e-4, warmup_steps=0, effective_batch=32, world_size=1, hang_timeout_s=30.0)
    monitor = JobMonitor(expect, get_trainer("openpi"), now=0.0)
    monitor.feed(
        "09:25:20.525 [I] Progress on: 2.00it/4.00it rate:163.0s/it remaining:05:26 elapsed:08:40 postfix:- "
        "(32084:tqdm_logging.py:145)",
        now=1.0,
    )
    assert monitor.progress.step == 2 and monitor.progress.samples_per_s == pytest.approx(32 / 163.0)
    monitor.feed("Step 2: grad_norm=10.3374, loss=2.5969, param_norm=477.8596", now=2.0)
    [metric] = monitor.take_metrics()
    assert metric.step == 3 and metric.samples_per_s == pytest.approx(32 / 163.0)


def test_a_run_is_progressing_while_its_steps_come_within_the_hang_limit():
    """What `d` (a stack dump the user asks for) is told: healthy while steps come, not once the limit passed."""
    monitor = JobMonitor(hf_expect(), get_trainer("demo"), now=0.0)
    assert not monitor.progressing(1.0), "no step yet: nothing says the run is healthy"
    monitor.feed("[demo] step 1/10 loss=0.5 lr=1.000e-04 samples/s=10.0", now=2.0)
    assert monitor.progressing(10.0)
    assert not monitor.progressing(2.0 + monitor.threshold(2.0)[0] + 1)
