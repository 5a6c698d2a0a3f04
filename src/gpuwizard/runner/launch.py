"""From a preset to a running job: smoke variants, pre-launch checks, the run folder, the detached supervisor."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuwizard.codes import ExitCode, RunState
from gpuwizard.contracts import BuildContext, Plan
from gpuwizard.errors import Problem, UserError, problem
from gpuwizard.plan import build_command, plan_here, with_gpus
from gpuwizard.preset import ENV_NAME, Preset, load_preset
from gpuwizard.runner.locks import output_holder
from gpuwizard.runner.records import Environment, Expectations, Job, RecordError, Status
from gpuwizard.runner.rundir import RunDir, baseline_green, find_run, list_runs, new_run_dir, publish
from gpuwizard.schema import updated
from gpuwizard.secrets import REDACTED, redacted, split_secrets
from gpuwizard.trainercheck import TrainerCheck, check_command
from gpuwizard.trainers import get_trainer
from gpuwizard.yamlio import atomic_write

SMOKE_STEPS = 50
SMOKE_PER_DEVICE_BATCH = 2


@dataclass
class PreparedRun:
    """A planned job that passed every check; `warnings` are shown before it starts."""

    preset: Preset
    plan: Plan
    ctx: BuildContext
    smoke: bool
    baseline_green: bool
    warnings: list[Problem] = field(default_factory=list)
    resumed_from: str | None = None
    """The run a resumed run continues (None when it is not one of ours)."""
    checkpoint: Path | None = None
    """The checkpoint a resumed run continues from."""
    driver: tuple[str | None, str | None] = (None, None)
    """The NVIDIA driver and CUDA versions seen here."""
    trainer_check: TrainerCheck | None = None
    """The installed trainer's own reading of the command (None: skipped with --no-check)."""


def smoke_variant(preset: Preset) -> Preset:
    """50 steps at the smallest batch: the quick repro of a hang or crash."""
    trainer = get_trainer(preset.trainer)
    world = trainer.world_size(preset)
    size = SMOKE_PER_DEVICE_BATCH * world if trainer.batch_is_global else SMOKE_PER_DEVICE_BATCH
    return updated(
        preset, batch=updated(preset.batch, size=size, grad_accum=1), optim=updated(preset.optim, steps=SMOKE_STEPS)
    )


def with_node_rank(preset: Preset, node_rank: int) -> Preset:
    """`run --node-rank K`: this node's rank, checked against hardware.nodes like the preset's own."""
    from gpuwizard.preset import with_field

    try:
        return with_field(preset, "hardware.node_rank", node_rank)
    except UserError as exc:
        raise UserError([replace(p, field="--node-rank") for p in exc.problems]) from None


def with_env(preset: Preset, assignments: list[str]) -> Preset:
    """Apply --env NAME=VALUE pairs to launch.env; a bare NAME takes its value from this environment, which keeps a
    secret out of the process list (`ps` shows gpuwizard's own arguments)."""
    env = dict(preset.launch.env)
    for item in assignments:
        name, sep, value = item.partition("=")
        if not ENV_NAME.fullmatch(name) or "\0" in value:
            raise UserError(
                problem(
                    "--env",
                    "must be NAME=VALUE or NAME with a valid variable name",
                    "e.g. --env NCCL_P2P_DISABLE=1",
                    value=item,
                )
            )
        if not sep:
            if name not in os.environ:
                raise UserError(
                    problem(
                        "--env",
                        f"{name} is not set in this environment",
                        f"export {name} first, or give NAME=VALUE",
                        value=item,
                    )
                )
            value = os.environ[name]
        env[name] = value
    return updated(preset, launch=updated(preset.launch, env=env))


def restore_secrets(preset: Preset) -> Preset:
    """A preset read back from a run folder has its secrets redacted: take them from this environment, or from the
    user's preset of the same name, or refuse in one paragraph."""
    missing = [name for name, value in preset.launch.env.items() if value == REDACTED]
    if not missing:
        return preset
    saved: dict[str, str] = {}
    try:
        saved = dict(load_preset(preset.name).launch.env)
    except UserError:
        pass
    env = dict(preset.launch.env)
    for name in missing:
        value = os.environ.get(name) or (saved.get(name) if saved.get(name) != REDACTED else None)
        if value is None:
            raise UserError(
                problem(
                    f"launch.env.{name}",
                    "is a secret, kept out of the run folder",
                    f"export {name} to run this again",
                    value=REDACTED,
                )
            )
        env[name] = value
    return updated(preset, launch=updated(preset.launch, env=env))


