"""The preflight's rules (trainers/check/doctor_rules.py, doctor_host.py) over recorded NVML machines and answers as
doctor_env.py gives them: a GPU the torch build has no kernels for, a driver too old for the build's CUDA, a CPU wheel
in a GPU job, a video file that does not decode, a decoder slower than the run, a dataset the trainer cannot read,
/dev/shm, memory, disk and open files, wandb, the rendezvous port and a pair of GPUs that hangs. The real script in a
real trainer environment: tests/trainers/test_doctor.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from typing import Any

import pytest

from gpuwizard.gpus.inventory import Inventory, read_inventory
from gpuwizard.gpus.replay import ReplayNvml
from gpuwizard.model.job import Estimate
from gpuwizard.model.preset import parse_preset
from gpuwizard.planning.plan import plan_here
from gpuwizard.trainers.check import MARK, check_script
from gpuwizard.trainers.check.doctor import report
from gpuwizard.trainers.check.doctor_facts import DoctorAnswer
from gpuwizard.trainers.check.doctor_host import size
from gpuwizard.trainers.check.doctor_rules import findings
from support.data import DATA

GB = 10**9
ARCH_130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
"""torch 2.11.0+cu130's torch._C._cuda_getArchFlags(), read in the LeRobot 0.6.1 environment."""


def machine(recorded: str, **device: Any) -> Inventory:
    """A recorded machine, each device's recorded fields replaced by `device` (e.g. another compute capability)."""
    recording = json.loads((DATA / "nvml" / f"{recorded}.json").read_text())
    for gpu in recording.get("devices", []):
        gpu.update(device)
    return read_inventory(ReplayNvml(recording))


def job(inventory: Inventory, gpus: int = 2, device: str = "cuda", **fields: Any):
    """A LeRobot ACT job on `gpus` processes, planned against `inventory`; `fields` are top-level preset keys."""
    data = {
        "version": 1,
        "name": "doctor-job",
        "trainer": "lerobot",
        "policy": "act",
        "dataset": {"repo_id": "user/so100", "root": "/data/so100"},
        "hardware": {"gpus": gpus, "device": device},
        "batch": {"size": 8},
        "optim": {"lr": 1e-5, "steps": 1000},
        "mixed_precision": "no",
        "trainer_options": {"num_workers": 4},
        "output_dir": "/data/out",
    } | fields
    return plan_here(parse_preset(data, "test"), inventory)[1]


def torch_facts(cuda: str | None = "13.0", runs: bool = True, releases=("12.6", "12.8", "13.0"), **more: Any):
    return {
        "version": f"2.11.0+cu{cuda.replace('.', '')}" if cuda else "2.11.0+cpu",
        "cuda": cuda,
        "arch": ARCH_130 if cuda else [],
        "devices": [{"capability": "8.9", "runs": runs, "releases": list(releases)}] * 2,
        "available": True,
        "device_count": 2,
    } | more


def host_facts(**more: Any) -> dict:
    return {
        "shm": {"path": "/dev/shm", "total": 64 * GB, "free": 64 * GB},
        "memory": {"total": 256 * GB, "available": 200 * GB},
        "disk": {"path": "/data", "total": 2000 * GB, "free": 1000 * GB},
        "nofile": [65536, 65536],
        "cpus": 32,
    } | more


def lerobot_facts(**more: Any) -> dict:
    features = {
        "observation.images.front": {"dtype": "video", "shape": [480, 640, 3]},
        "observation.state": {"dtype": "float32", "shape": [6]},
        "action": {"dtype": "float32", "shape": [6]},
    }
    return {
        "name": "lerobot",
        "version": "0.6.1",
        "defaults": {"num_workers": 4, "prefetch_factor": 4, "save_freq": 20000},
        "home": "/root/.cache/huggingface/lerobot",
        "trackers": {"wandb": True},
        "dataset": {"root": "/data/so100", "present": True, "version": "v3.0", "features": features},
    } | more


def answer(**sections: Any) -> DoctorAnswer:
    return DoctorAnswer.model_validate({"status": "answered"} | sections)


def paragraphs(found) -> list[tuple[str, str]]:
    return [(str(p.level), p.paragraph()) for p in found]


def only(found, level: str = "error") -> str:
    """The one finding of `level` there is."""
    [text] = [text for lvl, text in paragraphs(found) if lvl == level]
    return text


