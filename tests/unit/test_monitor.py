"""Log parsing and the job monitor, fed with real captured logs and an explicit clock."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runner.detect.stalls import classify_ranks
from gpuwizard.runs.records import Expectations, GpuSample, RankState
from gpuwizard.runs.tail import LogTail
from gpuwizard.trainers.logparse import big_number, parse_hf, parse_lerobot, parse_openpi
from gpuwizard.trainers.registry import get_trainer
from support.data import DATA
from support.runs import status_record

LEROBOT_LOG = DATA / "logs" / "lerobot061_act_2proc_cpu.log"
LEROBOT_MAIN_ACCUM_LOG = DATA / "logs" / "lerobot_main7427f31_act_2proc_accum2.log"
"""Real lerobot-train at main 7427f31 (shared/vendor), ACT on 2 CPU processes, batch 2, accumulation 2, 8 updates:
--steps=16 loop steps, ending at `step:16 smpl:64`."""
LEROBOT_MAIN_RESUMED_LOG = DATA / "logs" / "lerobot_main7427f31_act_resumed_at_8.log"
"""The same run to 60 loop steps, stopped after its step-8 checkpoint and resumed with --config_path --resume=true:
its tqdm bar counts 0..52 (tqdm(total=cfg.steps - step) in lerobot_train.py) while its step lines go 10..60."""
CRASH_LOG = DATA / "logs" / "demo_crash_rank1.log"


def expect(**kw) -> Expectations:
    base = dict(steps=100, lr=1e-4, warmup_steps=0, effective_batch=16, world_size=2, hang_timeout_s=30.0)
    return Expectations(**(base | kw))


def rank_state(rank: int, local_rank: int, pid: int, cpu: float | None, status: str, alive: bool = True) -> RankState:
    return RankState(rank=rank, local_rank=local_rank, pid=pid, cpu=cpu, status=status, alive=alive)


def feed_file(monitor: JobMonitor, path: Path, t0: float = 1000.0, dt: float = 0.5):
    """Feed a real log line by line (each line a chunk), with an explicit clock."""
    events, t = [], t0
    for line in LogTail(path).read().lines:
        t += dt
        events += monitor.feed(line, now=t)
    return events


@pytest.mark.parametrize(
    "text, value",
    [("999", (999, True)), ("12K", (12000, False)), ("2M", (2000000, False)), ("1000K", (1000000, False))],
)
def test_big_number(text, value):
    assert big_number(text) == value


def test_real_lerobot_061_log_is_parsed_end_to_end():
    monitor = JobMonitor(expect(steps=20, lr=2e-5, effective_batch=4, warmup_steps=1), get_trainer("lerobot"))
    events = feed_file(monitor, LEROBOT_LOG)
    p = monitor.progress
    assert (p.step, p.total, p.loss, p.lr, p.samples_per_s, p.checkpoints, p.finished) == (
        20,
        20,
        8.322,
        2e-5,
        2.0,
        1,
        True,
    )
    assert events == [], "planned lr 2e-5 and effective batch 4 match what LeRobot logged"


@pytest.mark.parametrize(
    "log, effective, per_step, last_step_s",
    [(LEROBOT_LOG, 4, 4, 1.580 + 0.090), (LEROBOT_MAIN_ACCUM_LOG, 8, 4, 0.691)],
    ids=["0.6.1", "main-7427f31"],
)
def test_a_rounded_lerobot_rate_gets_its_digits_back_from_the_logged_step_time(log, effective, per_step, last_step_s):
    """Real logs: LeRobot prints smp/s:2 and smp/s:6, rounded (AverageMeter("smp/s", ":.0f")), from the samples of one
    step over its step time (lerobot_train.py: 0.6.1 effective_batch_size / (updt_s + data_s), line 640; main 7427f31
    samples_per_step / step_s, samples_per_step = batch_size x dp_world_size, lines 599 and 768). Main with
    accumulation 2 counts micro-batches: 4 samples a logged step of an effective batch of 8."""
    monitor = JobMonitor(expect(effective_batch=effective, samples_per_step=per_step), get_trainer("lerobot"))
    feed_file(monitor, log)
    rate = monitor.progress.samples_per_s
    assert rate == pytest.approx(per_step / last_step_s) and rate != round(rate)
    assert abs(rate - round(rate)) < 0.5, "agrees with the figure LeRobot printed"
    forged = "step:20 smpl:80 ep:2 epch:0.50 loss:8.3 grdn:3.0 lr:2.0e-05 updt_s:1.580 data_s:0.090 smp/s:50"
    monitor.feed(forged, now=10_000)
    assert monitor.progress.samples_per_s == 50.0, "a logged figure the formula does not give back is kept as logged"


def test_real_lerobot_log_catches_ignored_lr_and_wrong_batch():
    monitor = JobMonitor(expect(steps=20, lr=2e-4, effective_batch=8), get_trainer("lerobot"))
    kinds = {e.kind: e for e in feed_file(monitor, LEROBOT_LOG)}
    assert kinds["lr_mismatch"].data["logged"] == pytest.approx(2e-5) and kinds["lr_mismatch"].data[
        "expected"
    ] == pytest.approx(2e-4)
    assert "--optimizer.lr" in kinds["lr_mismatch"].suggestion
    assert kinds["batch_mismatch"].data == {"logged": 4, "expected": 8}


def test_lerobot_main_line_and_rounded_steps():
    line = (
        "INFO 2026-08-23 10:11:12 ot_train.py:769 step:12K smpl:384K ep:1K epch:19.20 loss:0.512 grdn:12.346 "
        "lr:1.0e-05 data_s:0.012 prep_s:0.003 updt_s:0.250 step_s:0.266 smp/s:120 mem_gb:7.12 "
        "l1_loss:0.410 kld_loss:10.200"
    )
    info = parse_lerobot(line)
    assert (info.step, info.step_is_exact, info.loss, info.lr, info.samples_per_s) == (12000, False, 0.512, 1e-5, 120.0)
    banner = parse_lerobot(
        "INFO 2026-08-23 10:00:00 ot_train.py:614 Effective batch size: 8 x 4 dp workers x 2 grad accum = 64 "
        "(topology: dp_replicate=4, dp_shard=1)"
    )
    assert banner.effective_batch == 64
    monitor = JobMonitor(expect(steps=20000), get_trainer("lerobot"))
    monitor.feed("Training:  62%|######2   | 12400/20000 [10:00<06:00, 20.1step/s]", now=1)
    monitor.feed(line, now=2)
    assert monitor.progress.step == 12400, "a rounded step:12K never overrides the exact tqdm counter"


def test_hf_groot_and_openpi_lines():
    hf = parse_hf("{'loss': 0.0412, 'grad_norm': 0.87, 'learning_rate': 9.98e-05}")
    assert (hf.loss, hf.lr) == (0.0412, 9.98e-05)
    assert math.isnan(parse_hf("{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05}").loss), "v4's bare nan stops"
    assert parse_hf(
        "{'train_runtime': 100.1, 'train_samples_per_second': 64.0, 'train_steps_per_second': 1.0, 'train_loss': 0.1}"
    ).finished
    assert parse_hf("  5%|▌         | 500/10000 [05:00<1:35:00,  1.67it/s]").step == 500
    jax = parse_openpi("Step 100: grad_norm=0.3368, loss=0.0830, param_norm=1803.7704")
    assert (jax.step, jax.loss) == (101, 0.083), "openpi numbers a line by the update it follows"
    torch_line = parse_openpi("step=200 loss=0.0412 lr=2.50e-05 grad_norm=0.87 time=0.5s")
    assert (torch_line.step, torch_line.lr) == (201, 2.5e-5)
    assert parse_openpi("Using batch size per GPU: 8 (total batch size across 4 GPUs: 32)").effective_batch == 32


def test_torchrun_failure_table_names_the_rank_and_error():
    monitor = JobMonitor(expect(), get_trainer("demo"))
    events = [e for e in feed_file(monitor, CRASH_LOG) if e.kind == "rank_failed"]
    assert len(events) == 1
    assert events[0].rank == 1 and events[0].data["exitcode"] == 1
    assert events[0].data["error"] == "RuntimeError: injected crash at step 30 on rank 1"


@pytest.mark.parametrize(
    "line, kind, rank",
    [
        (
            "[rank1]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) "
            "ran for 600081 milliseconds before timing out.",
            "collective_timeout",
            1,
        ),
        (
            "[E ProcessGroupNCCL.cpp:828] [Rank 0] Watchdog caught collective operation timeout: "
            "WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800391 milliseconds before timing out.",
            "collective_timeout",
            0,
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 1800000ms "
            "for recv operation to complete",
            "collective_timeout",
            None,
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "23.65 GiB",
            "out_of_memory",
            None,
        ),
        ("host:1234:1300 [0] NCCL WARN NET/Socket : peer 10.0.0.2<34567> closed connection", "nccl_error", None),
        ("OSError: [Errno 28] No space left on device", "disk_full", None),
        ("[rank0]: OSError: [Errno 122] Disk quota exceeded: 'outputs/train/x/checkpoints/000100'", "disk_full", None),
        ("cp: error writing 'outputs/ckpt.safetensors': No space left on device", "disk_full", None),
    ],
)
def test_known_signatures_are_recognised_at_once(line, kind, rank):
    monitor = JobMonitor(expect(), get_trainer("demo"))
    events = monitor.feed(line, now=1)
    assert [(e.kind, e.rank) for e in events] == [(kind, rank)]
    assert events[0].suggestion
    assert monitor.feed(line, now=2) == [], "the same signature is reported once"


def steady_monitor(interval: float = 1.0, steps: int = 10, **kw) -> tuple[JobMonitor, float]:
    monitor = JobMonitor(expect(steps=1000, **kw), get_trainer("demo"), now=0.0)
    t = 5.0
    for step in range(1, steps + 1):
        monitor.feed(f"[demo] step {step}/1000 loss=0.5 lr=1.000e-04 samples/s=100.0", now=t)
        t += interval
    return monitor, t - interval


IDLE = [rank_state(0, 0, 100, 1.0, "sleeping"), rank_state(1, 1, 101, 0.5, "sleeping")]
BUSY = [rank_state(0, 0, 100, 99.0, "running"), rank_state(1, 1, 101, 98.0, "running")]


def test_hang_is_raised_after_the_timeout_and_only_once():
    monitor, last = steady_monitor()
    assert monitor.tick(last + 29, IDLE) == []
    events = monitor.tick(last + 31, IDLE)
    assert [e.kind for e in events] == ["hang_suspected"]
    assert "No new step for 31 s" in events[0].detail and "smoke run" in events[0].suggestion
    assert monitor.tick(last + 40, IDLE) == []


def test_threshold_adapts_to_slow_steps():
    monitor, last = steady_monitor(interval=20.0)
    limit, why = monitor.threshold(last)
    assert limit == pytest.approx(100.0) and "90th-percentile" in why
    assert monitor.tick(last + 60, IDLE) == []
    assert [e.kind for e in monitor.tick(last + 101, IDLE)] == ["hang_suspected"]


def test_longer_allowance_before_the_first_step():
    monitor = JobMonitor(expect(hang_timeout_s=30), get_trainer("demo"), now=0.0)
    assert monitor.threshold(0)[0] == 600.0
    assert monitor.tick(300, IDLE) == []
    assert [e.kind for e in monitor.tick(601, IDLE)] == ["hang_suspected"]
    custom = JobMonitor(expect(hang_timeout_s=30, first_step_timeout_s=45), get_trainer("demo"), now=0.0)
    assert custom.threshold(0)[0] == 45


def test_slow_checkpoints_are_not_hangs():
    monitor, t = steady_monitor()
    monitor.feed("[demo] Saving checkpoint at step 10 -> out/checkpoints/000010", now=t + 0.1)
    assert monitor.tick(t + 120, IDLE) == [], "the first checkpoint gets the start-up allowance"
    monitor.feed("[demo] step 11/1000 loss=0.5 lr=1.000e-04 samples/s=100.0", now=t + 150)
    assert monitor.checkpoint_durations == [pytest.approx(149.9)]
    monitor.feed("[demo] Saving checkpoint at step 20 -> out/checkpoints/000020", now=t + 151)
    assert monitor.threshold(t + 200) == (pytest.approx(3 * 149.9), "a checkpoint is being written")


def test_busy_ranks_get_one_extension_then_a_hang():
    monitor, last = steady_monitor()
    events = monitor.tick(last + 31, BUSY)
    assert [e.kind for e in events] == ["slow_progress"]
    assert monitor.tick(last + 50, BUSY) == []
    assert [e.kind for e in monitor.tick(last + 62, BUSY)] == ["hang_suspected"]


def test_progress_clears_a_reported_hang():
    monitor, last = steady_monitor()
    assert monitor.tick(last + 31, IDLE)
    monitor.feed("[demo] step 11/1000 loss=0.5 lr=1.000e-04 samples/s=100.0", now=last + 32)
    assert monitor.tick(last + 40, IDLE) == []
    assert [e.kind for e in monitor.tick(last + 63, IDLE)] == ["hang_suspected"]


def test_differing_rank_from_cpu_and_exited_ranks():
    one_spinning = [
        rank_state(0, 0, 1, 2.0, "sleeping"),
        rank_state(1, 1, 2, 100.0, "running"),
        rank_state(2, 2, 3, 1.0, "sleeping"),
    ]
    assert classify_ranks(one_spinning, None).differing_rank == 1
    exited = [rank_state(0, 0, 1, 1.0, "sleeping"), rank_state(1, 1, 2, None, "exited", alive=False)]
    verdict = classify_ranks(exited, None)
    assert verdict.differing_rank == 1 and "exited" in verdict.summary and not verdict.busy


def test_gpu_spin_wait_is_not_busy():
    def Gpu(util: float, power: float) -> GpuSample:
        return GpuSample(t=0.0, index=0, utilization=util, power_w=power, power_limit_w=700.0)

    verdict = classify_ranks(BUSY, [Gpu(100, 90), Gpu(100, 85)])
    assert verdict.spinning and not verdict.busy
    assert classify_ranks(BUSY, [Gpu(98, 600), Gpu(97, 620)]).busy


def test_lr_is_compared_after_warmup():
    monitor = JobMonitor(expect(lr=1e-3, warmup_steps=20), get_trainer("demo"))
    assert monitor.feed("[demo] step 10/100 loss=0.5 lr=5.000e-04 samples/s=10", now=1) == []
    assert monitor.feed("[demo] step 30/100 loss=0.5 lr=1.000e-03 samples/s=10", now=2) == []
    wrong = JobMonitor(expect(lr=1e-3, warmup_steps=20), get_trainer("demo"))
    assert [e.kind for e in wrong.feed("[demo] step 10/100 loss=0.5 lr=4.000e-03 samples/s=10", now=1)] == [
        "lr_mismatch"
    ]


def test_eta_from_recent_rate():
    monitor, _ = steady_monitor(interval=2.0)
    assert monitor.progress.steps_per_s == pytest.approx(0.5)
    assert monitor.progress.eta_s == pytest.approx((1000 - 10) / 0.5)


def test_tail_collapses_carriage_returns_and_keeps_partial_lines(tmp_path):
    log = tmp_path / "log.txt"
    tail = LogTail(log)
    assert not tail.read()
    with open(log, "w") as fh:
        fh.write(
            "first line\nTraining:  10%|#  | 1/10 [00:01<00:09, 1.0it/s]\rTraining:  20%|## | 2/10 [00:02<00:08, "
            "1.0it/s]"
        )
    chunk = tail.read()
    assert chunk.lines == ["first line"] and chunk.bar == "Training:  20%|## | 2/10 [00:02<00:08, 1.0it/s]"
    with open(log, "a") as fh:
        fh.write("\rTraining: 100%|###| 10/10 [00:10<00:00, 1.0it/s]\nhalf a li")
    chunk = tail.read()
    assert chunk.lines == ["Training: 100%|###| 10/10 [00:10<00:00, 1.0it/s]"] and chunk.bar is None
    with open(log, "a") as fh:
        fh.write("ne\r\n\u00e9t\u00e9 ok\n")
    assert tail.read().lines == ["half a line", "\u00e9t\u00e9 ok"]


def test_tail_splits_a_message_written_right_after_a_bar():
    chunk = LogTail(LEROBOT_LOG).read()
    steps = [line for line in chunk.lines if "step:" in line]
    assert len(steps) == 4 and all(line.startswith("INFO ") for line in steps)
    bars = [line for line in chunk.lines if line.startswith("Training:")]
    assert bars[-1].startswith("Training: 100%|") and "| 20/20 [00:38<00:00" in bars[-1], "bar states stay, in order"


def test_a_checkpoint_message_after_a_bar_is_not_undone_by_that_bar(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text(
        "\rTraining:  24%|##  | 29/120 [00:01<00:04, 19.6step/s]\rTraining:  25%|##  | 30/120 [00:01<00:04, 19.6step/s]"
        "[demo] Saving checkpoint at step 30 -> out/checkpoints/000030\n"
    )
    monitor = JobMonitor(expect(steps=120, hang_timeout_s=2.0), get_trainer("demo"), now=0.0)
    chunk = LogTail(log).read()
    monitor.feed_text(chunk.text, chunk.line_count, now=1.0, bar=chunk.bar)
    assert monitor.progress.step == 30 and monitor.checkpoint_started == 1.0
    assert monitor.threshold(5.0)[1] == "a checkpoint is being written"


def test_batches_find_progress_and_signatures_among_noise():
    monitor = JobMonitor(expect(steps=1000), get_trainer("demo"), now=0.0)
    noise = [f"debug line {i} fetched shard {i % 7}" for i in range(5000)]
    noise[1234] = "[demo] step 7/1000 loss=0.5 lr=1.000e-04 samples/s=100.0"
    noise[4321] = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    events = monitor.feed_text(
        "\n".join(noise), len(noise), now=1.0, bar="Training:   1%|   | 9/1000 [00:01<02:00, 8.0step/s]"
    )
    assert monitor.progress.step == 9 and monitor.progress.lines == 5000 and monitor.progress.loss == 0.5
    assert [e.kind for e in events] == ["out_of_memory"]


def test_final_summary_names_leftovers(tmp_path):
    """A stop that left processes or GPU memory behind says so in the headless summary."""
    from gpuwizard.cli.runs import final_summary
    from gpuwizard.runs.rundir import RunDir

    run = RunDir(tmp_path / "20261129-000000-x")
    run.path.mkdir()
    run.write(
        "status.json",
        status_record(run_id=run.run_id, preset="x", steps=10, state="stopped", command="true", exit_code=4),
    )
    assert "left behind" not in final_summary(run, run.status()) and "still held" not in final_summary(
        run, run.status()
    )
    run.update_status(survivors=[4321], gpu_memory_held_mb={"0": 2048.0})
    text = final_summary(run, run.status())
    assert "processes left behind: [4321]" in text and "GPU memory still held: GPU 0 2048 MB" in text


def supervisor_stage(text: bytes, tmp_path) -> tuple[list[str], list]:
    """The supervisor's path for a log: tail, then monitor, over a real file."""
    path = tmp_path / "log.txt"
    path.write_bytes(text)
    tail, monitor = LogTail(path), JobMonitor(expect(steps=10), get_trainer("demo"))
    lines, events = [], []
    while chunk := tail.read():
        lines += chunk.lines
        events += monitor.feed_text(chunk.text, chunk.line_count, bar=chunk.bar)
    return lines, events


