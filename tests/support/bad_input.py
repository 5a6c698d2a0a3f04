"""Bad input to feed the commands: the head of a hand-written preset and YAML alias bombs, one per placement."""

from __future__ import annotations

HEAD = """\
version: 1
name: {name}
trainer: {trainer}
policy: act
dataset: {{repo_id: me/pick}}
"""


def tower(levels: int = 9, width: int = 9) -> str:
    """The classic alias bomb: each level lists the previous one `width` times, width**levels strings in all."""
    text = "&a0 [" + ", ".join(['"lol"'] * width) + "]"
    for level in range(1, levels):
        text = f"&a{level} [{text}, " + ", ".join([f"*a{level - 1}"] * (width - 1)) + "]"
    return text


BOMBS = {
    "hardware.gpus": HEAD.format(name="b", trainer="lerobot") + f"hardware:\n  gpus: {tower()}\n",
    "optim.lr": HEAD.format(name="b", trainer="lerobot") + f"optim:\n  lr: {tower()}\n",
    "name": HEAD.format(name=tower(), trainer="lerobot"),
    "launch.env": HEAD.format(name="b", trainer="lerobot") + f"launch:\n  env:\n    HF_HOME: {tower()}\n",
    "launch.extra_args": HEAD.format(name="b", trainer="lerobot") + f"launch:\n  extra_args: {tower()}\n",
    "trainer_options.script_args": HEAD.format(name="b", trainer="hf")
    + f"trainer_options:\n  script: train.py\n  script_args: {tower()}\n",
}
"""A preset with an alias bomb in each placement (bench/badinput.py times their refusal too)."""