def test_a_clean_gpu_job_is_ready_in_one_line():
    inventory = machine("workstation_2x4090", compute_capability=[8, 9])
    ctx = job(inventory)
    facts = answer(torch=torch_facts("12.4", releases=("12.6", "12.8")), host=host_facts(), trainer=lerobot_facts())
    found = findings(facts, ctx, inventory, "/venv/bin/python")
    assert paragraphs(found) == []
    done = report(facts, found, cached=True, seconds=0.1)
    assert (done.status, done.summary, done.blocks) == ("ready", "ready", False)


def test_a_cuda_13_build_on_a_550_driver_blocks_and_names_the_build_that_fits():
    inventory = machine("workstation_2x4090")  # driver 550.120, CUDA 12.4
    ctx = job(inventory)
    found = findings(answer(torch=torch_facts("13.0"), host=host_facts()), ctx, inventory, "/venv/bin/python")
    text = only(found)
    assert "built for CUDA 13.0, which needs NVIDIA driver 580.65.06 or newer" in text
    assert "driver is 550.120 (CUDA 12.4)" in text
    assert "/venv/bin/python -m pip install --force-reinstall torch==2.11.0 --index-url " in text
    assert text.endswith("whl/cu128`, or upgrade the NVIDIA driver to 580.65.06 or newer.")
    assert report(answer(), found, False, 1.0).blocks


def test_a_gpu_the_build_has_no_kernels_for_blocks_with_the_build_that_has_them():
    # a GTX 1080 Ti (6.1) on torch 2.11.0+cu130: torch's own table gives its cu126 build (tests/trainers/test_doctor.py)
    inventory = machine("workstation_2x4090", compute_capability=[6, 1], name="NVIDIA GeForce GTX 1080 Ti")
    facts = torch_facts("13.0", runs=False, releases=("12.6",))
    facts["devices"] = [{"capability": "6.1", "runs": False, "releases": ["12.6"]}] * 2
    driver, gpu0, gpu1 = paragraphs(findings(answer(torch=facts), job(inventory), inventory, "py"))
    assert "needs NVIDIA driver 580.65.06" in driver[1]  # the recording's driver is 550.120
    assert "GPU 0 (NVIDIA GeForce GTX 1080 Ti, compute capability 6.1) has no kernels in torch 2.11.0+cu130" in gpu0[1]
    assert "built for sm_75 sm_80 sm_86 sm_90 sm_100 sm_120" in gpu0[1]
    assert "no kernel image is available for execution on the device" in gpu0[1]
    assert "torch==2.11.0 --index-url https://download.pytorch.org/whl/cu126" in gpu0[1]
    assert gpu1[1].startswith("GPU 1 (NVIDIA GeForce GTX 1080 Ti")


def test_a_new_architecture_on_an_old_build_says_no_build_of_it_fits():
    inventory = machine("h100_nvswitch_4")
    facts = torch_facts(
        "11.3", version="1.12.1+cu113", arch=["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"]
    )
    facts["devices"] = [{"capability": "9.0", "runs": False, "releases": []}] * 4
    found = findings(answer(torch=facts), job(inventory, gpus=4), inventory, "py")
    assert len(found) == 4
    assert "compute capability 9.0) has no kernels in torch 1.12.1+cu113" in found[0].paragraph()
    assert "no build of torch 1.12.1 has kernels for compute capability 9.0" in found[0].paragraph()


def test_a_cpu_wheel_in_a_gpu_job_blocks():
    inventory = machine("workstation_2x4090")
    found = findings(answer(torch=torch_facts(None, runs=False)), job(inventory), inventory, "/venv/bin/python")
    text = only(found)
    assert "torch 2.11.0+cpu is a CPU build, and this job runs on 2 GPU(s)" in text
    assert "--index-url https://download.pytorch.org/whl/cu128" in text  # the newest build a 550 driver runs


def test_cuda_unreachable_from_the_training_interpreter_blocks():
    inventory = machine("workstation_2x4090")
    facts = torch_facts("12.8", releases=("12.8",), available=False, device_count=0)
    text = only(findings(answer(torch=facts), job(inventory), inventory, "py"))
    assert "torch.cuda.is_available() is false in the training interpreter while NVML sees 2 GPU(s)" in text


def test_torch_rules_stay_silent_without_gpus_or_for_a_cpu_job():
    bare = machine("no_driver")
    assert findings(answer(torch=torch_facts(None)), job(bare, device="cpu"), bare, "py") == []
    inventory = machine("workstation_2x4090")
    assert findings(answer(torch=torch_facts(None)), job(inventory, device="cpu"), inventory, "py") == []