@pytest.mark.timeout(60)
def test_a_one_megabyte_line_beside_a_carriage_return_is_handled_in_one_pass(tmp_path):
    """Reproduces the supervisor freeze: an unanchored regex made one long line in a chunk holding a '\\r' cost
    its square (100 KB: 6.9 s, 300 KB: 62 s). At 1 MB the old code would run for about ten minutes."""
    big = "x" * 1_000_000
    bar_then_step = (
        "Training:  10%|#   | 1/10 [00:01<00:09, 1.0it/s]\r[demo] step 1/10 loss=0.5 lr=1.000e-04 samples/s=10"
    )
    text = f"{bar_then_step}\n{big}\ndone\n"
    lines, events = supervisor_stage(text.encode(), tmp_path)
    assert lines == ["[demo] step 1/10 loss=0.5 lr=1.000e-04 samples/s=10", big, "done"]
    digits = "9" * 1_000_000 + "%|" + "1" * 1_000_000 + "\rmore\n"
    lines, _ = supervisor_stage(digits.encode(), tmp_path)
    assert lines == ["more"]


@pytest.mark.timeout(60)
def test_binary_output_is_bounded_and_never_breaks_the_monitor(tmp_path):
    import random

    rng = random.Random(7)
    noise = rng.randbytes(3_000_000).replace(b"\n", b"")
    lines, events = supervisor_stage(noise + b"\n[demo] step 5/10 loss=0.1 lr=1.000e-04 samples/s=10\n", tmp_path)
    assert all(len(line) <= 1 << 20 for line in lines), "no line grows past the cap"
    assert lines[-1] == "[demo] step 5/10 loss=0.1 lr=1.000e-04 samples/s=10"
    assert all(e.kind != "hang_suspected" for e in events)


