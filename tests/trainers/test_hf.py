"""The Hugging Face Trainer: its v5 log lines, its own TrainingArguments parser on every command gpuwizard builds,
its schedules, and real runs of a tiny HF Trainer script (tests/data/hf/tiny_train.py) through gpuwizard's runner
(needs GPUWIZARD_HF_PYTHON: transformers 5.24.0, accelerate 1.15.0, torch CPU; scripts/trainer-envs.sh).

Upstream facts, from transformers 5.24.0 and accelerate 1.15.0:
- trainer_callback.py ProgressCallback.on_log writes every float as f"{v:.4g}": {'loss': '0.9536', ...}.
- trainer.py _inner_training_loop reads the lr before lr_scheduler.step(): the dict at step N shows update N's lr.
- trainer.py logs "Total train batch size (w. parallel, distributed & accumulation) = N" and
  "Total optimization steps = N"; optimization.py has the schedules (linear by default).
- training_args.py: `fsdp` is a bare flag now (the string form "full_shard auto_wrap" is deprecated), and
  _process_fsdp_args reads fsdp_config["min_num_params"] only with auto_wrap_policy SIZE_BASED_WRAP.
- accelerate state.py: FSDP is switched on for GPU-type backends only; CPU processes (MULTI_CPU) run DDP.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwizard.core.yamlio import dumps
from gpuwizard.model.preset import parse_preset
from gpuwizard.model.preset_files import load_preset_file
from gpuwizard.planning.plan import build_command, make_plan
from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runs.records import Expectations
from gpuwizard.runs.tail import LogTail
from gpuwizard.trainers.base import ceil_ratio
from gpuwizard.trainers.check import CheckAnswer, compare
from gpuwizard.trainers.logparse import parse_hf
from gpuwizard.trainers.registry import get_trainer
from support.cli import gw_subprocess, poll_until
from support.data import DATA, REPO
from support.runs import newest_run
from support.trainers import parse_many, trainer_env

HF = get_trainer("hf")
SCRIPT = REPO / "tests" / "data" / "hf" / "tiny_train.py"
LOG_2PROC = DATA / "logs" / "hf524_tiny_2proc_accum2_linear_lr.log"
"""gpuwizard run of tiny_train.py: 2 CPU processes, batch 4, accumulation 2, linear_lr from 1 GPU (lr 1e-3 -> 2e-3,
warmup 1 added), 10 steps, --logging_steps 1 (transformers 5.24.0)."""
LOG_1PROC = DATA / "logs" / "hf524_tiny_1proc_accum2_logging6.log"
"""The same on 1 process, lr 1e-3, no warmup, 12 steps, --logging_steps 6."""


def preset_data(python: str, out: Path, **changes) -> dict:
    data = {
        "version": 1,
        "name": "hf-tiny",
        "trainer": "hf",
        "policy": "act",
        "dataset": {"repo_id": "local/synthetic"},
        "hardware": {"gpus": 2, "device": "cpu"},
        "batch": {"size": 4, "grad_accum": 2},
        "optim": {"lr": 1.0e-3, "steps": 10},
        "scaling": {"rule": "linear_lr", "reference_gpus": 1},
        "mixed_precision": "no",
        "trainer_options": {"script": str(SCRIPT), "logging_steps": 1},
        "launch": {"python": python, "env": {"HF_HUB_OFFLINE": "1"}, "extra_args": ["--save_steps", "5"]},
        "output_dir": str(out),
        "monitor": {"hang_timeout_s": 300},
    }
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return data


def monitor_for(data: dict) -> JobMonitor:
    """A JobMonitor with the expectations `run` gives the supervisor for this preset."""
    plan, ctx = make_plan(parse_preset(data, "test"))
    expect = Expectations(
        steps=plan.trainer_steps,
        lr=plan.lr,
        warmup_steps=plan.warmup_steps or 0,
        schedule=HF.lr_schedule(ctx),
        log_interval=HF.log_interval(ctx),
        effective_batch=plan.effective_batch,
        world_size=plan.world_size,
        hang_timeout_s=300,
    )
    return JobMonitor(expect, HF, now=0.0)


def feed_log(monitor: JobMonitor, path: Path) -> list:
    """The log as the supervisor reads it: LogTail chunks (a finished file is one chunk: every dict at once)."""
    tail, events = LogTail(path), []
    while chunk := tail.read():
        events += monitor.feed_text(chunk.text, chunk.line_count, now=1.0, bar=chunk.bar)
    return events


def test_v5_numbers_as_strings_and_v4_bare_nan_are_read():
    v5 = parse_hf("{'loss': '0.9536', 'grad_norm': '5.415', 'learning_rate': '0', 'epoch': '0.5'}")
    assert (v5.loss, v5.lr) == (0.9536, 0.0)
    assert parse_hf("{'loss': 'nan', 'learning_rate': '2e-05'}").loss != parse_hf("{'loss': 'nan'}").loss, "nan"
    v4 = parse_hf("{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05}")
    assert v4.loss != v4.loss and v4.lr == 1e-05, "a diverged v4 run is NaN, not nothing"
    end = parse_hf("{'train_runtime': '0.1645', 'train_samples_per_second': '972.7', 'train_loss': '7.482'}")
    assert end.finished and end.samples_per_s == 972.7
    banner = parse_hf("[transformers]   Total train batch size (w. parallel, distributed & accumulation) = 1,024")
    assert banner.effective_batch == 1024
    assert parse_hf("[transformers]   Total optimization steps = 30,000").total == 30_000


def test_a_real_v5_log_gives_the_curve_and_passes_the_lr_and_batch_checks():
    """Every dict of the real 2-process log becomes a point at its own step, even read in one chunk; the lr follows
    the linear decay the plan expects, and the banner's total batch is the plan's."""
    data = preset_data(sys.executable, Path("/unused"))
    monitor = monitor_for(data)
    assert feed_log(monitor, LOG_2PROC) == [], "lr (linear decay), batch 16 and steps agree with the plan"
    metrics = monitor.take_metrics()
    assert [m.step for m in metrics] == list(range(1, 11))
    assert metrics[0].loss == 8.052 and metrics[-1].lr == pytest.approx(2.222e-4)
    assert monitor.progress.finished and monitor.progress.step == 10
    assert monitor.batch_checked, "the banner's total batch was compared"


def test_the_lr_check_follows_the_decay_and_still_catches_a_wrong_lr(tmp_path):
    """The 1-process log's first lr is at step 6 of 12 with no warmup: HF's linear schedule is at 7/12 of the peak
    there (a peak-only check called that a mismatch). A plan whose lr the trainer did not use is caught."""
    data = preset_data(
        sys.executable,
        Path("/unused"),
        **{"hardware.gpus": 1, "optim.steps": 12, "scaling.rule": "none", "trainer_options.logging_steps": 6},
    )
    v4 = tmp_path / "v4.log"  # the same line as v4 printed it: numbers as numbers
    v4.write_text(LOG_1PROC.read_text().replace("'7.812'", "7.812").replace("'0.0005833'", "0.0005833"))
    for log in (LOG_1PROC, v4):
        monitor = monitor_for(data)
        assert feed_log(monitor, log) == []
        assert [m.step for m in monitor.take_metrics()] == [6, 12]
    wrong = monitor_for(data | {"optim": {"lr": 3.0e-3, "steps": 12}})
    events = feed_log(wrong, LOG_1PROC)
    assert [e.kind for e in events] == ["lr_mismatch"]
    assert events[0].data["step"] == 6 and events[0].data["expected"] == pytest.approx(3e-3 * 7 / 12)


def test_a_nan_loss_in_a_v5_log_stops_the_run(tmp_path):
    monitor = monitor_for(preset_data(sys.executable, Path("/unused")))
    log = tmp_path / "nan.log"
    log.write_text(LOG_2PROC.read_text().replace("'loss': '6.734'", "'loss': 'nan'"))
    assert [e.kind for e in feed_log(monitor, log)] == ["loss_nonfinite"]


# -- the trainer's own parser -------------------------------------------------------------------------------


@pytest.fixture
def hf_python() -> str:
    return trainer_env("GPUWIZARD_HF_PYTHON", "a transformers 5.24 interpreter")


@pytest.mark.hf
def test_every_generated_command_is_read_as_planned_by_training_arguments(hf_python, tmp_path):
    """1, 2 and 4 processes on CPU and CUDA, with accumulation, each schedule, FSDP by layer class and by size,
    each mixed precision, fresh and resumed: TrainingArguments resolves the planned batch, accumulation, lr, steps,
    warmup, schedule and FSDP plugin settings, says nothing is deprecated, and names the script's own flags."""
    cases = []
    for device in ("cpu", "cuda"):
        for gpus in (1, 2, 4):
            for accum in (1, 4):
                for kind in ("linear", "cosine", "constant_with_warmup"):
                    n = len(cases)
                    out = tmp_path / f"out{n}"
                    if n % 2:
                        (out / "checkpoint-7").mkdir(parents=True)
                    strategy = ("ddp", "fsdp", "fsdp")[n % 3] if gpus > 1 else "auto"
                    fsdp = [{"wrap_modules": ["ACTEncoderLayer"]}, {"min_num_params": 100_000}][n % 2]
                    data = preset_data(
                        hf_python,
                        out,
                        **{
                            "hardware.device": device,
                            "hardware.gpus": gpus,
                            "batch.grad_accum": accum,
                            "optim.warmup_ratio": 0.1,
                            "strategy": strategy,
                            "fsdp": fsdp if strategy == "fsdp" else {},
                            "mixed_precision": ("bf16", "fp16", "no")[n % 3] if device == "cuda" else "no",
                            "trainer_options.lr_scheduler_type": kind,
                            "trainer_options.script_args": ["--hidden", "16"],
                        },
                    )
                    plan, ctx = make_plan(parse_preset(data, "test"), resume=bool(n % 2))
                    assert plan.errors == [], [p.paragraph() for p in plan.errors]
                    cases.append((data, HF.trainer_query(ctx, build_command(ctx))))
    answers = parse_many(hf_python, "check_hf", [query.argv[2:] for _, query in cases])
    for (data, query), answer in zip(cases, answers, strict=True):
        result = compare(CheckAnswer.model_validate(answer), query, cached=False, seconds=0)
        assert result.status == "accepted", (data["hardware"], data["strategy"], result.summary)
        assert not any("deprecat" in note for note in result.notes), result.notes
        assert any(note.endswith("script (not TrainingArguments flags): --hidden 16") for note in result.notes)