def test_a_video_file_that_does_not_decode_names_its_episode_and_file():
    inventory = machine("no_driver")
    camera = {
        "key": "observation.images.front",
        "files": 1,
        "checked": ["videos/observation.images.front/chunk-000/file-000.mp4"],
        "failures": [
            {
                "episode": 2,
                "file": "videos/observation.images.front/chunk-000/file-000.mp4",
                "error": "AssertionError: x",
            }
        ],
        "frames": 50,
        "seconds": 0.5,
    }
    trainer = lerobot_facts(video={"backend": "pyav", "cameras": [camera]})
    text = only(findings(answer(trainer=trainer, host=host_facts()), job(inventory, device="cpu"), inventory, "py"))
    assert "episode 2 of observation.images.front (videos/observation.images.front/chunk-000/file-000.mp4)" in text
    assert "cannot be decoded by pyav (AssertionError: x): the run fails when it samples that episode" in text
    assert "--operation.type delete_episodes --operation.episode_indices '[2]'" in text


def test_a_decoder_slower_than_the_run_warns_with_the_ffmpeg_fix():
    inventory = machine("workstation_2x4090")
    ctx = job(inventory)
    one_hour = Estimate(2, 2 * 3600 * 1000, 1.0, 2.0, None, "measured: run r", "measured")
    ctx.plan.estimates = [one_hour]  # 1,000 samples/s per process
    camera = {"key": "observation.images.front", "files": 1, "frames": 180, "seconds": 1.0}
    video = {"backend": "pyav", "torchcodec_installed": True, "torchcodec_error": "libavutil.so.56 not found"}
    trainer = lerobot_facts(video=video | {"cameras": [camera]})
    facts = answer(torch=torch_facts("12.4", releases=("12.6",)), trainer=trainer, host=host_facts())
    text = only(findings(facts, ctx, inventory, "py"), "warning")
    assert "torchcodec cannot load (libavutil.so.56 not found), so LeRobot decodes with pyav" in text
    assert "which decoded 180 frames/s of observation.images.front here (4 worker(s) per process: about 720)" in text
    assert "against the ~1000 each process needs: the GPUs will wait on data" in text
    assert "`apt install ffmpeg`" in text
    camera["frames"] = 400  # 1,600 frames/s with 4 workers: fast enough, said as a note
    found = findings(
        answer(trainer=lerobot_facts(video=video | {"cameras": [camera]}), host=host_facts()), ctx, inventory, "py"
    )
    assert [level for level, _ in paragraphs(found)] == ["note"]


def test_torchcodec_asked_for_and_unloadable_blocks():
    inventory = machine("no_driver")
    video = {"requested": "torchcodec", "backend": "torchcodec", "torchcodec_error": "libavutil.so.58 not found"}
    ctx = job(inventory, device="cpu", launch={"extra_args": ["--dataset.video_backend=torchcodec"]})
    text = only(findings(answer(trainer=lerobot_facts(video=video), host=host_facts()), ctx, inventory, "py"))
    assert "torchcodec cannot load here (libavutil.so.58 not found): the run fails at its first video frame" in text


def test_a_v21_dataset_blocks_with_lerobots_own_conversion_command():
    inventory = machine("no_driver")
    error = "BackwardCompatibilityError: \nThe dataset you requested (user/so100) is in 2.1 format. ... "
    error += "python -m lerobot.scripts.convert_dataset_v21_to_v30 --repo-id=user/so100"
    dataset = {"root": "/data/so100", "present": True, "error": error}
    found = findings(
        answer(trainer=lerobot_facts(dataset=dataset)), job(inventory, device="cpu"), inventory, "/v/python"
    )
    text = only(found)
    assert text.startswith(
        "dataset.root: lerobot 0.6.1 cannot read the dataset at /data/so100 (BackwardCompatibilityError"
    )
    assert "Fix: `/v/python -m lerobot.scripts.convert_dataset_v21_to_v30 --repo-id=user/so100`." in text


def test_a_repo_id_not_in_hf_lerobot_home_blocks_offline_and_is_a_note_online():
    inventory = machine("no_driver")
    ctx = job(inventory, device="cpu", dataset={"repo_id": "user/so100"})
    missing = lerobot_facts(dataset={"root": "/root/.cache/huggingface/lerobot/user/so100", "present": False})
    text = only(findings(answer(trainer=missing, host=host_facts(hub_offline=True)), ctx, inventory, "py"))
    assert "user/so100 is not at /root/.cache/huggingface/lerobot/user/so100, where lerobot looks for it" in text
    assert "HF_HUB_OFFLINE is set" in text and "`hf download user/so100 --repo-type dataset --local-dir" in text
    online = findings(answer(trainer=missing, host=host_facts()), ctx, inventory, "py")
    assert [level for level, _ in paragraphs(online)] == ["note"]
    assert "a private one needs a token: `hf auth login`" in online[0].message