def test_collapse_keeps_the_last_carriage_return_state_of_each_line():
    from gpuwizard.runs.tail import collapse

    assert collapse("a\rb\rc\nplain\nx\r\r\ny\r") == "c\nplain\nx\n"  # a trailing return: the line is being rewritten
    assert collapse("no returns\n") == "no returns\n"


def test_lerobot_main_counts_loop_steps_and_samples():
    monitor = JobMonitor(expect(steps=16, lr=1e-5, effective_batch=8), get_trainer("lerobot"))
    events = feed_file(monitor, LEROBOT_MAIN_ACCUM_LOG)
    assert [e.kind for e in events] == [], "banner, lr and batch agree with the plan"
    p = monitor.progress
    assert (p.step, p.total, p.samples) == (16, 16, 64), "8 updates x effective batch 8 = 64 samples"


def test_a_resumed_lerobot_run_counts_from_its_checkpoint_step():
    monitor = JobMonitor(expect(steps=60, lr=1e-5, effective_batch=8), get_trainer("lerobot"))
    seen = []
    for line in LogTail(LEROBOT_MAIN_RESUMED_LOG).read().lines:
        monitor.feed(line, now=1000.0 + len(seen))
        seen.append((monitor.progress.step, monitor.progress.total))
    steps = [step for step, _ in seen if step is not None]
    assert steps[0] == 8 and steps == sorted(steps), "the relative bar never pulls the step back below the checkpoint"
    assert {total for _, total in seen} == {60} and monitor.progress.step == 60


