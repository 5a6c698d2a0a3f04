"""SLURM: the batch script `run --slurm` submits, the script of a sweep's job array, and sbatch, squeue, scontrol and
scancel behind small functions.

The engine stays torchrun's c10d rendezvous; SLURM only allocates the nodes. `srun` starts one torchrun agent per
node, and the head node's address comes from SLURM itself at run time (the job's first node, at its NodeAddr)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuwizard.core.errors import Problem, UserError, problem
from gpuwizard.core.safetext import control_characters
from gpuwizard.core.secrets import is_secret
from gpuwizard.model.job import BuildContext, LaunchSpec
from gpuwizard.runner.host.targets import NODE_SAMPLER
from gpuwizard.trainers.rendezvous import rendezvous_args

TIMEOUT_S = 30
CPUS_PER_GPU = 8
PENDING_REASONS = {
    "Resources": "the nodes it asks for are busy; it starts when they free up",
    "Priority": "jobs with a higher priority are ahead of it",
    "PartitionConfig": "the partition can never run it as asked (more nodes, GPUs or time than it has)",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionTimeLimit": "its time limit is above the partition's",
    "QOSMaxGRESPerUser": "your QOS caps the GPUs one user may hold",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "AssocGrpGRES": "your account's GPU allowance is used up",
    "Dependency": "it waits for another job",
    "JobHeldUser": "it is held: a sweep's array until every run of it is staged (or `scontrol hold` by someone)",
}


PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.,:=@%/+-]*")


def directive(option: str, value: str) -> str:
    """One #SBATCH line. sbatch splits it at spaces and reads # as a comment (it never expands $ or backticks):
    a value beyond plain characters is double-quoted; the preset's values are checked to fit (preset.Slurm)."""
    shown = value if PLAIN_VALUE.fullmatch(value) else f'"{value}"'
    return f"#SBATCH {option}={shown}"


def _word(arg: str, ours: set[str]) -> str:
    """Our own SLURM-variable arguments are expanded by the batch shell; everything else is quoted."""
    return f'"{arg}"' if arg in ours and "$" in arg else shlex.quote(arg)


def output_directive(path: Path) -> str:
    """The #SBATCH --output line of a file in gpuwizard's data folder; one paragraph for a path no such line carries."""
    if '"' in str(path) or control_characters(str(path)):
        raise UserError(
            problem(
                "GPUWIZARD_DATA_DIR",
                "the path of gpuwizard's data folder holds a quote or a control character, which an #SBATCH line "
                "cannot carry",
                "use a data folder whose path has neither",
                value=str(path),
            )
        )
    return directive("--output", str(path))


def resource_directives(ctx: BuildContext) -> list[str]:
    """The #SBATCH lines that ask for the job's allocation: nodes, tasks, GPUs, CPUs, time, partition, account."""
    preset, plan = ctx.preset, ctx.plan
    given = {arg.split("=", 1)[0] for arg in preset.slurm.sbatch_args}
    lines = [f"#SBATCH --nodes={preset.hardware.nodes}", "#SBATCH --ntasks-per-node=1"]
    if plan.device == "cuda":
        lines.append(f"#SBATCH --gpus-per-node={plan.processes_per_node}")
    if "--cpus-per-task" not in given:
        per = 1 if plan.device == "cpu" else CPUS_PER_GPU
        lines.append(f"#SBATCH --cpus-per-task={plan.processes_per_node * per}")
    for flag, value in (
        ("--time", preset.slurm.time),
        ("--partition", preset.slurm.partition),
        ("--account", preset.slurm.account),
    ):
        if value:
            lines.append(directive(flag, value))
    return lines


def option_directives(sbatch_args: list[str]) -> list[str]:
    """The preset's own sbatch options, one #SBATCH line each (after gpuwizard's, so the preset's win)."""
    return [directive(*arg.split("=", 1)) if "=" in arg else f"#SBATCH {arg}" for arg in sbatch_args]


def shape(ctx: BuildContext) -> tuple[str, ...]:
    """What the runs of one job array share: every #SBATCH line of the run's script but its name and output."""
    return (*resource_directives(ctx), *option_directives(ctx.preset.slurm.sbatch_args))


