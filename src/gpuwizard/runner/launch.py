"""From a preset to a running job: smoke variants, pre-launch checks, the run folder, the detached supervisor."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
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
from gpuwizard.machine import machine_problems
from gpuwizard.plan import build_command, plan_here, with_gpus
from gpuwizard.preset import Preset
from gpuwizard.preset_files import load_preset
from gpuwizard.preset_sections import ENV_NAME
from gpuwizard.runner.locks import output_holder
from gpuwizard.runner.records import Environment, Expectations, Job, RecordError, Status
from gpuwizard.runner.resume import resume_source
from gpuwizard.runner.rundir import RunDir, baseline_green, new_run_dir, publish
from gpuwizard.safetext import control_characters
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
    probe: str | None = None
    """The `gpuwizard probe` this run measures one configuration for."""


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
        if not ENV_NAME.fullmatch(name):
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
        if control_characters(value):  # like a preset's values: they reach command lines and batch scripts
            raise UserError(
                problem(
                    "--env",
                    f"the value of {name} holds control characters ({', '.join(control_characters(value))})",
                    "give a value of one line of text",
                    value=name,
                )
            )
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
    resume_warnings: list[Problem] = []
    if resume and not errors:
        resumed_from, resume_found = resume_source(preset, ctx, resume_run)
        errors += [p for p in resume_found if p.level == "error"]
        resume_warnings = [p for p in resume_found if p.level != "error"]
    if not errors:
        trainer = get_trainer(preset.trainer)
        errors += [p for p in trainer.preflight(ctx) if p.level == "error"]
        spec = build_command(ctx)
        errors += launcher_problems(spec.argv, spec.full_env())
        if check and not errors:
            trainer_check = check_command(ctx, spec)
            errors += [p for p in trainer_check.problems() if p.level == "error"]
        if on_slurm:
            from gpuwizard.slurm import cluster_problems, secret_problems

            errors += cluster_problems()  # the nodes' GPUs and cores are SLURM's to check, not this machine's
            errors += secret_problems(preset.slurm.sbatch_args, sorted(split_secrets(spec.env)[1]), dict(os.environ))
        errors += machine_problems(preset, plan, inventory)  # the plan showed them; here they refuse
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
    warnings = list(plan.warnings) + resume_warnings
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
        schedule=get_trainer(preset.trainer).lr_schedule(prepared.ctx),
        log_interval=get_trainer(preset.trainer).log_interval(prepared.ctx),
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
    """Write the run folder and start its supervisor in a new session; returns once the job is launched.

    Interrupted anywhere on the way (Ctrl-C), it leaves no half-made folder, no process and no run that still says
    'starting': the run ends as stopped before it returns."""
    started = StartUp()
    try:
        started.run, started.stage = run, stage = new_run_dir(prepared.preset.name)
        secret_env = write_run_folder(prepared, on_hang, run, stage)
        publish(stage, run)
        started.published = True
        if prepared.preset.launch.scheduler == "slurm":
            submit_to_slurm(run, secret_env)
        from gpuwizard.runner.supervisor import STOP_SIGNALS

        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # the child starts with them blocked, and a
        try:  # Ctrl-C meanwhile is raised only once the supervisor is known here (so abandon stops it)
            started.supervisor = spawn_supervisor(run, secret_env)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        wait_until_launched(run, started.supervisor, wait_s)
        return run
    except BaseException as exc:
        started.abandon(exc)
        if isinstance(exc, OSError) and not started.published:
            where = f"write the run folder {started.run.path}" if started.run else "create the run folder"
            raise UserError(
                problem(None, f"cannot {where}: {exc.strerror or exc}", "free disk space or set GPUWIZARD_DATA_DIR")
            ) from None
        raise


def write_run_folder(prepared: PreparedRun, on_hang: str, run: RunDir, stage: RunDir) -> dict[str, str]:
    """Fill the staging folder (preset, plan, command, job, environment, status); returns the secrets, which travel
    to the supervisor by environment only."""
    ctx = prepared.ctx
    if prepared.smoke:
        ctx.output_dir = str(run.path / "output")
    spec = build_command(ctx)
    preset, plan = prepared.preset, prepared.plan
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
            probe=prepared.probe,
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


def spawn_supervisor(run: RunDir, secret_env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The supervisor, in its own session (called with its stop signals blocked: it keeps them so until its handlers
    are in, see supervisor.STOP_SIGNALS); it and every process of its job carry the run marker."""
    from gpuwizard.runner.procs import MARKER, marker_value

    env = {**os.environ, **secret_env, MARKER: marker_value(run.path)}  # secrets by environment, never the folder
    log_fd = os.open(run.path / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "gpuwizard.runner.supervisor", str(run.path)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(log_fd)


ABANDON_WAIT_S = 30.0
"""How long an interrupted start waits for its supervisor to record the stop (the job's stop grace is 10 s)."""


@dataclass
class StartUp:
    """How far start_run got, so an interrupt anywhere undoes exactly that much."""

    run: RunDir | None = None
    stage: RunDir | None = None
    published: bool = False
    supervisor: subprocess.Popen[bytes] | None = None

    def abandon(self, cause: BaseException) -> None:
        """Undo a start cut short; a second Ctrl-C meanwhile does not leave it half done."""
        if isinstance(cause, KeyboardInterrupt):
            why = "interrupted before the job started"
        elif isinstance(cause, UserError):
            why = cause.paragraph()
        else:
            why = f"the start failed: {type(cause).__name__}: {cause}"
        while True:
            try:
                self._abandon(why)
                return
            except KeyboardInterrupt:
                continue

    def _abandon(self, why: str) -> None:
        if self.run is None or self.stage is None:
            return  # new_run_dir cleans up after itself
        shutil.rmtree(self.stage.path, ignore_errors=True)
        if not self.published:
            with contextlib.suppress(OSError):
                self.run.path.rmdir()
            return
        if self.supervisor is not None:
            self.supervisor.terminate()  # kept pending until its handlers are in; it then ends the run itself
            deadline = time.monotonic() + ABANDON_WAIT_S
            while self.supervisor.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        try:
            status = self.run.status()
        except RecordError:
            return  # the folder went with a refused submission
        if status.final:
            return
        if status.slurm_job_id:
            from gpuwizard.slurm import cancel

            cancel(status.slurm_job_id)
        with contextlib.suppress(OSError, RecordError):
            self.run.update_status(
                state=RunState.STOPPED,
                exit_code=int(ExitCode.STOPPED),
                ended=time.time(),
                stop_reason="user",
                error=why,
            )


SBATCH_SCRIPT = "job.sbatch"


def submit_to_slurm(run: RunDir, secrets: dict[str, str]) -> None:
    """sbatch the run's script from here (the submitting host, with the user's environment and the run's secrets);
    a refusal is sbatch's own message in one paragraph, and the run folder goes away with it."""
    from gpuwizard.slurm import submit

    job_id, message = submit(str(run.path / SBATCH_SCRIPT), secrets)
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


def relaunch(
    run: RunDir, smoke: bool = False, env: list[str] | None = None, resume: bool = False, steps: int | None = None
) -> RunDir:
    """Start a run again from its folder's preset (secrets restored): a smoke repro, a retry with more environment,
    or a resume from its last checkpoint linked to it (to `steps` optim.steps: a finished run continued); UserError
    when that cannot start."""
    from gpuwizard.preset import with_field
    from gpuwizard.preset_files import load_preset_file

    preset = restore_secrets(load_preset_file(run.path / "preset.yaml"))
    if steps is not None:
        preset = with_field(preset, "optim.steps", steps)
    prepared = prepare_run(preset, smoke=smoke, env=env, resume=resume, resume_run=run.run_id if resume else None)
    return start_run(prepared, on_hang="report")