def test_a_wrapped_failure_names_its_cause():
    """Real lerobot-train at main 7427f31 started with --accelerator.mixed_precision=no: draccus wraps the ValueError
    from AcceleratorConfig.__post_init__ (lerobot/configs/accelerator.py) in a ParsingError; earlier torchcodec
    tracebacks in the same log are caught warnings, not the failure."""
    monitor = JobMonitor(expect(steps=4, lr=1e-5, effective_batch=2, world_size=1), get_trainer("lerobot"))
    events = feed_file(monitor, DATA / "logs" / "lerobot_main7427f31_mixed_precision_no.log")
    failed = next(e for e in events if e.kind == "rank_failed")
    assert failed.title == (
        "rank 0 failed (exit code 1): ValueError: mixed_precision must be one of 'no', 'fp16', 'bf16', got 'False'."
    )
    assert "It surfaced as draccus.utils.ParsingError: Couldn't instantiate class AcceleratorConfig" in failed.detail


FAST_HF_LOG = DATA / "logs" / "hf524_tiny_1proc_40_steps_in_one_chunk.log"
"""Real log of a probe's 1-process run of tests/data/hf/tiny_train.py (transformers 5.24.0, batch 4, 40 steps in 0.11
s): each loss dict's line starts with the bar as redrawn after the dict before it (tqdm.write: clear, dict, redraw),
so a chunk holding all of it has each step's bar only there; a probe's row read "the log gave no samples/s" (and its
losses had no steps) before those bars were read."""


