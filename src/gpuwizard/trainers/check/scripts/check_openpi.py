"""openpi: its own tyro TrainConfig CLI on a command, or one named config's own values.

`check_openpi.py ENTRY WORLD ARG...` parses ARG... with `_config.cli()`, exactly as ENTRY (scripts/train.py or
scripts/train_pytorch.py, both `main(_config.cli())`-style at Physical-Intelligence/openpi 15a9616) does, for a run
over WORLD processes; `check_openpi.py --defaults CONFIG` reads `_config.get_config(CONFIG)` (what the plan builds
on). Both answer with the same keys.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gwcheck

if TYPE_CHECKING:
    from openpi.training.config import TrainConfig


def openpi_version(config_file: str) -> str:
    """The installed distribution's version, or the source checkout's pyproject.toml (an uninstalled src/ tree)."""
    try:
        from importlib.metadata import version

        return version("openpi")
    except Exception:  # not installed as a distribution: the checkout's own metadata
        pass
    try:
        import tomllib

        pyproject = Path(config_file).resolve().parents[3] / "pyproject.toml"
        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    except (OSError, ValueError, KeyError, IndexError):
        return "(version unknown)"


def text_or_none(value: object) -> str | None:
    """tyro.MISSING (a required field left unset) and None read as None."""
    return value if isinstance(value, str) else None


def values(cfg: TrainConfig, world: int | None, entry: str) -> tuple[dict[str, Any], list[str]]:
    """The TrainConfig fields the plan depends on (src/openpi/training/config.py TrainConfig)."""
    schedule, notes = cfg.lr_schedule, []
    found = {
        "global_batch": cfg.batch_size,
        "lr": schedule.peak_lr,
        "warmup_steps": schedule.warmup_steps,
        "decay_steps": getattr(schedule, "decay_steps", None),
        "decay_lr": getattr(schedule, "decay_lr", None),
        "steps": cfg.num_train_steps,
        "dataset": text_or_none(getattr(cfg.data, "repo_id", None)),
        "model": cfg.model.model_type.value,
        "weights": getattr(cfg.weight_loader, "params_path", None),
        "fsdp_devices": cfg.fsdp_devices,
        "resume": cfg.resume,
        "overwrite": cfg.overwrite,
    }
    if type(schedule).__name__ != "CosineDecaySchedule":
        notes.append(f"the lr schedule is {type(schedule).__name__}, not a cosine decay")
    if text_or_none(cfg.exp_name):
        found["checkpoint_dir"] = str(cfg.checkpoint_dir)  # resolved against the job's working directory
    if world is None:  # a config's own values: both weight paths and the kind of data it reads
        found |= {
            "pytorch_weights": cfg.pytorch_weight_path,
            "data": type(cfg.data).__name__,
            "log_interval": cfg.log_interval,  # train_pytorch.py logs the mean lr over this many steps
            "variant": getattr(cfg.model, "paligemma_variant", None),  # 'dummy' in the debug configs
        }
    elif entry.endswith("train_pytorch.py"):
        # scripts/train_pytorch.py: effective_batch_size = config.batch_size // world_size (the remainder is dropped);
        # it loads only <pytorch_weight_path>/model.safetensors, has no FSDP and builds a Pi0Config from any model
        found["per_device_batch"] = cfg.batch_size // world
        found["weights"] = cfg.pytorch_weight_path
        del found["fsdp_devices"]  # JAX only
        if type(cfg.model).__name__ != "Pi0Config":
            notes.append(f"train_pytorch.py converts {type(cfg.model).__name__} to a Pi0Config (it trains a pi0)")
    return found, notes


def parse(argv: list[str]) -> dict[str, Any]:
    try:
        import openpi.training.config as config
    except ImportError as exc:
        raise gwcheck.NoEnvironment(f"openpi cannot be imported here ({exc})") from None
    if argv[:1] == ["--defaults"]:
        cfg, entry, world = config.get_config(argv[1]), config.__file__, None
    else:
        entry, world, args = argv[0], int(argv[1]), argv[2:]
        if args and not args[0].startswith("-"):
            config.get_config(args[0])  # an unknown name: openpi's own "Config 'x' not found. Did you mean 'y'?"
        sys.argv = [entry, *args]  # tyro reads sys.argv, as the training script's own main() does
        cfg = config.cli()
    found, notes = values(cfg, world, entry)
    training = Path(config.__file__).parent
    return {
        "parser": f"openpi {openpi_version(config.__file__)} {entry}",
        "values": found,
        "notes": notes,
        "watch": [str(p) for p in (training / "config.py", training / "optimizer.py", *training.glob("misc/*.py"))],
    }


if __name__ == "__main__":
    gwcheck.main(parse)