def array_script(name: str, lines: tuple[str, ...], arrays: Path, script: str) -> str:
    """The script of a job array of a sweep's runs that share `lines` (their shape): task T of array A runs the batch
    script (`script`) of the run that arrays/A/T links to, in its own allocation, and writes its output into that
    run's folder (log.txt) as a run submitted alone does."""
    task = '"$SLURM_ARRAY_JOB_ID"/"$SLURM_ARRAY_TASK_ID"'
    return "\n".join(
        [
            "#!/bin/bash",
            directive("--job-name", name),
            output_directive(arrays / "%A" / "%a" / "log.txt"),
            *lines,
            "",
            f"exec bash {shlex.quote(str(arrays))}/{task}/{shlex.quote(script)}",
            "",
        ]
    )


def batch_script(ctx: BuildContext, spec: LaunchSpec, run_dir: Path | None = None) -> str:
    """The sbatch script: #SBATCH lines, the preset's setup, the head node's address, the environment, then one
    torchrun agent per node through srun. With `run_dir` (gpuwizard submits) the output goes into the run folder
    and every node samples its GPUs there."""
    preset, plan = ctx.preset, ctx.plan
    slurm = preset.slurm
    lines = ["#!/bin/bash", directive("--job-name", preset.name), *resource_directives(ctx)]
    if run_dir is None:
        lines.append("#SBATCH --output=%x-%j.out")
        lines.append("# (gpuwizard run --slurm writes the output into the run folder instead)")
    else:
        lines.append(output_directive(run_dir / "log.txt"))
    lines += option_directives(slurm.sbatch_args)
    lines += ["", "set -e"]
    if slurm.setup:
        lines += ["# setup (from the preset)", *slurm.setup]
    lines += [
        "# the head node's address, as SLURM reaches it (its NodeAddr); the rendezvous store listens there",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "head_addr=$(scontrol show node \"$head\" -o | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')",
        "head_addr=${head_addr:-$head}",
    ]
    if spec.workdir:
        lines.append(f"cd {shlex.quote(spec.workdir)}")
    for name in spec.unset:
        lines.append(f"unset {shlex.quote(name)}")
    for name, value in spec.env.items():
        if is_secret(name):
            lines.append(f'export {name}="${{{name}:?set {name} in the environment you submit from}}"')
        else:
            lines.append(f"export {name}={shlex.quote(value)}")
    if plan.device == "cuda" and preset.hardware.nodes > 1:
        named = set(spec.env)
        lines += [
            "# NCCL across nodes: name the interface between the nodes if NCCL picks another one (names can differ",
            "# between nodes), and turn InfiniBand off where there is none (set them in the preset's launch.env)",
            *(f"# export {name}=..." for name in ("NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE") if name not in named),
        ]
    if run_dir is not None and plan.device == "cuda":
        sampler = [sys.executable, "-m", NODE_SAMPLER, str(run_dir)]
        lines += [
            "# GPU samples from every node into the run folder (read by the monitor where the nodes share it)",
            'srun --overlap --nodes="$SLURM_NNODES" --ntasks-per-node=1 ' + shlex.join(sampler) + " &",
            "sampler=$!",
            "trap 'kill $sampler 2>/dev/null' EXIT",
        ]
    ours = set(rendezvous_args(ctx))
    words = ["srun", "--kill-on-bad-exit=1", *(_word(arg, ours) for arg in spec.argv)]
    lines += ["", " \\\n  ".join(words), ""]
    return "\n".join(lines)


def slurm_conf() -> str:
    return os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"


def cluster_problems() -> list[Problem]:
    """sbatch is installed and a controller answers; otherwise what to install, or which SLURM_CONF was used."""
    if shutil.which("sbatch") is None:
        return [
            problem(
                "--slurm",
                "sbatch is not installed on this machine",
                "run from a login node of your cluster, or install the SLURM client tools (Debian: apt-get install "
                "slurm-client; many clusters: module load slurm)",
            )
        ]
    result = _run(["sinfo", "-h", "-o", "%P"])
    if result is None or result.returncode != 0:
        why = (result.stderr.strip().splitlines() or ["no answer"])[-1] if result is not None else "no answer"
        return [
            problem(
                "--slurm",
                f"no SLURM controller answers ({why}); the configuration used is {slurm_conf()}",
                "check SLURM_CONF and that slurmctld runs (`sinfo`); for the local test cluster: "
                "scripts/slurm-local.sh",
            )
        ]
    return []