def test_the_bar_redrawn_before_each_loss_dict_gives_its_step_and_rate_when_the_log_arrives_at_once():
    monitor = JobMonitor(expect(steps=40, lr=1e-3, effective_batch=4, world_size=1), get_trainer("hf"))
    chunk = LogTail(FAST_HF_LOG, redrawn_bars=True).read()  # the supervisor's tail: the whole log in one read
    assert chunk.bar is None
    monitor.feed_text(chunk.text, chunk.line_count, now=1000.0)
    metrics = monitor.take_metrics()
    assert [m.step for m in metrics] == list(range(1, 41))
    assert metrics[1].samples_per_s == pytest.approx(179.52 * 4), "step 2's dict, after the bar at 1/40 179.52it/s"
    assert all(m.samples_per_s for m in metrics[1:])
    assert monitor.progress.step == 40 and monitor.progress.finished


def test_a_display_tail_keeps_only_each_lines_last_state():
    shown, read = LogTail(FAST_HF_LOG).read().lines, LogTail(FAST_HF_LOG, redrawn_bars=True).read().lines
    assert sum(line.startswith("{'loss'") for line in shown) == sum(line.startswith("{'loss'") for line in read) == 40
    assert [line[:16] for line in shown if "%|" in line] == ["  0%|          |", "100%|██████████|", "100%|██████████|"]
    assert len(read) - len(shown) == 39, "the monitor's tail: the bar before each loss dict but the first"