def launcher_problems(argv: list[str], env: dict[str, str]) -> list[Problem]:
    exe = argv[0]
    if "/" in exe:
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            return [
                problem(
                    "launch.python",
                    f"the launcher {exe} is not an executable file",
                    "install torch (torchrun) in the training environment, or fix launch.python",
                    value=exe,
                )
            ]
        return []
    if shutil.which(exe, path=env.get("PATH")) is None:
        return [
            problem(
                "launch.python",
                f"the launcher `{exe}` is not on PATH",
                f"install {exe} or set launch.python to the training environment's interpreter",
                value=exe,
            )
        ]
    return []


def resume_source(preset: Preset, ctx: BuildContext, run_id: str | None) -> tuple[str | None, list[Problem]]:
    """The earlier run a resumed run continues: the one named, or the newest of this preset on the same output
    folder; and the checkpoint it continues from must exist."""
    out = str(ctx.output_path.resolve())
    found: list[Problem] = []
    linked = None
    if run_id is not None:
        run = find_run(run_id)
        if run is None:
            return None, [problem("--resume", "no such run", "pick a run id from `gpuwizard runs`", value=run_id)]
        try:
            status, job = run.status(), run.job()
        except RecordError as exc:
            return None, [problem("--resume", f"run {run.run_id} cannot be read: {exc}", "pick another run")]
        if job.output_dir != out:
            found.append(
                problem(
                    "--resume",
                    f"run {run.run_id} wrote to {job.output_dir}, but {preset.name} writes to {out}",
                    f"resume it with the preset it ran ({status.preset}), or set output_dir to {job.output_dir}",
                    value=run_id,
                )
            )
        elif not status.final:
            found.append(
                problem(
                    "--resume",
                    f"run {run.run_id} is still {status.state}",
                    f"stop it first (`gpuwizard stop {run.run_id}`) or let it end",
                    value=run_id,
                )
            )
        linked = run.run_id
    else:
        for entry in list_runs():
            status = entry.status
            if status is None or status.preset != preset.name or status.smoke:
                continue
            try:
                if entry.run.job().output_dir == out:
                    linked = entry.run.run_id
                    break
            except RecordError:
                continue
    if not found and get_trainer(preset.trainer).last_checkpoint(ctx) is None:
        found.append(
            problem(
                "--resume",
                f"there is no {preset.trainer} checkpoint in {out} to continue from",
                "run without --resume to start fresh (the trainer saves a checkpoint at its save interval and at the "
                "end)",
                **({"value": run_id} if run_id else {}),
            )
        )
    return linked, found


