"""LeRobot's lerobot-train (0.6.1 and main) on a command, without the dataset or the weights: its own draccus
parsing (parser.wrap, after register_third_party_plugins, as lerobot_train.main runs it), cfg.validate(), on main
make_accelerator's parallelism resolution, the packages the policy's code requires, and the optimizer and scheduler
its presets build, so the lr of the parameter group lerobot-train logs (optimizer.param_groups[0] in
lerobot_train.update_policy, 0.6.1 and main at 7427f31) and the schedule's real warmup are known.
"""

import ast
import importlib.metadata
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import gwcheck

STAND_IN_PARAMS = {
    # ACTPolicy.get_optim_params puts model.backbone in a group of its own (act/modeling_act.py)
    "act": ("model.encoder.layers.0.linear1.weight", "model.backbone.conv1.weight"),
    # XVLAAdamWConfig.build groups by "vlm" / "soft_prompt" in the name (optim/optimizers.py); XVLAModel holds
    # self.vlm and self.transformer.soft_prompt_hub (xvla/modeling_xvla.py, xvla/soft_transformer.py)
    "xvla": (
        "model.vlm.language_model.decoder.weight",
        "model.transformer.soft_prompt_hub.weight",
        "model.transformer.blocks.0.weight",
    ),
    # DiffusionPolicy.get_optim_params returns self.diffusion.parameters() (diffusion/modeling_diffusion.py)
    "diffusion": ("diffusion.unet.weight",),
}
"""One parameter per parameter group the policy's get_optim_params and its optimizer form, named as in the real
model; a policy not listed trains one group (get_optim_params returns self.parameters())."""


def innermost(exc: BaseException) -> BaseException:
    while (nxt := exc.__cause__ or exc.__context__) is not None:
        exc = nxt
    return exc


def hub_unreachable(exc: BaseException) -> BaseException | None:
    """The error in `exc`'s chain saying a Hub file (a --policy.path config, a --config_path repo) could not be
    fetched: a fact about this machine's network, not about the command."""
    link: BaseException | None = exc
    while link is not None:
        name, module = type(link).__name__, type(link).__module__
        if name in ("LocalEntryNotFoundError", "OfflineModeIsEnabled") or (
            module.startswith(("httpx", "requests", "urllib3")) and "Connect" in name
        ):
            return link
        link = link.__cause__ or link.__context__
    return None


def read_config(lerobot_train: ModuleType, config_class: type) -> Any:
    """The TrainPipelineConfig lerobot-train's train() receives: its own @parser.wrap() around a function that only
    returns it (lerobot/configs/parser.py reads sys.argv itself)."""

    def capture(cfg: Any) -> Any:
        return cfg

    capture.__annotations__ = {"cfg": config_class}
    try:
        return lerobot_train.parser.wrap()(capture)()
    except SystemExit as exc:
        # a draccus DecodingError hides why a config class refused a value (PI0Config: "Invalid dtype: float16")
        reason = innermost(exc)
        if reason is not exc:
            sys.stderr.write(f"\n{type(reason).__name__}: {reason}\n")
        raise


def require_policy_packages(lerobot_train: ModuleType, cfg: Any) -> None:
    """Raise LeRobot's own ImportError ("'diffusers' is required ... pip install 'lerobot[diffusion]'") for a
    package the run needs and lacks: train()'s own require_package calls, and every literal require_package call in
    the policy's folder (lerobot/policies/<type>/), which its constructor and processors make once the dataset is
    loaded, minutes into a run."""
    require = lerobot_train.require_package
    require("accelerate", extra="training")
    if getattr(cfg, "peft", None) is not None:
        require("peft", extra="peft")
    ema = getattr(cfg, "ema", None)
    if ema is not None and ema.enable:
        require("diffusers", extra="diffusion")
    folder = Path(inspect.getfile(type(cfg.policy))).parent  # the file of the policy class's module
    for source in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "require_package"):
                continue
            try:
                args = [ast.literal_eval(arg) for arg in node.args]
                kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
            except ValueError:
                continue
            require(*args, **kwargs)