ABORT_AT_EXIT_LOG = DATA / "logs" / "hf524_tiny_2proc_abort_at_exit.log"
"""Real torchrun of tests/data/hf/tiny_train.py (transformers 5.24.0, accelerate 1.15.0, torch 2.13.0+cpu), 2 gloo
processes, 12 steps, without gpuwizard: rank 0 logged its train summary, then aborted in Python's exit (2 of 12 such
runs on a loaded 2-core machine). gdb on its core: a ProcessGroupGloo::runLoop worker destroys an AsyncAllgatherWork,
whose tensor's decref takes the GIL during Py_FinalizeEx; take_gil ends the thread (pthread_exit), and the forced
unwind through a noexcept frame calls std::terminate."""


@pytest.mark.parametrize("cut_after_step_5", [False, True])
def test_an_abort_in_pythons_exit_after_the_last_step_is_said_to_have_trained(cut_after_step_5):
    lines = LogTail(ABORT_AT_EXIT_LOG).read().lines
    if cut_after_step_5:  # the same abort mid-run: no exit crash then
        lines = lines[: lines.index(next(line for line in lines if "5/12" in line)) + 1] + lines[-42:]
        assert lines[-42].startswith("terminate called")
    monitor = JobMonitor(expect(steps=12, lr=5e-5, effective_batch=16), get_trainer("hf"))
    events = []
    for t, line in enumerate(lines):
        events += [e for e in monitor.feed(line, now=1000.0 + t) if e.kind != "lr_mismatch"]  # its lr decays
    assert [e.kind for e in events if e.severity == "error"] == ["exit_abort", "rank_failed"]
    failed = events[-1]
    assert failed.rank == 0 and failed.data["exitcode"] == -6
    if cut_after_step_5:
        assert monitor.progress.step == 5
        assert failed.suggestion.startswith("Read the rank's traceback")
    else:
        assert monitor.progress.step == 12
        assert failed.suggestion.startswith("Training had reached its last step (12) before this rank aborted")