def test_shared_memory_too_small_for_the_loaders_batches_blocks():
    inventory = machine("workstation_2x4090")
    facts = answer(
        host=host_facts(shm={"path": "/dev/shm", "total": 64 * 2**20, "free": 64 * 2**20}), trainer=lerobot_facts()
    )
    text = only(findings(facts, job(inventory), inventory, "py"))
    # 2 processes x 4 workers x prefetch 4 x batch 8 x (480*640*3*4 + 48 + 48 bytes) = 943.7 MB
    assert "/dev/shm has 67.1 MB free, and 2 process(es) x 4 DataLoader workers x prefetch 4 x batch 8" in text
    assert "need at least 944 MB: the workers die with a bus error" in text
    assert "`docker run --shm-size=2g ...`" in text and "trainer_options.num_workers: 0" in text


def test_a_disk_too_small_for_every_checkpoint_lerobot_keeps_blocks():
    inventory = machine("no_driver")
    ctx = job(inventory, device="cpu", trainer_options={"save_freq": 100}, optim={"lr": 1e-5, "steps": 1000})
    facts = answer(host=host_facts(disk={"path": "/data", "total": GB, "free": 2 * GB}), trainer=lerobot_facts())
    text = only(findings(facts, ctx, inventory, "py"))
    checkpoint = ctx.policy.params_m * 1e6 * 12  # fp32 weights and AdamW's two moments
    assert f"(every 100 steps and the last: 10 of about {size(checkpoint)}, {size(10 * checkpoint)})" in text
    assert "/data has 2 GB free: the run fails when the disk fills" in text


def test_host_memory_short_of_the_weights_each_process_loads_blocks():
    inventory = machine("workstation_2x4090")
    memory = {"total": 8 * GB, "available": 4 * GB, "cgroup_limit": GB // 10}
    facts = answer(host=host_facts(memory=memory), trainer=lerobot_facts())
    text = only(findings(facts, job(inventory), inventory, "py"))
    assert "2 process(es) each load ACT" in text and "and 100 MB is available: the kernel's OOM killer ends" in text


def test_a_low_open_file_limit_warns():
    inventory = machine("no_driver")
    facts = answer(host=host_facts(nofile=[64, 4096]), trainer=lerobot_facts())
    text = only(findings(facts, job(inventory, device="cpu"), inventory, "py"), "warning")
    assert "the open-file limit is 64, and 4 workers x prefetch 4 x 3 tensors" in text
    assert "`ulimit -n 4096`" in text


def test_wandb_on_without_the_package_or_a_login_blocks():
    inventory = machine("no_driver")
    ctx = job(inventory, device="cpu", trainer_options={"wandb": True})
    absent = lerobot_facts(trackers={"wandb": False})
    assert "wandb is not installed" in only(findings(answer(trainer=absent, host=host_facts()), ctx, inventory, "py"))
    logged_out = findings(answer(trainer=lerobot_facts(), host=host_facts()), ctx, inventory, "py")
    assert "no wandb login is found" in only(logged_out)
    for host in (host_facts(wandb_login=True), host_facts(wandb_mode="offline")):
        assert findings(answer(trainer=lerobot_facts(), host=host), ctx, inventory, "py") == []


def test_a_pair_that_hangs_with_p2p_names_nccl_p2p_disable():
    inventory = machine("workstation_2x4090")
    pairs = {"results": [{"devices": [0, 1], "ok": False, "hung": True, "ok_without_p2p": True}]}
    text = only(findings(answer(pairs=pairs), job(inventory), inventory, "py"))
    assert (
        "an all-reduce between GPU 0 and GPU 1 hangs with peer-to-peer transfers and finishes with NCCL_P2P_DISABLE=1"
        in text
    )
    assert "add NCCL_P2P_DISABLE: '1' to launch.env" in text
    pairs["results"][0]["ok_without_p2p"] = False
    assert "hangs, with peer-to-peer on and off" in only(findings(answer(pairs=pairs), job(inventory), inventory, "py"))


def test_a_taken_rendezvous_port_on_node_0_blocks():
    inventory = machine("no_driver")
    hardware = {"gpus": 1, "device": "cpu", "nodes": 2, "node_rank": 0, "rdzv_endpoint": "10.0.0.1:29500"}
    ctx = job(inventory, hardware=hardware)
    text = only(findings(answer(host=host_facts(ports={"29500": False})), ctx, inventory, "py"))
    assert "port 29500 is already in use on node 0" in text


def test_the_host_section_reads_the_shm_stand_in_and_the_logins(tmp_path):
    """doctor_env.py's host section, stdlib only, in this interpreter as doctor.ask runs it."""
    (tmp_path / "netrc").write_text("machine api.wandb.ai login user password secret\n")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "token").write_text("hf_x\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "GPUWIZARD_SHM_PATH": str(tmp_path),
        "NETRC": str(tmp_path / "netrc"),
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
    }
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        taken = held.getsockname()[1]
        request = {"sections": ["host"], "output_dir": str(tmp_path / "not" / "yet"), "ports": [taken]}
        out = subprocess.run(
            [sys.executable, check_script("doctor_env.py"), json.dumps(request)],
            capture_output=True,
            text=True,
            env=env,
        )
    [line] = [line for line in out.stdout.splitlines() if line.startswith(MARK)]
    host = DoctorAnswer.model_validate_json(line[len(MARK) :]).host
    assert host is not None and host.shm is not None and host.disk is not None
    assert host.shm.path == str(tmp_path) and host.disk.path == str(tmp_path)  # the nearest existing folder
    assert (host.wandb_login, host.hub_token, host.hub_offline) == (True, True, True)
    assert host.ports == {str(taken): False}
    env.pop("NETRC"), env.pop("HF_HOME")
    env |= {"HOME": str(tmp_path / "empty")}
    out = subprocess.run(
        [sys.executable, check_script("doctor_env.py"), json.dumps(request)], capture_output=True, text=True, env=env
    )
    host = DoctorAnswer.model_validate_json(out.stdout.strip().splitlines()[-1][len(MARK) :]).host
    assert host is not None and (host.wandb_login, host.hub_token) == (False, False)
    assert host.ports == {str(taken): True}


