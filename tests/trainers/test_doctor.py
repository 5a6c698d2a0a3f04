"""`gpuwizard doctor` against the real trainers: a tiny LeRobot dataset with videos written by LeRobot 0.6.1's own
writer and decoded by its own decoder (the backend its get_safe_default_video_backend picks in that environment, where
torchcodec cannot load), the same dataset with its video file cut short, /dev/shm and the output folder on small
tmpfs mounts, the real torch's own verdict on GPUs it has no kernels for (NVML replayed), an all-reduce between two
processes, a GR00T dataset without meta/modality.json read by Isaac-GR00T's own code, openpi's norm stats.
The rules over recorded answers: tests/unit/test_doctor_rules.py."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwizard.cli.doctor import cmd_doctor
from gpuwizard.gpus.inventory import read_inventory
from gpuwizard.model import trust
from gpuwizard.model.preset import parse_preset
from gpuwizard.planning.plan import build_command, plan_here
from gpuwizard.trainers.check import MARK, check_script
from gpuwizard.trainers.check.doctor import DoctorReport, doctor
from gpuwizard.trainers.check.doctor_facts import DoctorAnswer
from gpuwizard.trainers.registry import get_trainer
from support.data import DATA
from support.trainers import trainer_env
from support.video_dataset import write_video_dataset

VIDEO = "videos/observation.images.front/chunk-000/file-000.mp4"


@pytest.fixture(scope="module")
def lerobot_python() -> str:
    return trainer_env("GPUWIZARD_LEROBOT_PYTHON", "a LeRobot 0.6.1 interpreter (scripts/envs/lerobot-env.sh)")


@pytest.fixture(scope="module")
def video_dataset(lerobot_python, tmp_path_factory) -> Path:
    root = write_video_dataset(lerobot_python, tmp_path_factory.mktemp("video") / "so100_video")
    assert (root / VIDEO).is_file()
    return root


@pytest.fixture
def small_tmpfs(tmp_path) -> Iterator[Path]:
    """A 4 MB tmpfs, as a container's /dev/shm or a nearly full disk is (mounting needs root: skipped without)."""
    folder = tmp_path / "tmpfs"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def lerobot_job(python: str, dataset: Path, output: Path, gpus: int = 2, device: str = "cpu", **options):
    data = {
        "version": 1,
        "name": "doctor-real",
        "trainer": "lerobot",
        "policy": "act",
        "dataset": {"repo_id": "local/so100_video", "root": str(dataset)},
        "hardware": {"gpus": gpus, "device": device},
        "batch": {"size": 8},
        "optim": {"lr": 1e-5, "steps": 100},
        "mixed_precision": "no",
        "launch": {"python": python, "env": {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}},
        "trainer_options": {"num_workers": 2} | options,
        "output_dir": str(output),
    }
    preset = parse_preset(data, "test")
    trust.grant_for_session(preset)
    return preset


def preflight(preset, use_cache: bool = True) -> DoctorReport:
    """What `doctor PRESET` asks, in process: the plan on this machine's GPUs (or the replayed ones), the trainer's
    interpreter as its check runs it."""
    inventory = read_inventory()
    _, ctx = plan_here(preset, inventory)
    spec = build_command(ctx)
    query = get_trainer(preset.trainer).trainer_query(ctx, spec)
    return doctor(ctx, spec, query, inventory, ctx.python, use_cache)


def texts(result: DoctorReport, level: str = "block") -> list[str]:
    return [f.text for f in result.findings if f.level == level]


@pytest.mark.lerobot
def test_the_real_decoder_is_timed_on_the_datasets_own_video_and_a_repeat_is_remembered(
    lerobot_python, video_dataset, tmp_path, capsys
):
    preset = lerobot_job(lerobot_python, video_dataset, tmp_path / "out")
    first = preflight(preset)
    assert first.status == "ready" and not first.cached, first.findings
    video = DoctorAnswer.model_validate(first.facts).trainer.video
    # LeRobot 0.6.1's own choice in this environment: torchcodec is installed and cannot load its FFmpeg libraries
    assert (video.backend, video.torchcodec_installed) == ("pyav", True)
    assert "libavutil.so" in video.torchcodec_error and "not found" in video.torchcodec_error
    [camera] = video.cameras
    assert camera.key == "observation.images.front" and camera.checked == [VIDEO] and camera.failures == []
    assert camera.frames >= 5 and camera.rate and camera.rate > 1
    assert [n for n in first.notes if "LeRobot decodes with pyav" in n and "frames/s of observation.images" in n]
    again = preflight(preset)
    assert again.cached and again.facts["trainer"] == first.facts["trainer"]
    ns = argparse.Namespace(preset=None, json=False, fresh=False, trust=False, gpus=None)
    assert cmd_doctor(ns) == 0 and capsys.readouterr().out.startswith("this machine: ready\n")