def secret_problems(sbatch_args: list[str], secrets: list[str], environ: dict[str, str]) -> list[Problem]:
    """A secret reaches a SLURM job only in the environment sbatch exports from here (never through the run
    folder): an --export that leaves the submitting environment behind would lose it, so it is refused."""
    if not secrets:
        return []
    given = [
        (f"slurm.sbatch_args.{i}", a.split("=", 1)[1]) for i, a in enumerate(sbatch_args) if a.startswith("--export=")
    ]
    if "SBATCH_EXPORT" in environ:
        given.append(("SBATCH_EXPORT", environ["SBATCH_EXPORT"]))  # sbatch's environment variable beats #SBATCH
    if not given or given[-1][1].split(",")[0].upper() == "ALL":
        return []
    field, value = given[-1]
    names = ", ".join(secrets)
    return [
        problem(
            field,
            f"--export={value} keeps {names} from the job: gpuwizard hands a secret of launch.env (or --env) to sbatch "
            "in its environment only, never through the run folder, and the job then needs sbatch to export that "
            "environment",
            "use --export=ALL (add your own variables after it: --export=ALL,NAME=VALUE), or leave --export out",
            value=value,
        )
    ]


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env=env)
    except (OSError, subprocess.SubprocessError):
        return None


def submit(script: str, secrets: dict[str, str], options: tuple[str, ...] = ()) -> tuple[str | None, str]:
    """sbatch the script file (with sbatch `options` such as --array), the secrets in sbatch's environment (it
    exports them to the job; the script reads them from there): (job id, "") or (None, sbatch's own message)."""
    result = _run(["sbatch", "--parsable", *options, script], env={**os.environ, **secrets})
    if result is None:
        return None, "sbatch did not answer"
    if result.returncode != 0:
        lines = [line.removeprefix("sbatch: error: ") for line in result.stderr.strip().splitlines()]
        return None, "; ".join(lines) or f"sbatch exited with {result.returncode}"
    return result.stdout.strip().split(";")[0], ""


def refused(message: str, what: str, then: str) -> UserError:
    """sbatch's refusal of `what` in one paragraph (the partition named where sbatch blames it); `then`: what to do
    once the preset is fixed."""
    return UserError(
        problem(
            "slurm.partition" if "partition" in message.lower() else "--slurm",
            f"sbatch refused {what}: {message}",
            f"fix the slurm section of the preset (`sinfo` lists the partitions), then {then}",
        )
    )


@dataclass(frozen=True)
class JobState:
    state: str
    """SLURM's state: PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ..."""
    reason: str | None = None
    exit_code: int | None = None

    @property
    def queued(self) -> bool:
        return self.state in ("PENDING", "CONFIGURING", "REQUEUED", "SUSPENDED")

    @property
    def ended(self) -> bool:
        return self.state not in ("PENDING", "CONFIGURING", "REQUEUED", "SUSPENDED", "RUNNING", "COMPLETING")


def job_state(job_id: str) -> JobState | None:
    """squeue while the job is queued or running, then scontrol (kept MinJobAge after the end); None if unknown.
    An array task (A_T) cancelled while pending is dropped from its array's record: scontrol says it is not found."""
    queue = _run(["squeue", "-h", "-j", job_id, "-o", "%T|%r"])
    if queue is not None and queue.returncode == 0 and queue.stdout.strip():
        state, _, reason = queue.stdout.strip().splitlines()[0].partition("|")
        return JobState(state, reason if reason and reason != "None" else None)
    shown = _run(["scontrol", "show", "job", "-o", job_id])
    if "_" in job_id and shown is not None and shown.stdout.strip() == f"Job {job_id} not found":
        return JobState("CANCELLED")
    if shown is None or shown.returncode != 0 or not shown.stdout.strip():
        return None
    fields = dict(item.split("=", 1) for item in shown.stdout.split() if "=" in item)
    code, _, signal = fields.get("ExitCode", "0:0").partition(":")
    exit_code = int(code) if code.isdigit() else None
    if signal.isdigit() and int(signal):
        exit_code = 128 + int(signal)
    held = fields.get("Reason")
    return JobState(fields.get("JobState", "UNKNOWN"), held if held and held != "None" else None, exit_code)


def cancel(*job_ids: str) -> bool:
    """One scancel of every job named: a job, a whole array (A) or one of its tasks (A_T)."""
    result = _run(["scancel", *job_ids])
    return result is not None and result.returncode == 0


def release(job_id: str) -> bool:
    """A held job (or every held task of an array) may start."""
    result = _run(["scontrol", "release", job_id])
    return result is not None and result.returncode == 0


def pending_advice(reason: str | None) -> str:
    return PENDING_REASONS.get(reason or "", "see `scontrol show job` for the reason")