def test_the_store_closing_after_a_green_multi_node_run_is_no_failure():
    """shared/reference/slurm.md: after a green run a non-head agent may print c10d's recvVector warning with a C++
    stack (the store's host exited first). The message text is torch's own (libtorch_cpu: "recvVector failed on {}:
    {}", c10d/Utils.hpp: "Failed to recv, got 0 bytes. Connection was likely closed. ...")."""
    monitor = JobMonitor(expect(steps=60, multi_node=True), get_trainer("demo"))
    teardown = [
        "[demo] Training finished: 60 steps, checkpoint in /tmp/out/checkpoints/last",
        "[W1201 00:33:25.123000 4242 torch/csrc/distributed/c10d/TCPStore.cpp:125] [c10d] recvVector failed on "
        "SocketImpl(fd=5, addr=[localhost]:45678, remote=[localhost]:29511): Failed to recv, got 0 bytes. Connection "
        "was likely closed. Did the remote server shutdown or crash?",
        "Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682 (most recent call "
        "first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f00 in libc10.so)",
        "frame #1: <unknown function> + 0x5e1a3b1 (0x7f01 in libtorch_cpu.so)",
        "W1201 00:33:25.130000 4242 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1382] The node "
        "'n2_4242_0' has failed to shutdown the rendezvous '12' due to an error of type RendezvousConnectionError.",
    ]
    events = []
    for t, line in enumerate(teardown):
        events += monitor.feed(line, now=1000.0 + t)
    assert [e for e in events if e.severity == "error"] == []