@pytest.mark.lerobot
def test_a_video_cut_short_blocks_naming_its_episode_and_file(lerobot_python, video_dataset, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(video_dataset, broken)
    video = broken / VIDEO
    os.truncate(video, video.stat().st_size * 6 // 10)  # the last of the three episodes is gone
    result = preflight(lerobot_job(lerobot_python, broken, tmp_path / "out"))
    assert result.status == "blocked"
    last = [t for t in texts(result) if t.startswith("dataset.root: episode 2 of observation.images.front")]
    assert last, result.findings
    assert f"({VIDEO}) cannot be decoded by pyav (FrameTimestampError: No frames could be decoded" in last[0]
    assert "--operation.type delete_episodes --operation.episode_indices '[2]'" in last[0]
    assert not any("episode 0 of" in t for t in texts(result))  # the first episode's frames are whole


@pytest.mark.lerobot
def test_a_small_shm_and_a_small_output_disk_block(lerobot_python, video_dataset, small_tmpfs, monkeypatch):
    shm, out = small_tmpfs / "shm", small_tmpfs / "out"
    shm.mkdir()
    monkeypatch.setenv("GPUWIZARD_SHM_PATH", str(shm))
    result = preflight(lerobot_job(lerobot_python, video_dataset, out, num_workers=2))
    blocking = texts(result)
    # 2 processes x 2 workers x prefetch 4 (lerobot-train's own default) x batch 8 x 36.9 KB a sample: 4.73 MB
    [shared] = [t for t in blocking if "DataLoader workers" in t]
    assert (
        f"{shm} has 4.19 MB free" in shared
        and "x prefetch 4 x batch 8 x 36.9 KB a sample need at least 4.73 MB" in shared
    )
    assert "trainer_options.num_workers: 1" in shared
    [disk] = [t for t in blocking if "lerobot-train keeps every checkpoint" in t]
    assert f"{small_tmpfs} has 4.19 MB free: the run fails when the disk fills" in disk


@pytest.mark.lerobot
def test_the_real_torch_names_the_gpus_it_has_no_kernels_for(lerobot_python, video_dataset, tmp_path, monkeypatch):
    recording = json.loads((DATA / "nvml" / "workstation_2x4090.json").read_text())
    for gpu in recording["devices"]:
        gpu |= {"name": "NVIDIA GeForce GTX 1080 Ti", "compute_capability": [6, 1]}
    replayed = tmp_path / "pascal.json"
    replayed.write_text(json.dumps(recording))
    monkeypatch.setenv("GPUWIZARD_NVML_REPLAY", str(replayed))
    result = preflight(lerobot_job(lerobot_python, video_dataset, tmp_path / "out", device="cuda"))
    blocking = texts(result)
    # torch 2.11.0+cu130: CUDA 13.0 needs driver 580.65.06 (the recording's is 550.120), and its table
    # (torch/cuda/__init__.py PYTORCH_RELEASES_CODE_CC) gives sm_6x kernels only to the 12.6 build
    assert any("is built for CUDA 13.0, which needs NVIDIA driver 580.65.06 or newer" in t for t in blocking)
    pascal = [t for t in blocking if "compute capability 6.1) has no kernels in torch 2.11.0+cu130" in t]
    assert len(pascal) == 2 and "--index-url https://download.pytorch.org/whl/cu126" in pascal[0]


@pytest.mark.lerobot
def test_an_all_reduce_between_two_processes_and_one_past_its_timeout(lerobot_python):
    """The pairs section as NCCL runs it on GPUs, here on gloo: both ranks sum; a pair past its time is ended and read
    as hung, then tried again with NCCL_P2P_DISABLE=1."""

    def pairs(timeout_s: float) -> list[dict]:
        request = {"sections": ["pairs"], "pairs": {"devices": [0, 1], "backend": "gloo", "timeout_s": timeout_s}}
        out = subprocess.run(
            [lerobot_python, check_script("doctor_env.py"), json.dumps(request)], capture_output=True, text=True
        )
        line = [row for row in out.stdout.splitlines() if row.startswith(MARK)][-1]
        return json.loads(line[len(MARK) :])["pairs"]["results"]

    [ok] = pairs(120)
    assert (ok["ok"], ok["hung"], ok["devices"]) == (True, False, [0, 1])
    [late] = pairs(0.2)  # a rank cannot even import torch in that time
    assert (late["ok"], late["hung"], late["ok_without_p2p"]) == (False, True, False)


@pytest.mark.groot
def test_a_groot_dataset_without_modality_json_blocks_through_groots_own_loader(tmp_path, monkeypatch):
    groot = Path(trainer_env("GPUWIZARD_GROOT_DIR", "an Isaac-GR00T checkout (Isaac-GR00T/) and its venv/"))
    dataset = tmp_path / "cube"
    (dataset / "meta").mkdir(parents=True)
    for name, text in {
        "info.json": '{"data_path": "data/{episode_chunk:03d}.parquet", "chunks_size": 1000, "fps": 30}',
        "episodes.jsonl": '{"episode_index": 0, "length": 4}\n',
        "tasks.jsonl": '{"task_index": 0, "task": "pick"}\n',
        "stats.json": "{}",
    }.items():
        (dataset / "meta" / name).write_text(text)
    monkeypatch.setenv("GPUWIZARD_NVML_REPLAY", str(DATA / "nvml" / "workstation_2x4090.json"))  # GR00T needs CUDA
    data = {
        "version": 1,
        "name": "groot-doctor",
        "trainer": "groot",
        "policy": "groot",
        "dataset": {"root": str(dataset)},
        "hardware": {"gpus": 1},
        "batch": {"size": 8},
        "optim": {"lr": 1e-4, "steps": 100},
        "launch": {"python": str(groot / "venv" / "bin" / "python"), "workdir": str(groot / "Isaac-GR00T")},
        "trainer_options": {"base_model_path": "nvidia/GR00T-N1.7-3B", "embodiment_tag": "so100_arm"},
        "output_dir": str(tmp_path / "out"),
    }
    preset = parse_preset(data, "test")
    trust.grant_for_session(preset)
    blocking = texts(preflight(preset))
    [missing] = [t for t in blocking if t.startswith("dataset.root: groot cannot read the dataset")]
    assert f"{dataset}/meta/modality.json" in missing and "cp examples/SO100/modality.json" in missing
    [tag] = [t for t in blocking if t.startswith("trainer_options.embodiment_tag")]
    assert "Unknown embodiment tag: 'so100_arm'" in tag and "new_embodiment" in tag
    # this environment's torch 2.13.0+cpu, whose table of builds is per host architecture (torch/cuda/__init__.py)
    [cpu] = [t for t in blocking if "is a CPU build" in t]
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cu129" in cpu  # the newest a 550 driver runs


@pytest.mark.openpi
def test_openpi_without_its_norm_stats_blocks_with_the_command_that_computes_them(tmp_path):
    root = Path(trainer_env("GPUWIZARD_OPENPI_DIR", "an openpi environment (scripts/envs/openpi-env.sh)"))
    data = {
        "version": 1,
        "name": "openpi-doctor",
        "trainer": "openpi",
        "policy": "pi05",
        "dataset": {"repo_id": "physical-intelligence/libero"},
        "hardware": {"gpus": 1, "device": "cpu"},
        "batch": {"size": 32},
        "optim": {"steps": 100},
        "scaling": {"rule": "none", "reference_gpus": 1},
        "launch": {
            "python": str(root / "venv" / "bin" / "python"),
            "workdir": str(root / "openpi"),
            "env": {"PYTHONPATH": f"src:packages/openpi-client/src:{root / 'stubs'}", "WANDB_MODE": "disabled"},
        },
        "trainer_options": {"config_name": "pi05_libero", "uv": False},
        "output_dir": str(tmp_path / "out"),
    }
    preset = parse_preset(data, "test")
    trust.grant_for_session(preset)
    [stats] = [t for t in texts(preflight(preset)) if "norm stats" in t]
    assert f"{root / 'openpi'}/assets/pi05_libero/physical-intelligence/libero/norm_stats.json" in stats
    assert f"`uv run scripts/compute_norm_stats.py --config-name=pi05_libero` in {root / 'openpi'}" in stats
