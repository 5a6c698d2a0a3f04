"""The small interface every trainer module implements, and helpers they share."""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from gpuwizard.core.errors import Problem, problem
from gpuwizard.model.job import BatchLayout, BuildContext, LaunchSpec, TrainerQuery
from gpuwizard.model.preset import with_field
from gpuwizard.model.trainer_options import TrainerOptions
from gpuwizard.runs.records import LrSchedule

if TYPE_CHECKING:
    from gpuwizard.model.catalog import PolicyEntry
    from gpuwizard.model.preset import Preset
    from gpuwizard.trainers.logparse import LineInfo


class Trainer:
    """One trainer: its batch semantics, checks, command builder and log parser."""

    name: ClassVar[str]
    title: ClassVar[str]
    batch_flag: ClassVar[str]
    batch_meaning: ClassVar[str]
    Options: ClassVar[type[TrainerOptions]] = TrainerOptions
    uses_torchrun: ClassVar[bool] = True
    any_policy: ClassVar[bool] = False
    """True for a trainer that runs the user's own script: any policy, which then only sizes memory."""
    needs_cuda: ClassVar[bool] = False
    supports_fsdp: ClassVar[bool] = False
    batch_is_global: ClassVar[bool] = False
    writes_dataset: ClassVar[bool] = False
    progress_markers: ClassVar[tuple[str, ...]] = ("%|",)
    """Substrings every line `parse_line` understands contains: the monitor parses only those lines."""
    probe_steps: ClassVar[int] = 40
    """Optimizer updates in one `gpuwizard probe` configuration: the first quarter warms up, the rest is measured."""
    checkpoint_parts: ClassVar[tuple[tuple[str, ...], ...]] = ()
    """For trainers that keep `checkpoints/<step>/` folders and a `checkpoints/last` link (LeRobot, the demo): the
    files a complete step folder holds, each with its alternatives. They tell a finished write from one cut short."""
    continue_schedule: ClassVar[str | None] = None
    """What the lr schedule does when a finished run is resumed to more steps; None: this trainer (as gpuwizard
    resumes it) cannot continue a finished run."""

    @property
    def package(self) -> str:
        """The distribution whose version is recorded with each run (importlib.metadata name): the model layer holds
        it, on the trainer's options model, so that an environment is asked for it without importing the trainer."""
        return self.Options.package

    def world_size(self, preset: Preset) -> int:
        """Data-parallel devices the batch is spread over."""
        return preset.world_size

    def processes_per_node(self, preset: Preset) -> int:
        return preset.hardware.gpus if self.uses_torchrun else 1

    def batch_layout(self, size: int, grad_accum: int, world: int) -> BatchLayout:
        raise NotImplementedError

    def default_lr(self, preset: Preset, policy: PolicyEntry) -> float | None:
        """The lr this trainer's own recipe uses when optim.lr is null."""
        return policy.default_lr.get(self.name)

    def default_warmup_steps(self, preset: Preset, policy: PolicyEntry, steps: int, per_update: int) -> int | None:
        """The warmup this trainer applies on its own, in optimizer updates (None: it has none); `steps` are
        optimizer updates and `per_update` the trainer's own steps in one (see `trainer_steps_per_update`)."""
        return None

    def trainer_steps_per_update(self, preset: Preset, python: str) -> int:
        """How many of the trainer's own steps (its steps flag, log lines, schedule, checkpoint period) make one
        optimizer update: 1 unless the trainer counts micro-batches."""
        return 1

    def logged_lr(self, ctx: BuildContext) -> float:
        """The peak lr the trainer's log shows: that of the parameter group it logs (the lr check compares it)."""
        return ctx.plan.lr

    def default_python(self) -> str | None:
        """Interpreter when launch.python is null; None means the one on PATH."""
        return None

    def check(self, ctx: BuildContext) -> list[Problem]:
        """Problems found from the preset and plan alone (errors and warnings are told apart by the plan)."""
        return []

    def preflight(self, ctx: BuildContext) -> list[Problem]:
        """Problems that only block an actual launch (files that must exist in the training env)."""
        return []

    def managed_flags(self) -> tuple[str, ...]:
        """Flags gpuwizard sets itself; the same flag in launch.extra_args would silently change the plan."""
        return ()

    def build(self, ctx: BuildContext) -> LaunchSpec:
        raise NotImplementedError

    def lr_schedule(self, ctx: BuildContext) -> LrSchedule:
        """The lr the trainer's scheduler gives at each of its own steps, for the run-time lr check; here the
        planned lr after a linear warmup from 0 (a trainer with another schedule says so)."""
        plan = ctx.plan
        return LrSchedule(peak=plan.lr, warmup_steps=(plan.warmup_steps or 0) * plan.trainer_steps_per_update)

    def held_out(self, preset: Preset, python: str, dataset: dict[str, Any] | None) -> str | None:
        """How this trainer is given dataset.eval_split and logs the held-out loss, for the plan (`dataset`: its
        metadata where read; None: it is given none, and nothing is faked)."""
        return None

    def log_interval(self, ctx: BuildContext) -> int | None:
        """Steps between the trainer's loss lines where those lines do not name their step (None: they do)."""
        return None

    def trainer_query(self, ctx: BuildContext, spec: LaunchSpec) -> TrainerQuery | str:
        """How to ask the installed trainer's own parser about `spec` (trainercheck); a str says why it cannot be
        asked here, e.g. "no training environment here"."""
        return f"the {self.name} trainer has no parser check yet"

    def probe_variant(self, preset: Preset, steps: int) -> Preset:
        """The preset as a short, quiet measurement run of `steps` updates: checkpoints, eval, uploads and trackers
        off where the trainer has them (the probe sets the batch, the scratch output_dir and the GPU count)."""
        return with_field(preset, "optim.steps", steps)

    def last_checkpoint(self, ctx: BuildContext) -> Path | None:
        """The checkpoint a resumed run continues from (None: nothing to resume)."""
        return None

    def saved_checkpoint(self, output: Path) -> str | None:
        """The step folder `checkpoints/last` names, which changes once a checkpoint write is complete (None: no
        link, or a trainer without that layout)."""
        return step_checkpoints(output, self.checkpoint_parts).last if self.checkpoint_parts else None

    def unfinished_checkpoint(self, output: Path) -> str | None:
        """Why the newest step folder cannot be resumed from (a write cut short), naming its step and what is
        missing; None when it is complete and linked, or the trainer keeps no such layout."""
        if not self.checkpoint_parts:
            return None
        state = step_checkpoints(output, self.checkpoint_parts)
        if state.newest is None or (state.last == state.newest.name and not state.missing):
            return None
        lacks = (
            f"it has no {' and no '.join(state.missing)}"
            if state.missing
            else "its files are there but it was never linked as checkpoints/last"
        )
        link = f"checkpoints/last names {state.last}" if state.last else "there is no checkpoints/last"
        return (
            f"checkpoints/{state.newest.name} (step {int(state.newest.name)}) is incomplete: {lacks}, and {link} "
            "(the run was stopped while writing it)"
        )

    def parse_line(self, line: str) -> LineInfo | None:
        """Progress, lr or banner facts in one log line."""
        return None


