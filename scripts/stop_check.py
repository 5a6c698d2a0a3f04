"""Stop a real run mid-training and show that nothing is left: no process, no GPU memory (the GPU check runs it).

Usage: python scripts/stop_check.py PRESET   (set GPUWIZARD_CONFIG_DIR / GPUWIZARD_DATA_DIR to keep it apart)
Exit 0 when the stop was clean, 1 otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from gpuwizard.preset import load_preset, save_user_preset, with_field
from gpuwizard.runner.follow import request_stop
from gpuwizard.runner.rundir import all_runs, pid_alive, read_jsonl


def slow_copy(name: str) -> str:
    """The preset, long and slowed down, saved under a new name so the stop lands mid-run."""
    preset = load_preset(name)
    for dotted, value in (("name", f"{name}-stopcheck"), ("optim.steps", 5000), ("trainer_options.step_time_s", 0.05), ("trainer_options.log_every", 5)):
        preset = with_field(preset, dotted, value)
    save_user_preset(preset)
    return preset.name


def main() -> int:
    name = slow_copy(sys.argv[1])
    before = {r.run_id for r in all_runs()}
    headless = subprocess.Popen([sys.executable, "-m", "gpuwizard", "run", name, "--headless"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline, run = time.time() + 180, None
    while time.time() < deadline and headless.poll() is None:
        run = next((r for r in all_runs() if r.run_id not in before), None)
        if run is not None and ((run.read_json("progress.json", {}) or {}).get("step") or 0) >= 20:
            break
        time.sleep(0.5)
    if run is None or headless.poll() is not None:
        print(f"the run never reached step 20 (headless exit {headless.poll()})")
        return 1
    step = run.read_json("progress.json", {}).get("step")
    stop_t = time.time()
    request_stop(run)
    rc = headless.wait(timeout=120)
    status = run.status()
    pids = {r["pid"] for line in read_jsonl(run.ranks_file) for r in line["ranks"]} | {status.get("job_pid"), status.get("supervisor_pid")}
    alive = sorted(p for p in pids if pid_alive(p))
    for _ in range(50):  # the supervisor exits a moment after writing its final status
        if not alive:
            break
        time.sleep(0.1)
        alive = sorted(p for p in pids if pid_alive(p))
    print(f"stopped {status.get('run_id')} at step {step}: headless exit {rc}, state {status.get('state')}, "
          f"{time.time() - stop_t:.1f} s to stop; processes left: {alive or 'none'}; "
          f"GPU memory held after: {json.dumps(status.get('gpu_memory_held_mb')) if status.get('gpu_memory_held_mb') else 'none'}")
    return 0 if rc == 4 and status.get("state") == "stopped" and not alive and not status.get("survivors") and not status.get("gpu_memory_held_mb") else 1


if __name__ == "__main__":
    raise SystemExit(main())
