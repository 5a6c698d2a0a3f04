"""The preflight's rules: the training interpreter's facts (doctor_facts.py), the plan and NVML, turned into findings,
each one paragraph: what was found, what it does to the run, the fix. An error fails the run (the launch refuses it),
a warning slows it, a note is said beside them. Here torch, the dataset and its decoder; doctor_host.py the host."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuwizard.core.errors import Problem, note, problem, warning
from gpuwizard.trainers.check.doctor_host import (
    distributed_findings,
    loader_settings,
    resource_findings,
    service_findings,
)

if TYPE_CHECKING:
    from gpuwizard.gpus.inventory import Inventory
    from gpuwizard.model.job import BuildContext
    from gpuwizard.trainers.check.doctor_facts import DoctorAnswer, HostFacts, TorchFacts, TrainerFacts

DRIVER_MINIMUM = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}
"""The oldest Linux driver each CUDA major release runs on (NVIDIA, CUDA Compatibility, "Minor Version
Compatibility", table 1, and the CUDA Toolkit release notes' table 3 for the exact GA driver of x.0: 11.x >= 450.80.02,
12.x >= 525.60.13, 13.x >= 580.65.06). Below it the CUDA runtime a torch wheel carries does not initialise."""
WHEELS = "https://download.pytorch.org/whl"


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in (text or "").split("."))
    except ValueError:
        return None


def shown(numbers: tuple[int, ...]) -> str:
    return f"{numbers[0]}.{numbers[1]:02d}.{numbers[2]:02d}"


def wheel_command(python: str, torch_version: str | None, cuda: str) -> str:
    """The pip line that installs the same torch release built for CUDA `cuda` ("12.8": cu128)."""
    base = (torch_version or "").split("+")[0]
    pinned = f"torch=={base}" if base else "torch"
    return f"`{python} -m pip install --force-reinstall {pinned} --index-url {WHEELS}/cu{cuda.replace('.', '')}`"


def driver_allows(driver: tuple[int, ...] | None, cuda: str) -> bool:
    major = version_tuple(cuda)
    minimum = DRIVER_MINIMUM.get(major[0]) if major else None
    return driver is None or minimum is None or driver >= minimum


def torch_findings(facts: TorchFacts, inventory: Inventory, python: str) -> list[Problem]:
    """A GPU job's torch: a CPU wheel, a CUDA build the driver cannot run, a build without this GPU's kernels, and
    CUDA unreachable from the training interpreter though NVML sees the GPUs."""
    visible = inventory.visible()
    if not visible:
        return []
    if facts.error:
        return [
            problem(
                "launch.python",
                f"torch cannot be imported in {python} ({facts.error})",
                f"`{python} -m pip install torch`",
            )
        ]
    driver = version_tuple(inventory.driver_version)
    fitting = [r for r in sorted({r for d in facts.devices for r in d.releases}) if driver_allows(driver, r)]
    fits_all = [r for r in fitting if all(r in d.releases for d in facts.devices)]
    best = fits_all[-1] if fits_all else None
    install = wheel_command(python, facts.version, best) if best else None
    if facts.cuda is None:
        return [
            problem(
                "launch.python",
                f"the training interpreter's torch {facts.version} is a CPU build, and this job runs on "
                f"{len(visible)} GPU(s): it fails when it first moves a tensor to CUDA",
                install or f"install a CUDA build of torch in {python} (https://pytorch.org/get-started/locally/)",
            )
        ]
    found = []
    minimum = DRIVER_MINIMUM.get((version_tuple(facts.cuda) or (0,))[0])
    if driver and minimum and driver < minimum:
        fix = f"upgrade the NVIDIA driver to {shown(minimum)} or newer"
        found.append(
            problem(
                None,
                f"torch {facts.version} is built for CUDA {facts.cuda}, which needs NVIDIA driver {shown(minimum)} or "
                f"newer; this machine's driver is {inventory.driver_version} (CUDA {inventory.cuda_version or '?'}): "
                "CUDA fails to initialise at the first tensor on a GPU",
                f"install the build for this driver, {install}, or {fix}" if install else fix,
            )
        )
    for gpu, fit in zip(visible, facts.devices, strict=False):
        if fit.runs:
            continue
        others = [r for r in fit.releases if driver_allows(driver, r)]
        fix = (
            wheel_command(python, facts.version, others[-1])
            if others
            else f"no build of torch {facts.version.split('+')[0] if facts.version else ''} has kernels for compute "
            f"capability {fit.capability}: install an older torch that does (https://pytorch.org/get-started/previous-versions/)"
        )
        found.append(
            problem(
                None,
                f"GPU {gpu.cuda_index} ({gpu.name}, compute capability {fit.capability}) has no kernels in torch "
                f"{facts.version}, built for {' '.join(facts.arch) or 'no GPU architecture'}: the first CUDA kernel "
                "fails with 'no kernel image is available for execution on the device'",
                fix,
            )
        )
    if not found and not facts.available:
        found.append(
            problem(
                None,
                f"torch.cuda.is_available() is false in the training interpreter while NVML sees {len(visible)} "
                "GPU(s): the job cannot use them",
                "check CUDA_VISIBLE_DEVICES in launch.env and your shell, and that the container was started with the "
                "GPUs (`docker run --gpus all`); `nvidia-smi` in the same shell must list them",
            )
        )
    return found


def needed_samples_per_s(ctx: BuildContext) -> float | None:
    """Samples per second one process will consume, from the plan's estimate for this GPU count."""
    plan = ctx.plan
    for row in plan.estimates:
        if row.gpus == plan.world_size and row.samples and row.wall_h:
            return row.samples / (row.wall_h * 3600) / plan.world_size
    return None


