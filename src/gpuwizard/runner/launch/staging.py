"""A new run's folder before its job starts: preset, plan, command, job with its expectations, environment and
first status; and the tidying of folders whose launch was killed half way."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import time
from typing import Any, Literal

from gpuwizard.core.codes import RunState
from gpuwizard.core.schema import updated
from gpuwizard.core.secrets import redacted, split_secrets
from gpuwizard.core.yamlio import atomic_write
from gpuwizard.planning.plan import build_command
from gpuwizard.runner.control.launches import write_launcher
from gpuwizard.runner.launch.gauge_env import gauge_env
from gpuwizard.runner.launch.prepare import PreparedRun
from gpuwizard.runs.records import (
    Environment,
    Expectations,
    Job,
    Status,
)
from gpuwizard.runs.rundir import RunDir
from gpuwizard.trainers.registry import get_trainer

SBATCH_SCRIPT = "job.sbatch"


def expectations(prepared: PreparedRun) -> Expectations:
    plan, preset = prepared.plan, prepared.preset
    return Expectations(  # in the log's units: the trainer's own steps
        steps=plan.trainer_steps,
        lr=get_trainer(preset.trainer).logged_lr(prepared.ctx),
        warmup_steps=(plan.warmup_steps or 0) * plan.trainer_steps_per_update,
        schedule=get_trainer(preset.trainer).lr_schedule(prepared.ctx),
        log_interval=get_trainer(preset.trainer).log_interval(prepared.ctx),
        effective_batch=plan.effective_batch,
        samples_per_step=plan.effective_batch // plan.trainer_steps_per_update if plan.effective_batch else None,
        world_size=plan.world_size,
        hang_timeout_s=preset.monitor.hang_timeout_s,
        first_step_timeout_s=preset.monitor.first_step_timeout_s,
        multi_node=preset.hardware.nodes > 1,
        baseline_green=prepared.baseline_green,
    )


VERSIONS_PROBE = r"""
import importlib.metadata as md, json, sys
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
print(json.dumps({"python": sys.version.split()[0], "torch": version("torch"), "trainer": version(sys.argv[1])}))
"""


def environment(prepared: PreparedRun) -> Environment:
    """Versions in the training environment, read from package metadata (nothing heavy is imported)."""
    trainer = get_trainer(prepared.preset.trainer)
    found: dict[str, Any] = {}
    try:
        out = subprocess.run(
            [prepared.ctx.python, "-c", VERSIONS_PROBE, trainer.package],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        found = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else {}
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    hw = prepared.preset.hardware
    return Environment(
        hostname=socket.gethostname(),
        node_rank=hw.node_rank,
        nodes=hw.nodes,
        python=str(found.get("python") or prepared.ctx.python),
        torch=found.get("torch"),
        trainer_package=trainer.package,
        trainer_version=found.get("trainer"),
        driver=prepared.driver[0],
        cuda=prepared.driver[1],
    )


def write_run_folder(
    prepared: PreparedRun, on_hang: Literal["report", "stop"], run: RunDir, stage: RunDir
) -> dict[str, str]:
    """Fill the staging folder (preset, plan, command, job, environment, status); returns the secrets, which travel
    to the supervisor by environment only."""
    write_launcher(stage)  # first: a half-made folder always names the process that can still finish it
    ctx = prepared.ctx
    prepared.bind_output(run)
    spec = build_command(ctx)
    preset, plan = prepared.preset, prepared.plan
    if plan.device == "cuda":
        from gpuwizard.runner.supervise.flight import DUMP_DIR, flight_recorder_env

        (stage.path / DUMP_DIR).mkdir(mode=0o700)
        spec.env = flight_recorder_env(run.path) | spec.env  # the preset's own values win
    if preset.monitor.gauge:
        spec.env = gauge_env(run.path, plan, preset.batch.grad_accum, spec.env)
    plain_env, secret_env = split_secrets(spec.env)
    shown = updated(preset, launch=updated(preset.launch, env=redacted(preset.launch.env)))
    atomic_write(stage.path / "preset.yaml", shown.to_yaml())
    atomic_write(stage.path / "plan.json", json.dumps(plan.to_json(), indent=2))
    atomic_write(stage.path / "command.json", json.dumps(spec.to_json(), indent=2))
    stage.write(
        "job.json",
        Job(
            argv=spec.argv,
            env=plain_env,
            unset=spec.unset,
            workdir=spec.workdir,
            trainer=preset.trainer,
            device=plan.device,
            on_hang=on_hang,
            expect=expectations(prepared),
            output_dir=str(ctx.output_path.resolve()),
            node_rank=preset.hardware.node_rank,
            python=ctx.python,
            scheduler=preset.launch.scheduler,
            resume_chain=prepared.resume_chain or run.run_id,
        ),
    )
    if preset.launch.scheduler == "slurm":
        from gpuwizard.runner.host.slurm import batch_script

        atomic_write(stage.path / SBATCH_SCRIPT, batch_script(ctx, spec, run_dir=run.path))
    stage.write("environment.json", environment(prepared))
    if prepared.trainer_check is not None:
        stage.write("trainer-check.json", prepared.trainer_check)
    stage.write(
        "status.json",
        Status(
            run_id=run.run_id,
            preset=preset.name,
            trainer=preset.trainer,
            policy=preset.policy,
            world_size=plan.world_size,
            nodes=plan.nodes,
            device=plan.device,
            smoke=prepared.smoke,
            probe=prepared.probe,
            sweep=prepared.sweep,
            steps=plan.trainer_steps,
            resumed_from=prepared.resumed_from,
            created=time.time(),
            state=RunState.STARTING,
            command=(
                shlex.join(["sbatch", str(run.path / SBATCH_SCRIPT)])
                if preset.launch.scheduler == "slurm"
                else spec.shell()
            ),
            on_hang=on_hang,
        ),
    )
    return secret_env
