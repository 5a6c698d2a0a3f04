"""Isaac-GR00T's multi-dataset launcher, seen upstream and not in the pin: gr00t/experiment/launch_finetune_multi.py
(NVIDIA/Isaac-GR00T af5de1a; main 626af89 has none) parses a MultiFinetuneConfig whose --data_yaml, a YAML of
datasets with weights, replaces launch_finetune.py's --dataset-path and --embodiment-tag. gpuwizard builds
launch_finetune.py's command, so each form is refused in one paragraph before tyro refuses it minutes later."""

from __future__ import annotations

import os

from gpuwizard.core.errors import Problem, problem
from gpuwizard.model.job import BuildContext
from gpuwizard.model.trainer_options import GrootOptions

MULTI_SCRIPT = "launch_finetune_multi.py"
DATA_YAML = ("--data_yaml", "--data-yaml")
"""tyro takes a field's flag with either separator."""


def data_yaml_findings(ctx: BuildContext, fields: frozenset[str]) -> list[Problem]:
    """The multi-dataset launcher named as the script, or its --data_yaml given to a launch_finetune.py whose
    FinetuneConfig (`fields`, read from the checkout) has no such field."""
    script = GrootOptions.of(ctx.preset).script
    if os.path.basename(script) == MULTI_SCRIPT:
        return [
            problem(
                "trainer_options.script",
                "is GR00T's multi-dataset launcher (upstream after 626af89): it takes --data_yaml, a YAML of datasets "
                "and weights, in place of the --dataset-path and --embodiment-tag gpuwizard passes, so its parser "
                "would refuse the command; gpuwizard plans launch_finetune.py's single dataset only",
                "train one dataset with gr00t/experiment/launch_finetune.py (dataset.root, "
                "trainer_options.embodiment_tag), or start the multi-dataset launcher yourself",
                value=script,
            )
        ]
    given = [arg for arg in ctx.preset.launch.extra_args if arg.split("=", 1)[0] in DATA_YAML]
    if not given or "data_yaml" in fields:
        return []
    return [
        problem(
            "launch.extra_args",
            f"{given[0]} is the flag of GR00T's multi-dataset launcher, {MULTI_SCRIPT} (upstream after 626af89); "
            f"{script}'s FinetuneConfig has no data_yaml field, so tyro would refuse the command",
            "remove it and name the one dataset in dataset.root (several datasets need the multi-dataset launcher, "
            "which gpuwizard does not plan)",
            value=given[0],
        )
    ]