def video_findings(ctx: BuildContext, trainer: TrainerFacts, host: HostFacts | None) -> list[Problem]:
    video, dataset = trainer.video, trainer.dataset
    if video is None or dataset is None:
        return []
    found: list[Problem] = []
    repo, root = ctx.preset.dataset.repo_id or "REPO_ID", dataset.root
    for camera in video.cameras:
        for failure in camera.failures:
            found.append(
                problem(
                    "dataset.root",
                    f"episode {failure.episode} of {camera.key} ({failure.file}) cannot be decoded by {video.backend} "
                    f"({failure.error}): the run fails when it samples that episode",
                    "restore that file from where the dataset came from, or leave the episode out: "
                    f"`lerobot-edit-dataset --repo_id {repo} --root {root} --operation.type delete_episodes "
                    f"--operation.episode_indices '[{failure.episode}]'`",
                )
            )
    if video.backend == "torchcodec" and video.torchcodec_error:
        found.append(
            problem(
                "launch.extra_args",
                f"--dataset.video_backend=torchcodec, and torchcodec cannot load here ({video.torchcodec_error}): the "
                "run fails at its first video frame",
                "install FFmpeg's shared libraries (`apt install ffmpeg` or `conda install -c conda-forge ffmpeg`), or "
                "pass --dataset.video_backend=pyav",
            )
        )
    workers, _ = loader_settings(ctx, trainer)
    cpus = host.cpus if host else 1
    parallel = max(1, min(workers, cpus // max(1, ctx.plan.processes_per_node)))
    need = needed_samples_per_s(ctx)
    why = (
        f"torchcodec cannot load ({video.torchcodec_error}), so LeRobot decodes with pyav"
        if video.torchcodec_error and video.backend == "pyav"
        else f"LeRobot decodes with {video.backend}"
    )
    for camera in video.cameras:
        if camera.rate is None:
            continue
        rate = camera.rate * parallel
        if need is not None and rate < need:
            found.append(
                warning(
                    None,
                    f"{why}, which decoded {camera.rate:.0f} frames/s of {camera.key} here ({parallel} worker(s) per "
                    f"process: about {rate:.0f}) against the ~{need:.0f} each process needs: the GPUs will wait on "
                    "data",
                    "install FFmpeg's shared libraries so torchcodec loads (`apt install ffmpeg` or `conda install -c "
                    "conda-forge ffmpeg`)"
                    if video.torchcodec_error
                    else "raise trainer_options.num_workers, or store the videos at a lower resolution",
                )
            )
        elif video.torchcodec_error:
            found.append(note(f"{why}: {camera.rate:.0f} frames/s of {camera.key} per worker here"))
    return found


def dataset_findings(ctx: BuildContext, trainer: TrainerFacts, host: HostFacts | None, python: str) -> list[Problem]:
    """The dataset where the trainer will look for it, read by the trainer's own loader."""
    dataset, repo = trainer.dataset, ctx.preset.dataset.repo_id
    if dataset is None:
        return []
    if dataset.error:
        fix = "point the preset at a dataset in the layout this trainer reads"
        if "convert_dataset_v21_to_v30" in dataset.error:
            fix = f"`{python} -m lerobot.scripts.convert_dataset_v21_to_v30 --repo-id={repo}`"
        elif "modality.json" in dataset.error:
            fix = (
                f"write {dataset.root}/meta/modality.json, which maps the state and action arrays to their parts "
                "(the Isaac-GR00T README, 'Data Format'; for an SO-100 arm `cp examples/SO100/modality.json "
                f"{dataset.root}/meta/`, run in the checkout)"
            )
        elif "stats.json" in dataset.error:
            fix = "write meta/stats.json with GR00T's gr00t/data/stats.py, as its loader's message says"
        found = "" if trainer.version is None else f" {trainer.version}"
        return [
            problem(
                "dataset.root" if ctx.preset.dataset.root else "dataset.repo_id",
                f"{trainer.name}{found} cannot read the dataset at {dataset.root} ("
                + " ".join(dataset.error.split())
                + "): the run fails when it loads its data",
                fix,
            )
        ]
    if dataset.present or ctx.preset.dataset.root:  # a missing dataset.root is the plan's own error
        return []
    where = f"{trainer.home}/{repo}" if trainer.home else dataset.root
    if host and host.hub_offline:
        return [
            problem(
                "dataset.repo_id",
                f"{repo} is not at {where}, where {trainer.name} looks for it (HF_LEROBOT_HOME), and HF_HUB_OFFLINE is "
                "set: it cannot be downloaded, so the run fails at its start",
                f"download it first (`hf download {repo} --repo-type dataset --local-dir {where}`) or unset "
                "HF_HUB_OFFLINE",
            )
        ]
    token = "" if host is None or host.hub_token else " (a private one needs a token: `hf auth login`)"
    return [note(f"{repo} is not at {where}: {trainer.name} downloads it from the Hub at the start{token}")]


def groot_openpi_findings(ctx: BuildContext, trainer: TrainerFacts) -> list[Problem]:
    """What launch_finetune.py (its embodiment tag, its loader's imports) and openpi's data loader (its norm stats)
    refuse before training."""
    found: list[Problem] = []
    if trainer.embodiment_error:
        found.append(
            problem(
                "trainer_options.embodiment_tag",
                f"GR00T's EmbodimentTag.resolve refuses it ({trainer.embodiment_error}): launch_finetune.py fails at "
                "its start",
                "use one this checkout knows: " + ", ".join(trainer.embodiments),
            )
        )
    if trainer.loader_error:
        found.append(
            problem(
                "launch.python",
                f"GR00T's dataset loader (gr00t/data/dataset/lerobot_episode_loader.py) cannot be imported in the "
                f"training interpreter ({trainer.loader_error}): launch_finetune.py fails when it builds its dataset",
                f"install the checkout's dependencies into that interpreter (`uv sync` in {ctx.workdir})",
            )
        )
    stats = trainer.norm_stats
    if stats is not None and stats.error and not stats.fake:
        found.append(
            problem(
                "trainer_options.config_name",
                f"openpi's data loader needs the norm stats of {stats.config} ({stats.error}): the run fails before "
                "its first step ('Normalization stats not found')",
                f"`uv run scripts/compute_norm_stats.py --config-name={stats.config}` in {ctx.workdir}",
                value=stats.config,
            )
        )
    return found


def findings(answer: DoctorAnswer, ctx: BuildContext | None, inventory: Inventory, python: str) -> list[Problem]:
    """Every finding of one answer, blocking ones first."""
    found: list[Problem] = []
    gpu_job = ctx is None or ctx.plan.device == "cuda"
    if answer.torch is not None and gpu_job:
        found += torch_findings(answer.torch, inventory, python)
    trainer, host = answer.trainer, answer.host
    if ctx is not None and trainer is not None:
        if trainer.error:
            found.append(warning("launch.python", f"the trainer could not be asked: {trainer.error}"))
        found += dataset_findings(ctx, trainer, host, python) + video_findings(ctx, trainer, host)
        found += groot_openpi_findings(ctx, trainer)
        if host is not None:
            found += resource_findings(ctx, trainer, host) + service_findings(ctx, trainer, host, python)
    if ctx is not None:
        found += distributed_findings(ctx, answer)
    order = {"error": 0, "warning": 1, "note": 2}
    return sorted(found, key=lambda p: order.get(p.level, 3))