def resolve_parallelism(cfg: Any) -> dict[str, Any]:
    """main's make_accelerator (lerobot/distributed/factory.py) up to building the Accelerator, which would start the
    process group: the env-var guard, ParallelismConfig.resolve against WORLD_SIZE, the checkpoint-format check; then
    ParallelDims.from_config as train() calls it."""
    from lerobot.configs.parallelism import world_size_from_env
    from lerobot.distributed import factory
    from lerobot.distributed.parallel_dims import ParallelDims

    cfg.accelerator.build = lambda *args, **kwargs: None
    try:
        factory.make_accelerator(cfg)
    finally:
        del cfg.accelerator.build
    device = "cpu" if cfg.trainable_config.device == "cpu" else "cuda"
    dims = ParallelDims.from_config(cfg.parallelism, world_size_from_env(), device)
    return {
        "grad_accum": cfg.accelerator.gradient_accumulation.steps,
        "dp_workers": dims.dp_world_size,
        "dp_shard": dims.dp_shard,
        "mixed_precision": cfg.accelerator.mixed_precision,
    }


def stand_in_policy(cfg: Any) -> Any:
    """An instance of the policy's own class, never constructed, holding one small parameter per group
    (STAND_IN_PARAMS): its real get_optim_params runs on it without the dataset or the weights."""
    import torch
    from lerobot.policies.factory import get_policy_class

    policy_class = get_policy_class(cfg.policy.type)
    policy = policy_class.__new__(policy_class)
    torch.nn.Module.__init__(policy)
    policy.config = cfg.policy
    for name in STAND_IN_PARAMS.get(cfg.policy.type, ("model.weight",)):
        *parents, leaf = name.split(".")
        module = policy
        for part in parents:
            if part not in module._modules:
                module.add_module(part, torch.nn.Module())
            module = module._modules[part]
        module.register_parameter(leaf, torch.nn.Parameter(torch.zeros(1)))
    return policy


def schedule_numbers(scheduler: Any) -> dict[str, int]:
    """The numbers the schedule's own lr function closes over: LeRobot's cosine_decay_with_warmup keeps the warmup
    and decay it shrank to the run (actual_warmup_steps, actual_decay_steps in optim/schedulers.py), diffusers'
    cosine its num_warmup_steps, constant_with_warmup its warmup_steps."""
    function = scheduler.lr_lambdas[0]
    cells = zip(function.__code__.co_freevars, function.__closure__ or ())
    return {name: cell.cell_contents for name, cell in cells if isinstance(cell.cell_contents, int)}


def optimizer_values(cfg: Any, notes: list[str]) -> dict[str, Any]:
    """lerobot/optim/factory.py make_optimizer_and_scheduler on the stand-in: each group's peak lr (group 0 is the one
    lerobot-train logs) and the schedule."""
    from lerobot.optim.factory import make_optimizer_and_scheduler

    policy = stand_in_policy(cfg)
    if cfg.use_policy_training_preset:
        try:
            policy.get_optim_params()
        except (AttributeError, TypeError, ImportError) as exc:
            notes.append(f"{cfg.policy.type}'s get_optim_params needs the built model ({exc}): one group assumed")
            policy.get_optim_params = policy.parameters
    optimizer, scheduler = make_optimizer_and_scheduler(cfg, policy)
    if isinstance(optimizer, dict):
        notes.append(f"{len(optimizer)} optimizers ({', '.join(optimizer)}): the lr is the first one's")
        optimizer = next(iter(optimizer.values()))
    groups = [
        (group.get("name") or f"group {i}", group.get("initial_lr", group["lr"]))
        for i, group in enumerate(optimizer.param_groups)
    ]
    if len({lr for _, lr in groups}) > 1:
        shown = ", ".join(f"{name} at {lr:.3g}" for name, lr in groups)
        notes.append(f"parameter groups: {shown}; lerobot-train logs the first (optimizer.param_groups[0])")
    values = {"lr": groups[0][1], "warmup_steps": 0}
    if len(groups) > 1:
        values["group_lrs"] = [lr for _, lr in groups]
    if scheduler is not None:
        numbers = schedule_numbers(scheduler)
        names = ("actual_warmup_steps", "num_warmup_steps", "warmup_steps")
        found = [numbers[name] for name in names if name in numbers]
        values["warmup_steps"] = found[0] if found else getattr(cfg.scheduler, "num_warmup_steps", None) or 0
        if "actual_decay_steps" in numbers:
            values["decay_steps"] = numbers["actual_decay_steps"]
            values["decay_lr"] = cfg.scheduler.decay_lr
    return values


