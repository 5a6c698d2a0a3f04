"""A new run's folder before its job starts: preset, plan, command, job with its expectations, environment and
first status; and the tidying of folders whose launch was killed half way."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Literal

from gpuwizard.core import paths
from gpuwizard.core.codes import ExitCode, RunState
from gpuwizard.core.schema import updated
from gpuwizard.core.secrets import redacted, split_secrets
from gpuwizard.core.yamlio import atomic_write
from gpuwizard.planning.plan import build_command
from gpuwizard.runner.gauge_env import gauge_env
from gpuwizard.runner.prepare import PreparedRun
from gpuwizard.runner.procs import marked_pids, marker_value
from gpuwizard.runs.records import (
    Environment,
    Expectations,
    Job,
    ProcessRef,
    Record,
    RecordError,
    Status,
    read_record,
)
from gpuwizard.runs.rundir import RunDir
from gpuwizard.trainers.registry import get_trainer

SBATCH_SCRIPT = "job.sbatch"
LAUNCHER = "launcher.json"
STAGING_SUFFIX = ".staging"
LAUNCHING_PREFIX = ".launching-"


class Launcher(Record):
    """The process that writes a run folder and starts its supervisor. Until the supervisor has taken over, a launcher
    that is gone (kill -9 of the wizard or of `run`) means nobody will finish or undo that start."""

    host: str
    process: ProcessRef

    @classmethod
    def here(cls) -> Launcher | None:
        ref = ProcessRef.of(os.getpid())
        return None if ref is None else cls(host=socket.gethostname(), process=ref)

    def gone(self) -> bool:
        """Ended for sure: a process of this machine that is not running (another machine's is not ours to judge)."""
        return self.host == socket.gethostname() and not self.process.alive()


def announce_launch() -> Path:
    """Name this process in the runs folder as starting a run, before any folder of that run exists: a half-made
    folder that names no launcher yet is then never taken for an abandoned one while its launcher lives."""
    base = paths.runs_dir()
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = base / f"{LAUNCHING_PREFIX}{os.getpid()}-{os.urandom(4).hex()}.json"
    launcher = Launcher.here()
    atomic_write(path, launcher.to_json_text() if launcher else "{}", make_parents=False)
    return path


def withdraw_launch(announced: Path | None) -> None:
    if announced is not None:
        with contextlib.suppress(OSError):
            announced.unlink(missing_ok=True)


def write_launcher(stage: RunDir) -> None:
    """Name this process as the folder's launcher, first of all its files (it travels with the published folder)."""
    launcher = Launcher.here()
    if launcher is not None:
        stage.write(LAUNCHER, launcher)


def launcher_gone(path: Path) -> bool | None:
    """Whether the launcher a file names has ended; None where the file names none."""
    try:
        return read_record(path, Launcher).gone()
    except RecordError:
        return None


def launches_under_way(base: Path) -> bool:
    """Whether a launcher that may still be writing a folder lives; the announcements of dead ones are removed."""
    alive = False
    for path in base.glob(f"{LAUNCHING_PREFIX}*"):
        if launcher_gone(path) is False:
            alive = True
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return alive


def clear_interrupted_launches() -> list[str]:
    """Tidy what launches killed half way left behind (nothing of them could undo it): a staging folder whose launcher
    is gone goes, with the empty name it reserved; a published run whose launcher died before its supervisor started
    is recorded as failed (its job never ran). A folder whose launcher may be alive, or whose marker a live process
    carries, is never touched. Returns one line per run recorded."""
    base = paths.runs_dir()
    try:
        entries = [entry for entry in os.scandir(base) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    live = set(marked_pids().values())
    under_way = launches_under_way(base)
    names = {entry.name for entry in entries}
    resolved = Path(marker_value(base))  # once: resolving each of 5,000 folders cost `runs` 0.3-0.4 s
    told: list[str] = []
    for entry in entries:
        if str(resolved / entry.name) in live:  # what marker_value(folder) gives for a folder that is no link
            continue
        try:
            told += clear_folder(base, entry.name, names, live, under_way)
        except OSError:
            continue  # a folder this user cannot read is listed as such by `runs`, not tidied
    return told


def clear_folder(base: Path, name: str, names: set[str], live: set[str], under_way: bool) -> list[str]:
    """clear_interrupted_launches for one entry of the runs folder."""
    folder = base / name
    if name.startswith(".") and name.endswith(STAGING_SUFFIX):
        gone = launcher_gone(folder / LAUNCHER)
        if gone or (gone is None and not under_way):
            shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                (base / name[1 : -len(STAGING_SUFFIX)]).rmdir()  # the name it reserved, while still empty
    elif not name.startswith(".") and f".{name}{STAGING_SUFFIX}" not in names:
        if empty(folder):
            if not under_way:  # a name reserved by a launcher killed before it made its staging folder
                with contextlib.suppress(OSError):
                    folder.rmdir()
        elif (line := fail_unstarted(RunDir(folder))) is not None:
            return [line]
    return []


def fail_unstarted(run: RunDir) -> str | None:
    """A published run still waiting for the supervisor its dead launcher never started: failed, not 'starting'."""
    if not (run.path / LAUNCHER).exists():
        return None
    try:
        status = run.status()
    except RecordError:
        return None
    if status.state != RunState.STARTING or status.supervisor is not None or not launcher_gone(run.path / LAUNCHER):
        return None
    if status.slurm_job_id:
        from gpuwizard.runner.slurm import cancel

        cancel(status.slurm_job_id)  # submitted, and nobody would follow it
    why = "the process that launched it ended before the run's supervisor started; the job never ran"
    with contextlib.suppress(OSError, RecordError):
        run.update_status(state=RunState.FAILED, exit_code=int(ExitCode.NOT_STARTED), ended=time.time(), error=why)
        return f"run {run.run_id}: {why}; recorded as failed"
    return None


def empty(folder: Path) -> bool:
    try:
        return not any(folder.iterdir())
    except OSError:
        return False


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
        from gpuwizard.runner.flight import DUMP_DIR, flight_recorder_env

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
        from gpuwizard.runner.slurm import batch_script

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
