"""The preflight's host rules: /dev/shm, memory, disk and open files against what the job's loader and checkpoints
will take, the tracker the command turns on, the rendezvous port and the all-reduce between each pair of GPUs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpuwizard.core.errors import Problem, problem, warning
from gpuwizard.core.network import port_taken
from gpuwizard.model.catalog import load_catalog, openpi_config
from gpuwizard.model.trainer_options import LeRobotOptions, OpenpiOptions
from gpuwizard.trainers.check.doctor_facts import flag_value

if TYPE_CHECKING:
    from gpuwizard.model.job import BuildContext
    from gpuwizard.trainers.check.doctor_facts import DoctorAnswer, HostFacts, TrainerFacts

DTYPE_BYTES = {"float32": 4, "float64": 8, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}
"""Bytes per element of a dataset feature once it is a tensor; images and videos become float32 (LeRobot's reader)."""
CHECKPOINT_BYTES_PER_PARAM = 12
"""A LeRobot checkpoint: the fp32 weights (model.safetensors) and AdamW's two fp32 moments (optimizer_state)."""


def size(nbytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} bytes"


def sample_bytes(trainer: TrainerFacts) -> int:
    """One sample's tensors: every feature of the dataset at its shape (images and videos as float32), one frame each
    (a policy that stacks several frames or an action chunk needs more: this is the least)."""
    features = trainer.dataset.features if trainer.dataset else {}
    total = 0
    for feature in features.values():
        per = 4 if feature.dtype in ("video", "image") else DTYPE_BYTES.get(feature.dtype, 0)
        total += per * math.prod(feature.shape or [1])
    return total


def lerobot_options(ctx: BuildContext) -> LeRobotOptions:
    """A LeRobot preset's options (another trainer's read as LeRobot's defaults: none of its values apply)."""
    opts = ctx.preset.options
    return opts if isinstance(opts, LeRobotOptions) else LeRobotOptions()


def loaded_params(ctx: BuildContext) -> float:
    """The parameters each process loads: the policy's, unless the openpi config trains another model (its debug
    configs' 'dummy' Gemma, whose size the catalog does not know: 0, no memory rule)."""
    opts = ctx.preset.options
    if isinstance(opts, OpenpiOptions) and opts.config_name:
        facts = openpi_config(load_catalog(), opts.config_name)
        if facts is not None and facts.variant == "dummy":
            return 0.0
    return (ctx.policy.params_m or 0) * 1e6


def loader_settings(ctx: BuildContext, trainer: TrainerFacts) -> tuple[int, int]:
    """lerobot-train's DataLoader workers and prefetch factor: launch.extra_args' (given after gpuwizard's flags, so
    they win), else trainer_options', else the trainer's own defaults."""
    args, opts = ctx.preset.launch.extra_args, lerobot_options(ctx)
    workers = flag_value(args, "--num_workers") or opts.num_workers
    if workers is None:
        workers = trainer.defaults.get("num_workers") or 0
    prefetch = flag_value(args, "--prefetch_factor") or trainer.defaults.get("prefetch_factor") or 2
    return int(workers), int(prefetch)


def resource_findings(ctx: BuildContext, trainer: TrainerFacts, host: HostFacts) -> list[Problem]:
    """/dev/shm against the DataLoader's batches in flight, memory against the weights each process loads, the disk
    against the checkpoints the run keeps, the open-file limit against the tensors passed between processes."""
    found: list[Problem] = []
    plan, procs = ctx.plan, ctx.plan.processes_per_node
    workers, prefetch = loader_settings(ctx, trainer)
    batch = plan.per_device_batch or 1
    sample = sample_bytes(trainer)
    if host.shm and workers and sample:
        need = procs * workers * prefetch * batch * sample
        if need > host.shm.free:
            fit = int(host.shm.free // (procs * prefetch * batch * sample))
            found.append(
                problem(
                    "trainer_options.num_workers",
                    f"{host.shm.path} has {size(host.shm.free)} free, and {procs} process(es) x {workers} DataLoader "
                    f"workers x prefetch {prefetch} x batch {batch} x {size(sample)} a sample need at least "
                    f"{size(need)}: the workers die with a bus error ('DataLoader worker ... is killed by signal: Bus "
                    "error')",
                    f"give the container more shared memory (`docker run --shm-size={math.ceil(need * 2 / 1e9)}g ...`) "
                    f"or set trainer_options.num_workers: {fit}",
                    value=workers,
                )
            )
    params = loaded_params(ctx)
    usable = host.memory.usable
    if params and usable is not None and procs * params * 4 > usable:
        found.append(
            problem(
                None,
                f"{procs} process(es) each load {ctx.policy.title}'s {size(params * 4)} of fp32 weights into host "
                f"memory first, {size(procs * params * 4)} in all, and {size(usable)} is available: the kernel's "
                "OOM killer ends the job",
                "free memory, or run fewer processes on this machine (hardware.gpus)",
            )
        )
    if ctx.preset.trainer == "lerobot" and params and host.disk:
        given = flag_value(ctx.preset.launch.extra_args, "--save_freq") or lerobot_options(ctx).save_freq
        save_freq = int(given or trainer.defaults.get("save_freq") or 0)
        steps = plan.trainer_steps
        saves = steps // save_freq + (1 if steps % save_freq else 0) if save_freq > 0 else 1
        kept = saves * params * CHECKPOINT_BYTES_PER_PARAM
        if kept > host.disk.free:
            found.append(
                problem(
                    "output_dir",
                    f"lerobot-train keeps every checkpoint (every {save_freq:,} steps and the last: {saves} of about "
                    f"{size(params * CHECKPOINT_BYTES_PER_PARAM)}, {size(kept)}) and {host.disk.path} has "
                    f"{size(host.disk.free)} free: the run fails when the disk fills",
                    "free space there, choose an output_dir on a larger disk, or save less often "
                    "(trainer_options.save_freq)",
                    value=ctx.output_dir,
                )
            )
    if host.nofile and workers:
        soft, hard = host.nofile
        tensors = len(trainer.dataset.features) if trainer.dataset else 1
        descriptors = workers * prefetch * tensors + 256
        if soft < descriptors:
            raise_to = "unlimited" if hard < 0 else str(hard)
            found.append(
                warning(
                    None,
                    f"the open-file limit is {soft}, and {workers} workers x prefetch {prefetch} x {tensors} tensors "
                    f"a batch in flight hold about {descriptors} descriptors in each process: past the limit the "
                    "DataLoader fails with 'Too many open files' or 'received 0 items of ancdata'",
                    f"raise it before starting gpuwizard: `ulimit -n {raise_to}`",
                )
            )
    return found


def service_findings(ctx: BuildContext, trainer: TrainerFacts, host: HostFacts, python: str) -> list[Problem]:
    """The tracker the command turns on, installed and logged in."""
    if not (ctx.preset.trainer == "lerobot" and lerobot_options(ctx).wandb):
        return []
    if not trainer.trackers.get("wandb"):
        return [
            problem(
                "trainer_options.wandb",
                "is on and wandb is not installed in the training environment: lerobot-train fails at its start "
                "(WandBLogger imports it)",
                f"`{python} -m pip install wandb`, or set trainer_options.wandb: false",
                value=True,
            )
        ]
    if host.wandb_login or (host.wandb_mode or "").lower() in ("offline", "disabled", "dryrun"):
        return []
    return [
        problem(
            "trainer_options.wandb",
            "is on and no wandb login is found (no WANDB_API_KEY, no api.wandb.ai entry in ~/.netrc): wandb.init asks "
            "for a key, and with no terminal the run fails at its start",
            "`wandb login` on this machine, or WANDB_MODE=offline in launch.env, or trainer_options.wandb: false",
            value=True,
        )
    ]


def distributed_findings(ctx: BuildContext, answer: DoctorAnswer) -> list[Problem]:
    found: list[Problem] = []
    host = answer.host
    for port, free in (host.ports if host else {}).items():
        if not free:
            found.append(port_taken(ctx.preset.hardware.rdzv_endpoint or "", int(port)))
    for pair in answer.pairs.results if answer.pairs else []:
        a, b = pair.devices
        if pair.ok:
            continue
        if pair.hung and pair.ok_without_p2p:
            found.append(
                problem(
                    "launch.env",
                    f"an all-reduce between GPU {a} and GPU {b} hangs with peer-to-peer transfers and finishes with "
                    "NCCL_P2P_DISABLE=1: the run would hang at its first gradient sync",
                    "add NCCL_P2P_DISABLE: '1' to launch.env",
                )
            )
        else:
            what = "hangs, with peer-to-peer on and off" if pair.hung else f"fails ({pair.error})"
            found.append(
                problem(
                    None,
                    f"an all-reduce between GPU {a} and GPU {b} {what}: the run cannot synchronise its gradients",
                    "run it again with NCCL_DEBUG=INFO in launch.env and read NCCL's reason; `nvidia-smi topo -m` "
                    "shows how the two are linked",
                )
            )
    return found