def per_worker_layout(size: int, grad_accum: int, world: int) -> BatchLayout:
    """The batch flag is per process: more GPUs multiply the effective batch."""
    return BatchLayout(world, size, size * world * grad_accum)


def global_layout(size: int, grad_accum: int, world: int, flag: str) -> BatchLayout:
    """The batch flag is global: more GPUs divide it, so it must divide evenly."""
    if size % world:
        return BatchLayout(world, None, None, f"{flag} {size} is global and must divide evenly over {world} devices")
    return BatchLayout(world, size // world, size * grad_accum)


def resolve_python(preset: Preset, default: str | None = None) -> str:
    """launch.python, else the trainer's own default (Trainer.default_python), else the interpreter on PATH."""
    if preset.launch.python:
        return os.path.expanduser(preset.launch.python)
    import shutil

    return default or shutil.which("python3") or shutil.which("python") or "python3"


def check_python(preset: Preset) -> list[Problem]:
    if not preset.launch.python:
        return []
    path = Path(os.path.expanduser(preset.launch.python))
    if not path.is_file() or not os.access(path, os.X_OK):
        return [
            problem(
                "launch.python",
                "is not an executable file",
                f"give the path of the interpreter of the environment {preset.trainer} is installed in, e.g. "
                f"~/venvs/NAME/bin/python (`gpuwizard envs --trainer {preset.trainer}` lists those found here)",
                value=preset.launch.python,
            )
        ]
    return []


def interpreter_missing(python: str) -> str | None:
    """Why the training interpreter cannot be asked anything here (None: it exists)."""
    import shutil

    if (os.path.isfile(python) and os.access(python, os.X_OK)) or shutil.which(python):
        return None
    return f"no training environment here ({python} does not exist)"


def planned_values(ctx: BuildContext) -> dict[str, object]:
    """The values every trainer's parser reports, as the plan has them (a trainer check's shared `expected`)."""
    plan = ctx.plan
    return {
        "per_device_batch": plan.per_device_batch,
        "grad_accum": ctx.preset.batch.grad_accum,
        "lr": plan.lr,
        "steps": plan.trainer_steps,
        "warmup_steps": plan.warmup_steps or 0,
    }


def trainer_args(argv: list[str], entry: str) -> list[str]:
    """The arguments after the trainer's entry point in a full command (torchrun's own options dropped)."""
    return argv[argv.index(entry) + 1 :] if entry in argv else []


def sibling_tool(python: str, tool: str) -> str | None:
    """A console script installed next to the interpreter (same venv), without resolving symlinks."""
    candidate = Path(python).parent / tool
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return None


def torchrun_prefix(ctx: BuildContext, nproc: int, uv: bool = False) -> list[str]:
    """torchrun from the training env (or `uv run torchrun`).

    One node: gpuwizard's loopback backend (rendezvous.local_rendezvous_args, with what was measured), whose store
    binds a free port on 127.0.0.1 itself, so no other host reaches it and no other local process can take a port
    picked in advance and become the job's store. Several nodes: the c10d rendezvous at
    node 0's endpoint, which must be firewalled to the cluster (the plan says so).
    """
    hw = ctx.preset.hardware
    if uv:
        launcher = ["uv", "run", "torchrun"]
    else:
        torchrun = sibling_tool(ctx.python, "torchrun")
        launcher = [torchrun] if torchrun else [ctx.python, "-m", "torch.distributed.run"]
    if hw.nodes == 1:
        from gpuwizard.trainers.rendezvous import local_rendezvous_args

        rdzv = local_rendezvous_args(ctx)
    elif ctx.preset.launch.scheduler == "slurm":
        from gpuwizard.trainers.rendezvous import rendezvous_args

        return launcher + [f"--nproc-per-node={nproc}", *rendezvous_args(ctx), "--max-restarts=0"]
    else:
        rdzv = [
            "--rdzv-backend=c10d",
            f"--node-rank={hw.node_rank}",
            f"--rdzv-endpoint={hw.rdzv_endpoint}",
            f"--rdzv-id={ctx.preset.name}",
        ]
    return launcher + [f"--nnodes={hw.nodes}", f"--nproc-per-node={nproc}", *rdzv, "--max-restarts=0"]


def device_env(ctx: BuildContext) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for the chosen devices, hidden entirely on CPU runs; on one node the ranks' own sockets
    on loopback."""
    env = {"PYTHONUNBUFFERED": "1"}
    if ctx.plan.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif ctx.preset.hardware.devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in ctx.preset.hardware.devices)
    if ctx.preset.hardware.nodes == 1:
        env |= loopback_env(ctx.plan.device)
    return env


def loopback_env(device: str) -> dict[str, str]:
    """One node: gloo's and NCCL's sockets on the loopback interface. Without them gloo listens on the address the
    host name resolves to (usually the LAN's) and NCCL on the first non-loopback interface, reachable from the
    network; the store is on loopback through rendezvous.local_rendezvous_args."""
    return {"GLOO_SOCKET_IFNAME": "lo"} | ({"NCCL_SOCKET_IFNAME": "lo"} if device == "cuda" else {})


def conflicting_extra_args(preset: Preset, trainer: Trainer) -> list[Problem]:
    """Managed flags repeated in launch.extra_args (last one wins upstream, silently)."""
    found = []
    for arg in preset.launch.extra_args:
        flag = arg.split("=", 1)[0]
        if flag in trainer.managed_flags():
            if flag in ("--num-gpus", "--nproc-per-node", "--nproc_per_node"):
                message = (
                    f"sets {flag}, but gpuwizard runs {preset.hardware.gpus} processes per node "
                    "and sets the trainer's GPU count to match"
                )
            else:
                message = f"sets {flag}, which gpuwizard already sets from the preset; the later one would silently win"
            found.append(
                problem(
                    "launch.extra_args",
                    message,
                    f"remove {flag} from launch.extra_args and set the matching preset field",
                    value=arg,
                )
            )
    return found


def ceil_ratio(count: int, total: int) -> str:
    """The shortest decimal r for which ceil(total * r) == count: the ratio flag for a trainer that computes its
    warmup as HF TrainingArguments.get_warmup_steps does (math.ceil(max_steps * warmup_ratio)). count / total
    rounded to 6 digits is not always one: 501 of 10,001 steps gives 0.050095, and 502."""
    if count <= 0:
        return "0"
    middle = (count - 0.5) / total  # half a step from either edge of the interval that works
    for digits in range(1, 18):
        text = f"{middle:.{digits}g}"
        if math.ceil(total * float(text)) == count:
            return text
    return repr(middle)


def newest_step_dir(folder: Path, prefix: str = "") -> Path | None:
    """The sub-folder named prefix + the highest step number (checkpoint-1500, 000200), or None."""
    try:
        steps = [
            (int(child.name.removeprefix(prefix)), child)
            for child in folder.iterdir()
            if child.name.startswith(prefix) and child.name.removeprefix(prefix).isdigit() and child.is_dir()
        ]
    except OSError:
        return None
    return max(steps)[1] if steps else None


@dataclass
class StepCheckpoints:
    """The `checkpoints/` folder of a trainer that keeps one folder per step and a `last` link."""

    last: str | None
    """The step folder `last` points to, when the link exists."""
    newest: Path | None
    """The highest-numbered step folder."""
    missing: list[str]
    """The parts (first alternative's name) that the newest folder lacks."""


def step_checkpoints(output: Path, parts: tuple[tuple[str, ...], ...]) -> StepCheckpoints:
    folder = output / "checkpoints"
    link = folder / "last"
    try:
        last = Path(os.readlink(link)).name if link.is_symlink() and link.exists() else None
    except OSError:
        last = None
    newest = newest_step_dir(folder)
    missing = [alts[0] for alts in parts if newest is not None and not any((newest / a).exists() for a in alts)]
    return StepCheckpoints(last, newest, missing)


def current_python() -> str:
    return sys.executable


def workdir_for(preset: Preset) -> tuple[str, list[Problem]]:
    """The folder the job runs in (launch.workdir, else here), and why it cannot be used."""
    if not preset.launch.workdir:
        return os.getcwd(), []
    path = Path(os.path.expanduser(preset.launch.workdir))
    if not path.is_dir():
        return str(path), [
            problem(
                "launch.workdir",
                "is not an existing folder",
                f"give the folder the {preset.trainer} job runs in (the checkout of its training code), or remove "
                "launch.workdir to run in the current folder",
                value=preset.launch.workdir,
            )
        ]
    return str(path.resolve()), []
