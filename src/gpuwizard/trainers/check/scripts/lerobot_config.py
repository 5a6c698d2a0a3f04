"""What the installed LeRobot accepts, asked of its own classes, not of its version number: the policy types its
PreTrainedConfig choice registry holds once lerobot-train's third-party plugins are registered (lerobot/configs/
policies.py, lerobot/scripts/lerobot_train.py), and the dotted fields of its TrainPipelineConfig and of each policy's
config class (lerobot/configs/train.py): a flag draccus would refuse is one gpuwizard must not add.
"""

import dataclasses
import importlib.metadata
import importlib.util
import typing
from pathlib import Path
from typing import Any

import gwcheck


def dataclass_of(hint: Any) -> Any:
    """The dataclass a field holds, through Optional/Union (None for a plain value or a choice registry's base)."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return hint
    for arg in typing.get_args(hint):
        if dataclasses.is_dataclass(arg) and isinstance(arg, type):
            return arg
    return None


def dotted_fields(cls: type, prefix: str = "", depth: int = 0) -> list[str]:
    """Every field draccus parses as --a.b.c, nested dataclasses included (policies are listed apart)."""
    hints = typing.get_type_hints(cls)
    names = []
    for field in dataclasses.fields(cls):
        name = prefix + field.name
        names.append(name)
        nested = dataclass_of(hints.get(field.name))
        if nested is not None and depth < 4 and field.name != "policy":
            names += dotted_fields(nested, name + ".", depth + 1)
    return names


def parse(argv: list[str]) -> dict[str, Any]:
    if importlib.util.find_spec("lerobot") is None:
        raise gwcheck.NoEnvironment("lerobot is not installed in this interpreter")
    import lerobot
    import lerobot.scripts.lerobot_train as lerobot_train
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.configs.train import TrainPipelineConfig

    gwcheck.answering(f"lerobot-train {importlib.metadata.version('lerobot')}")
    lerobot_train.register_third_party_plugins()
    choices = PreTrainedConfig.get_known_choices()
    policy_fields, policy_lrs = {}, {}
    for name, cls in sorted(choices.items()):
        fields = {field.name: field for field in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
        policy_fields[name] = sorted(fields)
        lr = fields["optimizer_lr"].default if "optimizer_lr" in fields else None
        if isinstance(lr, float):  # the policy preset's lr (get_optimizer_preset reads optimizer_lr)
            policy_lrs[name] = lr
    values = {
        "policies": sorted(choices),
        "fields": sorted(dotted_fields(TrainPipelineConfig)),
        "policy_fields": policy_fields,
        "policy_lrs": policy_lrs,
    }
    root = Path(lerobot.__file__).parent
    return {"parser": gwcheck.ANSWERING["parser"], "values": values, "watch": [str(root), str(root / "configs")]}


if __name__ == "__main__":
    gwcheck.main(parse)