@pytest.mark.hf
def test_the_old_fsdp_flags_drop_min_num_params_and_the_new_ones_keep_it(hf_python, tmp_path):
    """Before: `--fsdp "full_shard auto_wrap" --fsdp_config {"min_num_params": N}`: deprecated, and the size threshold
    is never read (TRANSFORMER_BASED_WRAP). Now: bare --fsdp, SIZE_BASED_WRAP with min_num_params."""
    data = preset_data(
        hf_python,
        tmp_path / "out",
        **{"hardware.device": "cuda", "strategy": "fsdp", "fsdp": {"min_num_params": 100_000}},
    )
    _, ctx = make_plan(parse_preset(data, "test"))
    query = HF.trainer_query(ctx, build_command(ctx))
    argv = query.argv[2:]
    at = argv.index("--fsdp")
    old = argv[:at] + ["--fsdp", "full_shard auto_wrap", "--fsdp_config", json.dumps({"min_num_params": 100_000})]
    new_answer, old_answer = parse_many(hf_python, "check_hf", [argv, old])
    assert new_answer["values"]["fsdp"] == {"auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 100_000}
    assert old_answer["values"]["fsdp"] == {"auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}
    assert any("deprecated" in note for note in old_answer["notes"])
    assert compare(CheckAnswer.model_validate(new_answer), query, False, 0).status == "accepted"
    assert compare(CheckAnswer.model_validate(old_answer), query, False, 0).mismatches[0].key == "fsdp"


@pytest.mark.hf
def test_lr_schedules_are_the_ones_transformers_builds(hf_python):
    """transformers.get_scheduler stepped as Trainer does (lr read before each lr_scheduler.step()) against the
    schedule the run-time lr check uses, at every step."""
    cases = [
        (kind, warmup, steps)
        for kind in ("linear", "cosine", "constant", "constant_with_warmup")
        for warmup, steps in ((0, 50), (7, 50), (100, 1000))
    ]
    code = r"""
import json, sys, torch
from transformers import get_scheduler
found = []
for kind, warmup, steps in json.loads(sys.stdin.read()):
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1e-3)
    scheduler = get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=steps)
    logged = []
    for _ in range(steps):
        optimizer.step()
        logged.append(scheduler.get_last_lr()[0])
        scheduler.step()
    found.append(logged)
print(json.dumps(found))
"""
    out = subprocess.run(
        [hf_python, "-c", code], input=json.dumps(cases), capture_output=True, text=True, timeout=300, check=True
    )
    for (kind, warmup, steps), logged in zip(cases, json.loads(out.stdout.splitlines()[-1]), strict=True):
        data = preset_data(
            sys.executable,
            Path("/unused"),
            **{
                "optim.steps": steps,
                "scaling.rule": "none",
                "trainer_options.lr_scheduler_type": kind,
                "optim.warmup_ratio": float(ceil_ratio(warmup, steps)),
            },
        )
        plan, ctx = make_plan(parse_preset(data, "test"))
        assert plan.warmup_steps == warmup
        schedule = HF.lr_schedule(ctx)
        ours = [schedule.logged_at(step) for step in range(1, steps + 1)]
        assert ours == pytest.approx(logged, abs=1e-12), (kind, warmup, steps)


# -- real runs ----------------------------------------------------------------------------------------------
def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "hf-tiny.yaml"
    path.write_text(dumps(data))
    return path


def logged_dicts(log: str) -> list[dict]:
    import ast

    return [
        ast.literal_eval(line[line.index("{'loss'") :])
        for line in log.replace("\r", "\n").splitlines()
        if "{'loss'" in line
    ]


def banner(log: str, label: str) -> int:
    line = next(line for line in log.splitlines() if label in line)
    return int(line.rsplit("=", 1)[1].replace(",", ""))


@pytest.mark.hf
@pytest.mark.slow
@pytest.mark.parametrize(
    "gpus, changes",
    [
        (1, {"scaling.rule": "none", "optim.steps": 12, "trainer_options.logging_steps": 3}),
        (2, {"strategy": "fsdp", "fsdp": {"min_num_params": 100}}),
    ],
    ids=["1proc-accum2-no-warmup", "2proc-accum2-linear_lr-fsdp-config"],
)
def test_a_real_hf_run_logs_the_batch_steps_and_lr_the_plan_says(hf_python, tmp_path, gpus, changes):
    """tiny_train.py under gpuwizard's runner on CPU processes: the Trainer's own banner (total batch, optimization
    steps) and every logged lr are the plan's; the FSDP config passes TrainingArguments, and accelerate runs the CPU
    processes as DDP, as the plan warns."""
    data = preset_data(hf_python, tmp_path / "out", **{"hardware.gpus": gpus, **changes})
    preset = write(tmp_path, data)
    plan = json.loads(gw_subprocess("plan", "--trust", preset, "--json").stdout)
    result = gw_subprocess("run", "--trust", preset, "--headless", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    run = newest_run()
    log = (run.path / "log.txt").read_text()
    assert banner(log, "Total train batch size") == plan["effective_batch"] == 4 * 2 * gpus
    assert banner(log, "Total optimization steps") == plan["steps"]
    _, ctx = make_plan(load_preset_file(preset))
    schedule, every = HF.lr_schedule(ctx), data["trainer_options"]["logging_steps"]
    dicts = logged_dicts(log)
    assert len(dicts) == plan["steps"] // every
    for i, logged in enumerate(dicts, start=1):
        assert float(logged["learning_rate"]) == pytest.approx(schedule.logged_at(i * every), rel=1e-3, abs=1e-9)
    events, unreadable = run.events()
    assert ([(e.kind, e.title) for e in events], unreadable) == ([], 0), "lr, batch and progress agree with the plan"
    progress = run.progress()
    assert (progress.step, progress.total, progress.finished) == (plan["steps"], plan["steps"], True)
    assert [m.step for m in run.metrics()] == list(range(every, plan["steps"] + 1, every))
    check = json.loads((run.path / "trainer-check.json").read_text())
    assert check["status"] == "accepted", check["summary"]
    if "fsdp" in changes:
        assert check["values"]["fsdp"] == {"auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 100}
        assert "accelerate DistributedType.MULTI_CPU, model wrapped as DistributedDataParallel" in log
        assert any("accelerate runs DDP, not FSDP" in w for w in plan["warnings"])


@pytest.mark.hf
@pytest.mark.slow
def test_a_real_hf_run_stopped_then_resumed_continues_from_its_newest_checkpoint(hf_python, tmp_path):
    """Stop after checkpoint-8, then `run --resume`: --resume_from_checkpoint names the newest checkpoint-N, and
    the Trainer continues from it to the planned step."""
    out = tmp_path / "out"
    data = preset_data(
        hf_python,
        out,
        **{
            "hardware.gpus": 1,
            "scaling.rule": "none",
            "optim.steps": 20,
            "trainer_options.script_args": ["--step_sleep", "0.3"],
            "launch.extra_args": ["--save_steps", "4"],
        },
    )
    preset = write(tmp_path, data)
    first = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", "--trust", str(preset), "--headless"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        poll_until(lambda: (out / "checkpoint-8" / "trainer_state.json").is_file(), 400)
        assert gw_subprocess("stop", timeout=120).returncode == 0
        first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    stopped = newest_run()
    assert stopped.status().state == "stopped"
    newest = max((int(p.name.split("-")[1]), p) for p in out.glob("checkpoint-*"))[1]
    resumed = gw_subprocess("run", "--trust", preset, "--headless", "--resume", timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    run = newest_run()
    argv = run.job().argv
    assert argv[argv.index("--resume_from_checkpoint") + 1] == str(newest)
    assert run.status().resumed_from == stopped.run_id
    log = (run.path / "log.txt").read_text()
    step = int(newest.name.split("-")[1])
    assert f"Resuming training from checkpoint with epoch 0 and global step {step}" in log
    _, ctx = make_plan(load_preset_file(preset))
    first = logged_dicts(log)[0]
    assert float(first["learning_rate"]) == pytest.approx(HF.lr_schedule(ctx).logged_at(step + 1), rel=1e-3)
    assert (run.progress().step, run.progress().finished) == (20, True)
    assert (out / "checkpoint-20").is_dir()


@pytest.mark.hf
@pytest.mark.slow
def test_a_real_hf_run_with_the_gauge_trains_the_same_losses_and_gives_a_noise_scale(hf_python, tmp_path):
    """Issue 26: the HF Trainer on 2 CPU processes (accelerate wraps the model in DistributedDataParallel,
    transformers trainer.py), accumulation 2, with the gauge on: the same logged losses as without it, and the
    gradient norms of each step read from DDP's all-reduce."""
    from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE, read_gauge, summary

    losses, runs = [], []
    for gauge in (False, True):
        folder = tmp_path / ("gauged" if gauge else "plain")
        folder.mkdir()
        data = preset_data(hf_python, folder / "out", **{"monitor.gauge": gauge, "optim.steps": 12})
        result = gw_subprocess("run", "--trust", write(folder, data), "--headless", timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        runs.append(newest_run())
        losses.append([d["loss"] for d in logged_dicts((runs[-1].path / "log.txt").read_text())])
    assert losses[0] and losses[0] == losses[1], "the same seed, the same losses, with and without the gauge"
    read = read_gauge(runs[1].path / GAUGE_FILE)
    assert read.unmeasured == [] and len(read.steps) >= 10, (read.unmeasured, len(read.steps))
    assert {(s.b_small, s.b_big) for s in read.steps} == {(8, 16)}, "per rank 4 x 2 micro-batches, global 16"
    said = summary(runs[1].path)
    assert said is not None and said.startswith("B_simple"), said
