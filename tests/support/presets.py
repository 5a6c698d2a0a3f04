"""Presets and settings written as a user would: demo jobs on CPU processes, in files or the user's config folder; a
shipped preset copied and changed, and someone else's preset whose interpreter leaves a mark."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

from gpuwizard.core import paths, yamlio
from support.data import REPO

DEMO = """\
version: 1
name: {name}
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: {gpus}, device: cpu}}
batch: {{size: 4}}
optim: {{lr: {lr}, steps: {steps}}}
mixed_precision: "no"
output_dir: {root}/out-{name}
trainer_options:
  log_every: 5
  save_every: 30
{options}
monitor: {{hang_timeout_s: {hang}}}
"""
"""The demo job of the supervisor tests, to fill in with str.format (name, gpus, steps, root, options, hang, lr)."""


def shipped_preset(tmp_path: Path, preset: str, **changes) -> Path:
    """A shipped preset as a user copies it, with some fields changed (`a__b` for a.b)."""
    data = yamlio.load_file(REPO / "presets" / f"{preset}.yaml")
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yamlio.dumps(data))
    return path


def user_preset(name: str, text: str) -> None:
    """A preset in the user's folder, written as a user would."""
    paths.user_presets_dir().mkdir(parents=True, exist_ok=True)
    (paths.user_presets_dir() / f"{name}.yaml").write_text(text)


def demo_preset(name: str, extra: str = "", hardware: str = "{gpus: 2, device: cpu}") -> None:
    user_preset(
        name,
        f"""\
version: 1
name: {name}
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach}}
hardware: {hardware}
mixed_precision: "no"
{extra}
""",
    )


def quick_demo(tmp_path, name: str, extra: str = "", steps: int = 60) -> None:
    paths.user_presets_dir().mkdir(parents=True, exist_ok=True)
    (paths.user_presets_dir() / f"{name}.yaml").write_text(f"""\
version: 1
name: {name}
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {tmp_path}/dataset}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 4}}
optim: {{lr: 1.0e-3, steps: {steps}}}
mixed_precision: "no"
output_dir: {tmp_path}/out-{name}
{extra}
""")


def write_settings(text: str) -> None:
    """The user's settings.yaml, written by hand."""
    paths.settings_file().parent.mkdir(parents=True, exist_ok=True)
    paths.settings_file().write_text(text)


SWEPT = """\
version: 1
name: swept
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 1, device: cpu}}
batch: {{size: 4}}
optim: {{lr: 1.0e-3, steps: {steps}}}
mixed_precision: "no"
trainer_options: {{log_every: 5, save_every: 10, step_time_s: {step_time}}}
monitor: {{hang_timeout_s: 120}}
"""


def swept_preset(root, steps: int, step_time: float) -> None:
    """The user preset `swept` the sweep tests run: a one-process demo job, its data under `root`."""
    user_preset("swept", SWEPT.format(root=root, steps=steps, step_time=step_time))


NOISE_PRESET = """\
version: 1
name: {name}
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: {gpus}, device: cpu}}
batch: {{size: {batch}, grad_accum: {accum}}}
optim: {{lr: 1.0e-3, steps: {steps}}}
mixed_precision: "no"
launch: {{workdir: {root}}}
output_dir: {root}/out-{name}
trainer_options: {{task: noise, noise_dim: {dim}, noise_sigma: {sigma!r}, noise_offset: {offset!r}, log_every: 500}}
monitor: {{gauge: true, hang_timeout_s: 300}}
"""
"""The demo's noise task (a known noise scale) under the gauge: a preset file's text, `.format` its fields."""


def their_preset(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A LeRobot preset from elsewhere whose interpreter is a script that leaves a mark when it runs."""
    marker = tmp_path / "ran"
    python = tmp_path / "theirs" / "python"
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\necho ran >> {marker}\nexec {sys.executable} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    train = python.parent / "lerobot-train"  # beside it, so the launch is not refused for a missing trainer first
    train.write_text("#!/bin/sh\nexit 1\n")
    train.chmod(train.stat().st_mode | stat.S_IXUSR)
    path = tmp_path / "their-act.yaml"
    path.write_text(
        "name: their-act\ntrainer: lerobot\npolicy: act\ndataset: {repo_id: lerobot/pusht}\n"
        f"hardware: {{gpus: 1, device: cpu}}\noptim: {{steps: 20}}\nlaunch: {{python: {python}}}\n"
    )
    return path, python, marker
