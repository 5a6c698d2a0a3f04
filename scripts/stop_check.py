"""Stop a real run mid-training and show that nothing is left: no process, no GPU memory (the GPU check runs it).

Usage: python scripts/stop_check.py PRESET   (set GPUWIZARD_CONFIG_DIR / GPUWIZARD_DATA_DIR to keep it apart)
Exit 0 when the stop was clean, 1 otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from gpuwizard.model.preset import with_field
from gpuwizard.model.preset_files import load_preset, save_user_preset
from gpuwizard.runner.control.stopping import request_stop
from gpuwizard.runs.rundir import alive_processes, list_runs


def slow_copy(name: str) -> str:
    """The preset, long and slowed down, saved under a new name so the stop lands mid-run."""
    preset = load_preset(name)
    for dotted, value in (
        ("name", f"{name}-stopcheck"),
        ("optim.steps", 5000),
        ("trainer_options.step_time_s", 0.05),
        ("trainer_options.log_every", 5),
    ):
        preset = with_field(preset, dotted, value)
    save_user_preset(preset)
    return preset.name


def main() -> int:
    name = slow_copy(sys.argv[1])
    before = {e.run.run_id for e in list_runs()}
    headless = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", name, "--headless"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline, run, progress = time.time() + 180, None, None
    while time.time() < deadline and headless.poll() is None:
        run = next((e.run for e in list_runs() if e.run.run_id not in before), None)
        progress = run.progress() if run is not None else None
        if progress is not None and (progress.step or 0) >= 20:
            break
        time.sleep(0.5)
    if run is None or headless.poll() is not None:
        print(f"the run never reached step 20 (headless exit {headless.poll()})")
        return 1
    step = progress.step
    stop_t = time.time()
    request_stop(run)
    rc = headless.wait(timeout=120)
    status = run.status()
    alive = alive_processes(run, status)
    for _ in range(50):  # the supervisor exits a moment after writing its final status
        if not alive:
            break
        time.sleep(0.1)
        alive = alive_processes(run, status)
    held = status.gpu_memory_held_mb
    print(
        f"stopped {status.run_id} at step {step}: headless exit {rc}, state {status.state}, "
        f"{time.time() - stop_t:.1f} s to stop; processes left: {alive or 'none'}; "
        f"GPU memory held after: {json.dumps(held) if held else 'none'}"
    )
    return 0 if rc == 4 and status.state == "stopped" and not alive and not status.survivors and not held else 1


if __name__ == "__main__":
    raise SystemExit(main())
