"""SLURM for tests: a two-node LeRobot preset with every sbatch field set, and whether a cluster answers."""

from __future__ import annotations

import shutil
import subprocess

GPU_2NODE = """\
version: 1
name: act-2node
trainer: lerobot
policy: act
dataset: {repo_id: me/so100_pick}
hardware: {gpus: 4, nodes: 2}
batch: {size: 8}
optim: {lr: 1.0e-5, steps: 20000}
scaling: {rule: sqrt_lr, reference_gpus: 1}
launch:
  env: {HF_TOKEN: hf_secret_value_123, NCCL_DEBUG: WARN}
trainer_options: {api: main}
slurm:
  partition: gpu
  time: "04:00:00"
  account: robotics
  sbatch_args: ["--constraint=h100", "--qos=high"]
  setup: ["module load cuda/12.4", "source ~/venvs/lerobot/bin/activate"]
"""


def cluster_answers() -> bool:
    if shutil.which("sinfo") is None:
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=15).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def lerobot_preset(**changes) -> dict:
    """The two-node LeRobot preset GPU_2NODE on one node (argv without SLURM variables), as plain data."""
    import yaml

    data = yaml.safe_load(GPU_2NODE)
    data["hardware"] = {"gpus": 1, "device": "cpu"}
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[int(leaf) if isinstance(node, list) else leaf] = value
    return data
