"""`gpuwizard run`, `attach` and `runs`: launch, follow headless, history."""

from __future__ import annotations

import argparse
import json
import sys
import time

from gpuwizard.errors import UserError, problem
from gpuwizard.runner.follow import RunFollower, event_text, is_final, request_stop, status_line, supervisor_lost
from gpuwizard.runner.rundir import RunDir, all_runs, baseline_green, find_run, scaling_report, scaling_text

STATUS_EVERY_S = 2.0


def run_command(args: argparse.Namespace) -> int:
    from gpuwizard.preset import load_preset
    from gpuwizard.runner.launch import prepare_run, start_run

    prepared = prepare_run(load_preset(args.preset), gpus=args.gpus, smoke=args.smoke, env=args.env)
    for warning in prepared.warnings:
        sys.stderr.write("warning: " + warning.paragraph() + "\n")
    run = start_run(prepared, on_hang="stop" if args.headless else "report")
    if args.headless:
        print(f"run {run.run_id}: {prepared.plan.world_size} x {prepared.plan.device}, {prepared.plan.steps} steps; folder {run.path}", flush=True)
        return follow_headless(run, stream_log=args.log, stop_on_interrupt=True)
    from gpuwizard.tui.launch import run_app

    return run_app(attach=run.run_id)


def attach_command(args: argparse.Namespace) -> int:
    run = find_run(args.run_id)
    if run is None:
        raise UserError(problem("RUN_ID", "no run found" if args.run_id else "there are no runs yet", "see `gpuwizard runs`", value=args.run_id))
    if args.headless:
        print(f"attached to {run.run_id} ({run.status().get('state')}); Ctrl-C detaches, the job keeps running", flush=True)
        return follow_headless(run, stream_log=args.log, stop_on_interrupt=False)
    from gpuwizard.tui.launch import run_app

    return run_app(attach=run.run_id)


def follow_headless(run: RunDir, stream_log: bool, stop_on_interrupt: bool, out=None) -> int:
    """Print status lines and events until the run ends; Ctrl-C stops the job (run) or detaches (attach)."""
    out = out or sys.stdout
    follower = RunFollower(run)
    last_line, last_status_t, stopping = "", 0.0, False
    try:
        while True:
            try:
                update = follower.poll()
                if stream_log:
                    for line in update.lines:
                        out.write(line + "\n")
                for event in update.events:
                    out.write(event_text(event) + "\n")
                status = update.status
                now = time.monotonic()
                line = status_line(run.read_json("progress.json"), status)
                if is_final(status):
                    out.write(line + "\n")
                    out.write(final_summary(run) + "\n")
                    out.flush()
                    return int(status.get("exit_code", 1))
                if supervisor_lost(run):
                    out.write("the run's supervisor is gone; its status can no longer be trusted\n")
                    return 1
                if line != last_line and now - last_status_t >= STATUS_EVERY_S:
                    out.write(line + "\n")
                    last_line, last_status_t = line, now
                out.flush()
                time.sleep(0.2)
            except KeyboardInterrupt:
                if not stop_on_interrupt:
                    out.write(f"\ndetached; the job keeps running. `gpuwizard attach {run.run_id}` to follow it again\n")
                    return 0
                if not stopping:
                    out.write("\nstopping the job (every rank, then a forced kill after 10 s)...\n")
                    out.flush()
                    request_stop(run)
                    stopping = True
    finally:
        follower.close()


def final_summary(run: RunDir) -> str:
    s = run.status()
    state, code = s.get("state"), s.get("exit_code")
    text = {
        "finished": "finished green",
        "failed": f"failed (job exit code {s.get('job_exit_code')})",
        "hung": "stopped after a suspected hang",
        "stopped": "stopped by the user",
    }.get(state, state)
    extra = f"; processes left behind: {s['survivors']}" if s.get("survivors") else ""
    if s.get("gpu_memory_held_mb"):
        extra += "; GPU memory still held: " + ", ".join(f"GPU {i} {mb:.0f} MB" for i, mb in s["gpu_memory_held_mb"].items())
    summary = f"run {run.run_id} {text}; exit code {code}{extra}. Folder: {run.path}"
    scaling = scaling_text(s.get("preset", "")) if state == "finished" else None
    return summary + (f"\nscaling of {s.get('preset')}: {scaling}" if scaling else "")


def runs_command(args: argparse.Namespace) -> int:
    rows = []
    for run in all_runs():
        s = run.status()
        progress = run.read_json("progress.json", {}) or {}
        ended = s.get("ended") or (time.time() if run.is_active() else s.get("created"))
        rows.append({
            "run_id": run.run_id, "preset": s.get("preset"), "state": s.get("state") if (run.is_active() or s.get("state") not in ("starting", "running", "stopping")) else "lost",
            "exit_code": s.get("exit_code"), "world_size": s.get("world_size"), "device": s.get("device"), "smoke": s.get("smoke"),
            "step": progress.get("step"), "steps": s.get("steps"), "duration_s": round(ended - (s.get("started") or s.get("created") or ended), 1),
            "baseline_green": baseline_green(s.get("preset", "")), "path": str(run.path),
        })
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    presets = sorted({r["preset"] for r in rows if r["preset"]})
    if not rows:
        print("no runs yet: `gpuwizard run demo-cpu --headless` starts one")
        return 0
    print(f"{'run id':<36} {'state':<9} {'exit':>4} {'gpus':>4} {'step':>12} {'time':>8}  baseline")
    for r in rows:
        step = f"{r['step'] if r['step'] is not None else '-'}/{r['steps'] or '?'}"
        mark = "green" if r["baseline_green"] else "never"
        print(f"{r['run_id'][:36]:<36} {r['state'] or '?':<9} {r['exit_code'] if r['exit_code'] is not None else '-':>4} {r['world_size'] or '?':>4} {step:>12} {int(r['duration_s'])//60:>5}:{int(r['duration_s'])%60:02d}  {mark}{' (smoke)' if r['smoke'] else ''}")
    for preset in presets:
        report = scaling_report(preset)
        if len(report) > 1:
            print(f"\nscaling of {preset} (latest finished run per process count):")
            for r in report:
                eff = f"{r['speedup']:.2f}x, efficiency {r['efficiency']:.0%}" if r["efficiency"] is not None else "no 1-process run to compare"
                print(f"  {r['world_size']} process(es): {r['samples_per_s']:.0f} samples/s  {eff}")
    return 0