def prepare_run(
    preset: Preset,
    gpus: int | None = None,
    smoke: bool = False,
    env: list[str] | None = None,
    inventory: Any = None,
    resume: bool = False,
    resume_run: str | None = None,
    node_rank: int | None = None,
    slurm: bool = False,
    check: bool = True,
) -> PreparedRun:
    """Plan and check everything that can be checked before a process starts; UserError on any error.

    `resume` continues from the last checkpoint in the output folder, linked to `resume_run` (or the newest run of
    this preset there); `check` asks the installed trainer's own parser about the command first."""
    from gpuwizard.gpus.inventory import read_inventory

    if resume and smoke:
        raise UserError(
            problem("--smoke", "a smoke run is a fresh 50-step repro and cannot resume", "use one of them", value=True)
        )
    preset = with_gpus(preset, gpus)
    if slurm:
        from gpuwizard.preset import with_field

        preset = with_field(preset, "launch.scheduler", "slurm")
    on_slurm = preset.launch.scheduler == "slurm"
    if node_rank is not None:
        if on_slurm:
            raise UserError(
                problem("--node-rank", "SLURM starts every node itself", "leave --node-rank out", value=node_rank)
            )
        preset = with_node_rank(preset, node_rank)
    if env:
        preset = with_env(preset, env)
    if smoke:
        preset = smoke_variant(preset)
    inventory = inventory if inventory is not None else read_inventory()
    plan, ctx = plan_here(preset, inventory, resume=resume)
    errors = list(plan.errors)
    resumed_from, trainer_check = None, None
    if resume and not errors:
        resumed_from, resume_errors = resume_source(preset, ctx, resume_run)
        errors += resume_errors
    if not errors:
        trainer = get_trainer(preset.trainer)
        errors += [p for p in trainer.preflight(ctx) if p.level == "error"]
        spec = build_command(ctx)
        errors += launcher_problems(spec.argv, spec.full_env())
        if check and not errors:
            trainer_check = check_command(ctx, spec)
            errors += [p for p in trainer_check.problems() if p.level == "error"]
        if on_slurm:
            from gpuwizard.slurm import cluster_problems

            errors += cluster_problems()  # the nodes' GPUs and cores are SLURM's to check, not this machine's
        elif plan.device == "cuda":
            visible = len(inventory.visible())
            if visible < preset.hardware.gpus:
                errors.append(
                    problem(
                        "hardware.gpus",
                        f"this job needs {preset.hardware.gpus} GPU(s) per node but {visible} are visible here"
                        + (f" ({inventory.message})" if inventory.message else ""),
                        "lower hardware.gpus, or use hardware.device: cpu for a CPU dry run",
                        value=preset.hardware.gpus,
                    )
                )
        cores = os.cpu_count() or 1
        if not on_slurm and plan.device == "cpu" and plan.processes_per_node > cores:
            errors.append(
                problem(
                    "hardware.gpus",
                    f"a CPU run starts one process per GPU slot, and this machine has {cores} cores",
                    f"use at most {cores} (2 is enough to exercise the distributed path)",
                    value=preset.hardware.gpus,
                )
            )
    if not errors and not on_slurm and preset.hardware.nodes > 1 and preset.hardware.rdzv_endpoint:
        from gpuwizard.network import preflight

        errors += preflight(preset.hardware.rdzv_endpoint, preset.hardware.node_rank)
    if not errors and not smoke and not on_slurm:
        holder = output_holder(ctx.output_path, preset.hardware.node_rank)
        if holder is not None:
            errors.append(
                problem(
                    "output_dir",
                    f"run {holder} is still writing to this folder; two runs there would interleave and overwrite "
                    "checkpoints",
                    f"wait for it, stop it (`gpuwizard stop {holder}`), or choose another output_dir",
                    value=ctx.output_dir,
                )
            )
    if errors:
        raise UserError(errors, preset.name)
    warnings = list(plan.warnings)
    if trainer_check is not None and trainer_check.status == "not checked":
        warnings += trainer_check.problems()
    green = baseline_green(preset.name)  # reads the whole run history: once per launch
    if plan.world_size > 1 and not green:
        warnings.append(
            problem(
                None,
                f"preset {preset.name} has never finished green on one GPU; a multi-GPU failure is much harder to read "
                "than a single-GPU one",
                f"run `gpuwizard run {preset.name} --gpus 1` first (a --smoke run is enough)",
                level="warning",
            )
        )
    checkpoint = get_trainer(preset.trainer).last_checkpoint(ctx) if resume else None
    driver = (inventory.driver_version, inventory.cuda_version)
    return PreparedRun(preset, plan, ctx, smoke, green, warnings, resumed_from, checkpoint, driver, trainer_check)