@pytest.mark.parametrize("level, status", [("error", "blocked"), ("warning", "warnings")])
def test_the_report_counts_what_fails_and_what_slows(level, status):
    from gpuwizard.core.errors import problem, warning

    made = problem(None, "x", "y") if level == "error" else warning(None, "x", "y")
    done = report(answer(), [made], cached=False, seconds=1.0)
    assert done.status == status and done.findings[0].text == "x. Fix: y."
    assert done.blocks is (status == "blocked")


def test_a_job_on_two_visible_gpus_asks_for_its_pair_and_a_cpu_job_does_not():
    from gpuwizard.model.job import TrainerQuery
    from gpuwizard.trainers.check.doctor import pairs_time, request_for

    inventory = machine("workstation_2x4090")
    query = TrainerQuery(argv=["python", "check_lerobot.py", "--batch_size=8"], expected={})
    gpu = request_for(job(inventory), query, inventory)
    assert gpu["sections"] == ["torch", "trainer", "pairs"] and gpu["capabilities"] == [["8", "9"], ["8", "9"]]
    assert gpu["pairs"] == {"devices": [0, 1], "backend": "nccl", "timeout_s": 30.0}
    assert pairs_time(gpu) == 60.0  # the one pair, and once more without P2P
    cpu = request_for(job(inventory, device="cpu"), query, inventory)
    assert cpu["sections"] == ["trainer"] and pairs_time(cpu) == 0  # no torch import for a CPU job


def test_extra_args_given_after_gpuwizards_flags_decide_the_workers():
    inventory = machine("workstation_2x4090")
    small = host_facts(shm={"path": "/dev/shm", "total": 64 * 2**20, "free": 64 * 2**20})
    ctx = job(inventory, launch={"extra_args": ["--num_workers=0"]})
    assert findings(answer(host=small, trainer=lerobot_facts()), ctx, inventory, "py") == []  # no worker, no shm


def test_an_openpi_debug_config_loads_its_dummy_gemma_not_the_policys_weights():
    """CI, 2026-12-07: openpi's `debug` config (Pi0Config(paligemma_variant="dummy", ...), src/openpi/training/config.py
    at 15a9616) was refused for pi0's 13.2 GB of weights on a 24 GB machine; pi0_libero loads them and still is."""
    inventory = machine("workstation_2x4090")
    memory = {"total": 24 * GB, "available": 20 * GB}
    facts = answer(host=host_facts(memory=memory), trainer={"name": "openpi", "version": "0.1.0"})

    def openpi(config: str):
        options = {"config_name": config, "backend": "pytorch", "uv": False}
        return job(inventory, trainer="openpi", policy="pi0", dataset={"repo_id": "fake"}, trainer_options=options)

    assert [p.message for p in findings(facts, openpi("debug"), inventory, "py") if "OOM" in p.message] == []
    assert "each load pi0" in only(findings(facts, openpi("pi0_libero"), inventory, "py"))