def test_a_step_that_mostly_waits_for_data_is_called_input_bound():
    """LeRobot logs data_s (waiting for the batch) beside step_s (lerobot_train.py's MetricsTracker, 0.6.1 and main)."""
    monitor = JobMonitor(expect(steps=1000, lr=1e-5, effective_batch=8), get_trainer("lerobot"))
    line = (
        "INFO 2026-08-23 10:11:12 ot_train.py:769 step:{step} smpl:{smpl} ep:1 epch:0.10 loss:0.512 grdn:12.3 "
        "lr:1.0e-05 data_s:0.620 prep_s:0.003 updt_s:0.250 step_s:0.873 smp/s:9 mem_gb:7.12"
    )
    events = []
    for i in range(1, 8):
        events += monitor.feed(line.format(step=i * 10, smpl=i * 80), now=1000.0 + i)
    [bound] = [e for e in events if e.kind == "input_bound"]
    assert "data loading takes 71% of every step" in bound.detail and "num_workers" in bound.suggestion


def test_idle_gpus_beside_saturated_cpus_for_a_minute_are_input_bound():
    monitor = JobMonitor(expect(steps=1000), get_trainer("demo"))
    monitor.feed("[demo] step 10/1000 loss=0.5 lr=1.000e-04 samples/s=100.0", now=1000.0)
    ranks = [rank_state(0, 0, 11, 99.0, "R"), rank_state(1, 1, 12, 97.0, "R")]
    busy = [GpuSample(t=0, index=i, utilization=95.0, power_w=300, power_limit_w=400) for i in range(2)]
    idle = [GpuSample(t=0, index=i, utilization=18.0, power_w=90, power_limit_w=400) for i in range(2)]
    events = []
    for t in range(130):  # steps keep coming: slow, not hung
        now = 1001.0 + t
        if t % 5 == 0:
            monitor.feed(f"[demo] step {20 + t}/1000 loss=0.5 lr=1.000e-04 samples/s=100.0", now=now)
        events += [(t, e) for e in monitor.tick(now, ranks, busy if t < 60 else idle) if e.kind != "slow_progress"]
    [(t, bound)] = events
    assert bound.kind == "input_bound" and t >= 60 + 60, "after a minute of idle GPUs, not before"
    assert "the GPUs average 18% utilization while every rank's CPU is saturated" in bound.detail