def expectations(prepared: PreparedRun) -> Expectations:
    plan, preset = prepared.plan, prepared.preset
    return Expectations(  # in the log's units: the trainer's own steps
        steps=plan.trainer_steps,
        lr=get_trainer(preset.trainer).logged_lr(prepared.ctx),
        warmup_steps=(plan.warmup_steps or 0) * plan.trainer_steps_per_update,
        effective_batch=plan.effective_batch,
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


def start_run(prepared: PreparedRun, on_hang: str = "report", wait_s: float = 120.0) -> RunDir:
    """Write the run folder and start its supervisor in a new session; returns once the job is launched."""
    try:
        run, stage = new_run_dir(prepared.preset.name)
    except OSError as exc:
        raise UserError(
            problem(None, f"cannot create the run folder: {exc}", "set GPUWIZARD_DATA_DIR to a writable folder")
        ) from None
    ctx = prepared.ctx
    if prepared.smoke:
        ctx.output_dir = str(run.path / "output")
    spec = build_command(ctx)
    preset, plan = prepared.preset, prepared.plan
    try:
        if plan.device == "cuda":
            from gpuwizard.runner.flight import DUMP_DIR, flight_recorder_env

            (stage.path / DUMP_DIR).mkdir(mode=0o700)
            spec.env = flight_recorder_env(run.path) | spec.env  # the preset's own values win
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
            ),
        )
        if preset.launch.scheduler == "slurm":
            from gpuwizard.slurm import batch_script

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
        publish(stage, run)
    except OSError as exc:
        shutil.rmtree(stage.path, ignore_errors=True)
        run.path.rmdir()
        raise UserError(
            problem(
                None,
                f"cannot write the run folder {run.path}: {exc.strerror or exc}",
                "free disk space or set GPUWIZARD_DATA_DIR",
            )
        ) from None

    if preset.launch.scheduler == "slurm":
        submit_to_slurm(run)
    with open(os.open(run.path / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "gpuwizard.runner.supervisor", str(run.path)],
            env={**os.environ, **secret_env},  # secrets travel by environment only, never through the run folder
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    try:
        wait_until_launched(run, supervisor, wait_s)
    except BaseException:
        supervisor.terminate()  # an interrupt (or any failure) after the spawn stops the job with it
        raise
    return run


SBATCH_SCRIPT = "job.sbatch"


def submit_to_slurm(run: RunDir) -> None:
    """sbatch the run's script from here (the submitting host, with the user's environment); a refusal is sbatch's
    own message in one paragraph, and the run folder goes away with it."""
    from gpuwizard.slurm import submit

    job_id, message = submit(str(run.path / SBATCH_SCRIPT))
    if job_id is None:
        shutil.rmtree(run.path, ignore_errors=True)
        field = "slurm.partition" if "partition" in message.lower() else "--slurm"
        raise UserError(
            problem(
                field,
                f"sbatch refused the job: {message}",
                "fix the slurm section of the preset (`sinfo` lists the partitions), then run again",
            )
        )
    run.update_status(slurm_job_id=job_id, slurm_state="PENDING")


def wait_until_launched(run: RunDir, supervisor: subprocess.Popen[bytes], wait_s: float) -> None:
    """Watch the supervisor process itself until it has launched the job (or ended); a slow start is not a lost one."""
    deadline = time.monotonic() + wait_s
    while (status := run.status()).state == RunState.STARTING and status.slurm_state is None:
        if supervisor.poll() is not None:
            if run.status().state == RunState.STARTING:  # it died before it could say so itself
                run.update_status(
                    state=RunState.FAILED,
                    exit_code=int(ExitCode.FAILED),
                    ended=time.time(),
                    error=f"the supervisor exited with code {supervisor.returncode} before starting the job; see "
                    f"{run.path / 'supervisor.log'}",
                )
            return
        if time.monotonic() > deadline:
            supervisor.terminate()
            raise UserError(
                problem(
                    None,
                    f"the run's supervisor did not start the job within {wait_s:.0f} s",
                    f"see {run.path / 'supervisor.log'}",
                )
            )
        time.sleep(0.05)


def relaunch(run: RunDir, smoke: bool = False, env: list[str] | None = None, resume: bool = False) -> RunDir:
    """Start a run again from its folder's preset (secrets restored): a smoke repro, a retry with more environment,
    or a resume from its last checkpoint linked to it; UserError when that cannot start."""
    from gpuwizard.preset import load_preset_file

    preset = restore_secrets(load_preset_file(run.path / "preset.yaml"))
    prepared = prepare_run(preset, smoke=smoke, env=env, resume=resume, resume_run=run.run_id if resume else None)
    return start_run(prepared, on_hang="report")