def epoch_samples(cfg: Any, notes: list[str]) -> int | None:
    """The samples of one epoch as lerobot-train's EpisodeAwareSampler draws them from a local dataset (its
    make-dataloader code, 0.6.1 and main at 7427f31: the policy's drop_n_last_frames cut from each episode's end,
    cfg.dataset.episodes kept); None for a streamed dataset or one that is not on this disk."""
    root = cfg.dataset.root
    if cfg.dataset.streaming or not root or not Path(root).is_dir():
        return None
    from lerobot.datasets import EpisodeAwareSampler, LeRobotDatasetMetadata

    meta = LeRobotDatasetMetadata(cfg.dataset.repo_id, root=root)
    policy = getattr(cfg, "trainable_config", None) or cfg.policy  # main trains cfg.trainable_config
    dropped = getattr(policy, "drop_n_last_frames", 0)
    sampler = EpisodeAwareSampler(
        meta.episodes["dataset_from_index"],
        meta.episodes["dataset_to_index"],
        episode_indices_to_use=cfg.dataset.episodes,
        drop_n_last_frames=dropped,
    )
    if dropped:
        froms, tos = meta.episodes["dataset_from_index"], meta.episodes["dataset_to_index"]
        chosen = cfg.dataset.episodes or range(len(froms))
        frames = sum(tos[i] - froms[i] for i in chosen)
        notes.append(
            f"an epoch is {len(sampler):,} samples of {frames:,} frames: lerobot-train's sampler leaves out the "
            f"last {dropped} frames of each of the {len(chosen)} episodes ({policy.type}'s drop_n_last_frames)"
        )
    return len(sampler)


def resumed_step(lerobot_train: ModuleType, cfg: Any) -> int:
    """The checkpoint's step, read as lerobot-train reads it (main: resume_before_prepare, with its topology guard;
    0.6.1: load_training_step)."""
    from lerobot.common import train_utils

    if hasattr(train_utils, "resume_before_prepare"):
        return int(train_utils.resume_before_prepare(cfg))
    from lerobot.utils.constants import TRAINING_STATE_DIR

    return int(train_utils.load_training_step(cfg.checkpoint_path / TRAINING_STATE_DIR))


def parse(argv: list[str]) -> dict[str, Any]:
    if importlib.util.find_spec("lerobot") is None:
        raise gwcheck.NoEnvironment("lerobot is not installed in this interpreter")
    import lerobot.scripts.lerobot_train as lerobot_train
    from lerobot.configs.train import TrainPipelineConfig

    parser = f"lerobot-train {importlib.metadata.version('lerobot')}"
    gwcheck.answering(parser)
    sys.argv = ["lerobot-train", *argv]
    lerobot_train.register_third_party_plugins()
    try:
        cfg = read_config(lerobot_train, TrainPipelineConfig)
        cfg.validate()
    except Exception as exc:
        if (offline := hub_unreachable(exc)) is None:
            raise
        cli = lerobot_train.parser
        source = cli.get_path_arg("policy") or cli.parse_arg("config_path") or "a Hub repository"
        raise gwcheck.Unavailable(
            f"{source} is on the Hugging Face Hub, unreachable from here ({type(offline).__name__})"
        ) from None
    if cfg.policy is None:
        raise ValueError("gpuwizard checks policy training only (this command trains a reward model)")
    notes: list[str] = []
    values = {
        "per_device_batch": cfg.batch_size,
        "steps": cfg.steps,
        "dataset": cfg.dataset.repo_id,
        "policy": cfg.policy.type,
        "resume": True if cfg.resume else None,
    }
    if hasattr(cfg, "parallelism"):
        values.update(resolve_parallelism(cfg))
    require_policy_packages(lerobot_train, cfg)
    values.update(optimizer_values(cfg, notes))
    if (samples := epoch_samples(cfg, notes)) is not None:
        values["epoch_samples"] = samples
    watch = [str(Path(cfg.output_dir).absolute())]
    if cfg.resume:
        notes.append(f"continues from step {resumed_step(lerobot_train, cfg):,} ({cfg.checkpoint_path})")
        watch.append(str(Path(cfg.checkpoint_path).absolute()))
    if cfg.policy.pretrained_path:
        watch.append(str(Path(cfg.policy.pretrained_path).absolute()))
    return {"parser": parser, "values": values, "notes": notes, "watch": watch}


if __name__ == "__main__":
    gwcheck.main(parse)
