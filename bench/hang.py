"""Hang detection: latency from an injected hang to the event, and false positives on healthy runs whose
checkpoints take longer than a step (and longer than the hang timeout)."""

from __future__ import annotations

import json
from pathlib import Path

from common import isolated_env, median, record
from jobs import events, gw, newest_run, write_preset

HANG_TIMEOUT = 5.0


def latency(env: dict[str, str], name: str) -> float:
    result = gw(env, "run", name, "--headless")
    assert result.returncode == 3, result.stdout + result.stderr
    run = newest_run(env)
    injected = json.loads((output_dir(run) / "injected_hang.json").read_text())
    hang = next(e for e in events(run) if e.kind == "hang_suspected")
    return hang.t - injected["t"]


def output_dir(run: Path) -> Path:
    """The run's own output folder (each run of a preset without output_dir gets one), from its exact command."""
    command = json.loads((run / "command.json").read_text())
    flag = next(a for a in command["argv"] if a.startswith("--output-dir="))
    return Path(command["workdir"]) / flag.split("=", 1)[1]


def run(quick: bool = False) -> None:
    print("4. Hang detection")
    env = isolated_env()
    name = write_preset(
        env, "hang", gpus=2, steps=5000, options="  inject_hang: {rank: 1, step: 40}", hang_timeout=HANG_TIMEOUT
    )
    runs = 3 if quick else 5
    latencies = [latency(env, name) for _ in range(runs)]
    worst = max(latencies)
    record(
        "hang",
        f"injected hang -> event, worst of {runs} (timeout {HANG_TIMEOUT:g} s)",
        worst,
        "s",
        HANG_TIMEOUT,
        "<= timeout + 2 s",
        worst <= HANG_TIMEOUT + 2,
    )
    record("hang", f"injected hang -> event, median of {runs}", median(latencies), "s", HANG_TIMEOUT, "(info)")
    slow = write_preset(
        env,
        "slow-ckpt",
        gpus=2,
        steps=120,
        options="  save_every: 30\n  checkpoint_time_s: 4.0",
        hang_timeout=2.0,
        first_step_timeout=60,
    )
    healthy = 5 if quick else 20
    false_positives = 0
    for _ in range(healthy):
        result = gw(env, "run", slow, "--headless")
        kinds = [e.kind for e in events(newest_run(env))]
        false_positives += result.returncode == 3 or "hang_suspected" in kinds
    record(
        "hang",
        f"false hang alarms in {healthy} healthy runs (4 s checkpoints, 2 s hang timeout)",
        false_positives,
        "runs",
        None,
        "none",
        false_positives == 0,
    )
