"""openpi (Physical-Intelligence/openpi at 15a9616): what gpuwizard passes and why, and the real openpi where an
environment is configured (GPUWIZARD_OPENPI_DIR, built by shared/scripts/openpi-env.sh): every generated command
through openpi's own tyro CLI, the PyTorch `debug` config on 2 CPU processes, the JAX `debug` config on 2 CPU devices.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuwizard.trainers.check import SCRIPTS_DIR
from gpuwizard.trainers.logparse import parse_openpi
from support.cli import flag, gw_subprocess
from support.data import REPO
from support.runs import newest_run
from support.trainers import openpi_root

PRESET = """\
version: 1
name: {name}
trainer: openpi
policy: {policy}
dataset: {dataset}
hardware: {hardware}
batch: {{size: {batch}}}
optim: {optim}
scaling: {{rule: none, reference_gpus: {gpus}}}
strategy: {strategy}
mixed_precision: bf16
trainer_options: {options}
output_dir: {output}
"""


def preset_text(
    config: str,
    policy: str = "pi05",
    *,
    name: str = "openpi-test",
    dataset: str = "{repo_id: me/droid}",
    gpus: int = 2,
    device: str = "auto",
    batch: int = 32,
    optim: str = "{steps: 20000}",
    strategy: str = "ddp",
    backend: str = "jax",
    options: str = "",
    output: str = "checkpoints",
    launch: str = "",
) -> str:
    text = PRESET.format(
        name=name,
        policy=policy,
        dataset=dataset,
        hardware=f"{{gpus: {gpus}, device: {device}}}",
        batch=batch,
        optim=optim,
        gpus=gpus,
        strategy=strategy,
        options=f"{{config_name: {config}, backend: {backend}, uv: false{options}}}",
        output=output,
    )
    return text + launch


def argv_of(gw, path: Path, *args: str) -> tuple[list[str], dict]:
    result = gw("preview", "--trust", path, "--format", "json", *args)
    assert result.code == 0, result.err
    spec = json.loads(result.out)
    return spec["argv"], spec["env"]


def plan_of(gw, path: Path) -> tuple[int, dict, str]:
    result = gw("plan", "--trust", path, "--json")
    return result.code, json.loads(result.out), result.err


def cosine_lr(step: int, peak: float, warmup: int, decay_steps: int, end: float) -> float:
    """optax.warmup_cosine_decay_schedule as openpi's CosineDecaySchedule.create builds it (src/openpi/training/
    optimizer.py): linear from peak/(warmup+1) to the peak, then a cosine to `end` over decay_steps - warmup."""
    if step < warmup:
        start = peak / (warmup + 1)
        return start + (peak - start) * step / warmup
    progress = min(1.0, (step - warmup) / (decay_steps - warmup))
    return end + (peak - end) * 0.5 * (1 + math.cos(math.pi * progress))


# Mismatches found against the real openpi (issue 18, items 3-8), each with the upstream fact it rests on.


def test_the_dataset_is_passed_and_a_local_root_is_found_by_repo_id(gw, write_preset, tmp_path):
    """src/openpi/training/config.py: `--data.repo-id` sets DataConfigFactory.repo_id; without it the config's own
    dataset trains (pi05_droid_finetune's is the placeholder your_hf_username/my_droid_dataset). data_loader.py opens
    LeRobotDataset(repo_id) with no root, i.e. $HF_LEROBOT_HOME/<repo_id> (lerobot/common/constants.py)."""
    argv, env = argv_of(gw, write_preset(preset_text("pi05_droid_finetune")))
    assert flag(argv, "--data.repo-id") == "me/droid" and "HF_LEROBOT_HOME" not in env
    local = tmp_path / "lerobot" / "me" / "droid"
    shutil.copytree(REPO / "tests" / "data" / "datasets" / "so100_tiny_lerobot061", local)
    argv, env = argv_of(
        gw, write_preset(preset_text("pi05_droid_finetune", dataset=f"{{repo_id: me/droid, root: {local}}}"))
    )
    assert flag(argv, "--data.repo-id") == "me/droid" and env["HF_LEROBOT_HOME"] == str(tmp_path / "lerobot")
    elsewhere = write_preset(preset_text("pi05_droid_finetune", dataset=f"{{repo_id: other/name, root: {local}}}"))
    result = gw("preview", "--trust", elsewhere)
    assert result.code == 2 and "dataset.root" in result.err and "must end with the repo id other/name" in result.err


def test_a_lower_peak_lr_never_decays_up_to_the_configs_end_lr(gw, write_preset):
    """src/openpi/training/config.py: pi05_libero's CosineDecaySchedule(warmup 10,000, peak 5e-5, decay 1,000,000,
    decay_lr 5e-5). optax's cosine ends at decay_lr whatever the peak, so at peak 6.25e-6 (5e-5 x 32/256) the run's lr
    would rise towards 5e-5: --lr-schedule.decay-lr must follow the peak."""
    path = write_preset(preset_text("pi05_libero", optim="{lr: 6.25e-6, steps: 30000}"))
    argv, _ = argv_of(gw, path)
    peak, end = float(flag(argv, "--lr-schedule.peak-lr")), float(flag(argv, "--lr-schedule.decay-lr") or 5e-5)
    warmup, decay_steps = 10_000, int(flag(argv, "--lr-schedule.decay-steps") or 1_000_000)
    assert peak == 6.25e-6 and end == pytest.approx(6.25e-6), "pi05_libero's end lr equals its peak: it still does"
    assert max(cosine_lr(s, peak, warmup, decay_steps, end) for s in range(warmup, 30_000, 1000)) <= peak * 1.0001
    code, plan, _ = plan_of(gw, path)
    assert code == 0 and any("cosine to 6.25e-06" in n for n in plan["notes"]), plan["notes"]
    default = write_preset(preset_text("pi05_droid_finetune", optim="{lr: 1.0e-5, steps: 20000}"))
    argv, _ = argv_of(gw, default)
    assert flag(argv, "--lr-schedule.decay-lr") == "1e-06", "the default schedule ends at a tenth of its peak"


def test_a_config_the_catalog_lists_under_another_policy_plans_its_own_schedule(gw, write_preset):
    """Issue 18 item 5, policy pi0 with config pi05_libero: the catalog lists pi05_libero under pi05, so the plan used
    openpi's defaults (2.5e-5, warmup 1,000) where the run trains at 5e-5 with warmup 10,000; and it trains a pi05
    (Pi0Config(pi05=True) in src/openpi/training/config.py), which the plan now says instead of sizing a pi0."""
    code, plan, err = plan_of(gw, write_preset(preset_text("pi05_libero", policy="pi0")))
    assert (plan["lr"], plan["warmup_steps"]) == (5e-5, 10_000)
    assert code == 2 and "policy = 'pi0': pi05_libero trains pi05" in err and "set policy: pi05" in err


def test_pi0_fast_on_pytorch_is_refused_by_the_configs_model_not_the_policy(gw, write_preset):
    """src/openpi/training/config.py: pi0_fast_libero's model is Pi0FASTConfig; scripts/train_pytorch.py converts any
    model config to a Pi0Config, so policy pi0 with that config would train a pi0 silently (README: PyTorch does not
    support pi0-FAST)."""
    text = preset_text("pi0_fast_libero", policy="pi0", backend="pytorch")
    result = gw("plan", "--trust", write_preset(text))
    assert result.code == 2 and "does not support pi0_fast, which pi0_fast_libero trains" in result.err
    fine = gw(
        "plan",
        write_preset(text.replace("backend: pytorch", "backend: jax").replace("policy: pi0", "policy: pi0_fast")),
    )
    assert fine.code == 0, fine.err


def test_pytorch_runs_get_their_weights_or_are_told_why_not(gw, write_preset, tmp_path):
    """src/openpi/training/config.py: pi05_libero's pytorch_weight_path is "/path/to/your/pytorch_weight_path"; every
    other config has None, and scripts/train_pytorch.py then trains from random weights (it loads only
    <pytorch_weight_path>/model.safetensors, never the JAX weight loader)."""
    placeholder = gw("plan", "--trust", write_preset(preset_text("pi05_libero", backend="pytorch")))
    assert placeholder.code == 2 and "openpi's placeholder /path/to/your/pytorch_weight_path" in placeholder.err
    weights = tmp_path / "pi05_pytorch"
    given = write_preset(preset_text("pi05_libero", backend="pytorch", options=f", torch_weights: {weights}"))
    argv, _ = argv_of(gw, given)
    assert flag(argv, "--pytorch-weight-path") == str(weights)
    code, plan, _ = plan_of(gw, write_preset(preset_text("pi0_libero", policy="pi0", backend="pytorch")))
    assert code == 0 and any(
        "train_pytorch.py starts from random weights" in w and "pi0_base/params" in w for w in plan["warnings"]
    ), plan["warnings"]


def test_resume_passes_no_overwrite_for_configs_that_overwrite(gw, write_preset):
    """src/openpi/training/config.py: the debug configs set overwrite=True and TrainConfig.__post_init__ raises
    "Cannot resume and overwrite at the same time."; --no-overwrite (tyro's pair of --overwrite) lifts it."""
    text = preset_text("debug", policy="pi0", batch=2, optim="{steps: 10}", dataset="{repo_id: fake}")
    argv, _ = argv_of(gw, write_preset(text), "--resume")
    assert "--resume" in argv and "--no-overwrite" in argv and "--overwrite" not in argv
    fresh, _ = argv_of(gw, write_preset(text))
    assert "--resume" not in fresh and "--no-overwrite" not in fresh, "a fresh start keeps the config's own"


def test_a_warmup_not_shorter_than_the_cosine_is_refused_for_jax(gw, write_preset):
    """optax.warmup_cosine_decay_schedule (optax 0.2.4, openpi's lock) raises "requires positive decay_steps" only
    when decay_steps <= warmup_steps; openpi keeps the config's decay_steps (30,000 for pi05_droid_finetune) whatever
    the run's length, so a short run plans and a warmup of 30,000 or more is refused."""
    short = gw("plan", "--trust", write_preset(preset_text("pi05_droid_finetune", optim="{steps: 500}")))
    assert short.code == 0, short.err
    long = gw(
        "plan", "--trust", write_preset(preset_text("pi05_droid_finetune", optim="{steps: 40000, warmup_ratio: 0.75}"))
    )
    assert long.code == 2 and "optim.warmup_ratio" in long.err, long.err


def test_jax_progress_counts_updates_done_from_its_own_lines():
    """scripts/train.py writes `Step {step}` after update `step` (0-based) of `for step in pbar`; its non-TTY bar is
    tqdm_loggable's `Progress on: 2.00it/4.00it` (tqdm's format_sizeof: 3 digits, k past 999); it ends with
    "Waiting for checkpoint manager to finish"; orbax reports each saved step. Lines from the real debug run."""
    step = parse_openpi("Step 3: grad_norm=10.3374, loss=2.5969, param_norm=477.8596")
    assert (step.step, step.loss) == (4, 2.5969)
    bar = parse_openpi(
        "09:25:20.525 [I] Progress on: 2.00it/4.00it rate:163.0s/it remaining:05:26 elapsed:08:40 postfix:- "
        "(32084:tqdm_logging.py:145)"
    )
    assert (bar.step, bar.total, bar.step_is_exact) == (2, 4, True)
    assert parse_openpi("Progress on: -/4 rate:- remaining:? elapsed:00:00 postfix:-") is None
    rounded = parse_openpi("Progress on: 12.3kit/30.0kit rate:1.6s/it remaining:1:00 elapsed:2:00 postfix:-")
    assert (rounded.step, rounded.step_is_exact) == (12_300, False)
    assert parse_openpi("09:30:01.294 [I] Waiting for checkpoint manager to finish   (32084:train.py:276)").finished
    assert parse_openpi(
        "[process=0][thread=save_finalize][step=3] CheckpointManager Save Finalize is done on all hosts."
    ).checkpoint


def test_pytorch_config_line_reads_the_global_batch():
    """scripts/train_pytorch.py logs `Training config: batch_size={config.batch_size}, effective_batch_size=
    {config.batch_size // world_size}, ...`: the global batch is batch_size, effective_batch_size is per GPU."""
    info = parse_openpi("Training config: batch_size=4, effective_batch_size=2, num_train_steps=4")
    assert (info.effective_batch, info.total) == (4, 4)


def test_without_an_openpi_environment_the_plan_says_it_used_the_catalog(gw, write_preset):
    code, plan, _ = plan_of(gw, write_preset(preset_text("pi05_droid_finetune")))
    assert code == 0 and any(
        "are from gpuwizard's catalog; the installed openpi was not asked" in n for n in plan["notes"]
    )
    result = gw("check", "--trust", write_preset(preset_text("pi05_droid_finetune")))
    assert result.code == 0 and "not checked: no training environment here" in result.out


# The real openpi.


def openpi_launch(root: Path) -> str:
    """Run from the openpi checkout with its src/, the client package and the LeRobot stand-in on the path."""
    stubs = root / "stubs"
    return (
        f"launch:\n  python: {root / 'venv' / 'bin' / 'python'}\n  workdir: {root / 'openpi'}\n"
        f'  env: {{PYTHONPATH: "src:packages/openpi-client/src:{stubs}", WANDB_MODE: disabled}}\n'
    )


def shipped_with_env(name: str, root: Path, tmp_path: Path) -> Path:
    """A shipped preset as it is, told where the training environment is (launch.python, workdir, PYTHONPATH)."""
    text = (REPO / "presets" / f"{name}.yaml").read_text()
    path = tmp_path / f"{name}.yaml"
    path.write_text(text + openpi_launch(root))
    return path


def checked(gw, path: Path, *args: str) -> dict:
    result = gw("check", "--trust", path, "--json", *args)
    answer = json.loads(result.out)
    assert result.code == 0 and answer["status"] == "accepted", answer
    return answer


@pytest.mark.openpi
def test_real_cli_accepts_every_shipped_openpi_command_as_planned(gw, tmp_path):
    """The shipped presets (JAX FSDP, PyTorch DDP), their --resume forms and other configs, each parsed by openpi's
    own `_config.cli()` in its interpreter; every planned value is compared (trainercheck)."""
    root = openpi_root()
    summaries = []
    jax = shipped_with_env("pi05-openpi-fsdp", root, tmp_path)
    answer = checked(gw, jax)
    summaries.append(f"{jax.stem}: {answer['summary']}")
    values = answer["values"]
    assert (values["global_batch"], values["lr"], values["warmup_steps"]) == (32, 5e-5, 10_000)
    assert (values["fsdp_devices"], values["model"], values["dataset"]) == (4, "pi05", "physical-intelligence/libero")
    assert answer["parser"] == "openpi 0.1.0 scripts/train.py"
    resumed = checked(gw, jax, "--resume")
    assert (resumed["values"]["resume"], resumed["values"]["overwrite"]) == (True, False)
    torch = shipped_with_env("pi05-openpi-pytorch", root, tmp_path)
    answer = checked(gw, torch)
    summaries.append(f"{torch.stem}: {answer['summary']}")
    assert answer["values"]["per_device_batch"] == 16 and answer["values"]["weights"].endswith("pi05_base_pytorch")
    launch = openpi_launch(root)
    for config, policy, optim in (
        ("pi05_droid_finetune", "pi05", "{lr: 1.0e-5, steps: 5000}"),
        ("pi0_fast_libero", "pi0_fast", "{steps: 3000}"),
    ):
        path = tmp_path / f"{config}.yaml"
        path.write_text(preset_text(config, policy=policy, optim=optim, name=config.replace("_", "-"), launch=launch))
        answer = checked(gw, path)
        summaries.append(f"{config}: {answer['summary']}")
        assert answer["values"]["dataset"] == "me/droid", "the preset's own dataset, not the config's"
    print("\n".join(summaries))


PROBE_MANY = """
import json, sys
sys.path.insert(0, sys.argv[1])
import gwcheck, check_openpi
for args in json.loads(sys.argv[2]):
    sys.argv = ["check_openpi.py", *args]
    gwcheck.main(check_openpi.parse)
"""


def probe_answers(root: Path, commands: list[list[str]]) -> list[dict]:
    """check/scripts/check_openpi.py's answers for several commands from one interpreter (openpi imports once)."""
    out = subprocess.run(
        [
            str(root / "venv" / "bin" / "python"),
            "-c",
            PROBE_MANY,
            str(SCRIPTS_DIR),
            json.dumps(commands),
        ],
        capture_output=True,
        text=True,
        cwd=root / "openpi",
        env={"PYTHONPATH": f"src:packages/openpi-client/src:{root / 'stubs'}", "PATH": "/usr/bin:/bin"},
        timeout=600,
    )
    marked = [line.removeprefix("GPUWIZARD-CHECK ") for line in out.stdout.splitlines() if "GPUWIZARD-CHECK " in line]
    assert len(marked) == len(commands), out.stdout[-2000:] + out.stderr[-2000:]
    return [json.loads(line) for line in marked]


@pytest.mark.openpi
def test_real_openpi_refuses_the_commands_that_were_generated_before():
    """The forms gpuwizard emitted before issue 18, through the real CLI: --resume on a debug config (overwrite=True)
    is refused, pi05_droid_finetune without --data.repo-id trains its placeholder dataset; and a mistyped config
    name gets openpi's own suggestion."""
    refused, placeholder, unknown = probe_answers(
        openpi_root(),
        [
            ["scripts/train.py", "1", "debug", "--exp-name=x", "--resume"],
            ["scripts/train.py", "1", "pi05_droid_finetune", "--exp-name=x"],
            ["scripts/train.py", "1", "pi05_librero", "--exp-name=x"],
        ],
    )
    assert (refused["status"], refused["error"]) == (
        "refused",
        "ValueError: Cannot resume and overwrite at the same time.",
    )
    assert placeholder["values"]["dataset"] == "your_hf_username/my_droid_dataset"
    assert unknown["error"].startswith("ValueError: Config 'pi05_librero' not found. Did you mean 'pi05_libero'?")


@pytest.mark.openpi
def test_real_openpi_values_plan_a_config_the_catalog_lacks(gw, tmp_path):
    """pi05_full_droid_finetune is in no catalog entry: the plan asks the installed openpi (get_config) and trains on
    its own schedule (src/openpi/training/config.py: batch 256, 5e-5, warmup 1,000, decay 1,000,000 to 5e-5); the
    catalog's entries agree with the installed openpi wherever both know a config."""
    root = openpi_root()
    path = tmp_path / "full.yaml"
    path.write_text(preset_text("pi05_full_droid_finetune", optim="{steps: 100000}", launch=openpi_launch(root)))
    code, plan, err = plan_of(gw, path)
    assert code == 0, err
    assert (plan["lr"], plan["warmup_steps"]) == (5e-5, 1000)
    assert any("from the installed openpi's own TrainConfig (openpi 0.1.0" in n for n in plan["notes"]), plan["notes"]
    assert any("reads RLDS data" in w for w in plan["warnings"])
    catalog = yaml_catalog_configs()
    answers = probe_answers(root, [["--defaults", name] for name in catalog])
    for (name, (policy, listed)), answer in zip(catalog.items(), answers):
        own = {
            "global_batch": listed.batch_size,
            "steps": listed.num_train_steps,
            "lr": listed.peak_lr,
            "warmup_steps": listed.warmup_steps,
            "decay_steps": listed.decay_steps,
            "decay_lr": listed.decay_lr,
            "model": policy,
            "dataset": listed.repo_id,
            "weights": listed.weights,
            "pytorch_weights": listed.pytorch_weight_path,
            "overwrite": listed.overwrite,
            "data": listed.data,
        }
        assert {k: answer["values"][k] for k in own} == own, name


def yaml_catalog_configs() -> dict:
    from gpuwizard.model.catalog import load_catalog

    return {
        name: (key, facts)
        for key, entry in load_catalog().items()
        if entry.openpi
        for name, facts in entry.openpi.configs.items()
    }


def debug_preset(root: Path, tmp_path: Path, backend: str) -> Path:
    """openpi's `debug` config (FakeDataConfig, dummy PaliGemma and expert) on 2 CPU processes or devices."""
    jax = backend == "jax"
    text = preset_text(
        "debug",
        policy="pi0",
        name=f"openpi-debug-{backend}",
        dataset="{repo_id: fake}",
        device="cpu",
        batch=2 if jax else 4,
        optim=f"{{steps: {1 if jax else 4}}}",
        strategy="fsdp" if jax else "ddp",
        backend=backend,
        options=", log_interval: 1",
        output=f"{tmp_path}/out",
        launch=openpi_launch(root).replace("WANDB_MODE: disabled", "WANDB_MODE: disabled, HF_HUB_OFFLINE: '1'"),
    )
    path = tmp_path / f"debug-{backend}.yaml"
    path.write_text(text + "monitor: {hang_timeout_s: 900, first_step_timeout_s: 2000}\n")  # XLA compiles slowly
    return path


def run_headless(preset: Path, timeout: float) -> subprocess.CompletedProcess:
    """`gpuwizard run --headless`, and whatever it left running stopped if the test ends before it returns."""
    try:
        return gw_subprocess("run", "--trust", preset, "--headless", timeout=timeout)
    except BaseException:  # its timeout, or pytest-timeout's
        gw_subprocess("stop", timeout=120)
        raise


KNOWN_FAKE_DATA_FAILURE = "expected input[2, 224, 224, 3] to have 3 channels, but got 224 channels instead"
"""shared/scripts/openpi-env.sh: upstream's FakeDataset images are not transposed for the PyTorch vision encoder."""


@pytest.mark.openpi
@pytest.mark.timeout(1200)
def test_real_pytorch_debug_logs_the_planned_batch_and_schedule(gw, tmp_path):
    """scripts/train_pytorch.py under torchrun, 2 CPU processes (gloo): its own banner and LR-schedule lines carry the
    plan's global batch, per-GPU batch and the whole schedule; then upstream's fake-data path fails (known)."""
    root = openpi_root()
    preset = debug_preset(root, tmp_path, "pytorch")
    plan = gw("plan", "--trust", preset, "--json").json()
    result = run_headless(preset, timeout=1100)
    run = newest_run()
    log = run.log.read_text(errors="replace")
    assert result.returncode != 0 and run.status().state == "failed", result.stdout + result.stderr
    assert KNOWN_FAKE_DATA_FAILURE in log, "the one known upstream failure, nothing else"
    per_gpu, world = plan["per_device_batch"], plan["world_size"]
    banner = f"Using batch size per GPU: {per_gpu} (total batch size across {world} GPUs: {plan['effective_batch']})"
    assert log.count(banner) == world, banner
    check = json.loads((run.path / "trainer-check.json").read_text())
    assert check["status"] == "accepted", check
    expected = check["expected"]
    logged = re.search(r"LR schedule: warmup=(\d+), peak_lr=(\S+), decay_steps=(\d+), end_lr=(\S+)", log)
    assert logged, log[-3000:]
    assert (int(logged[1]), int(logged[3])) == (expected["warmup_steps"], expected["decay_steps"])
    assert float(logged[2]) == pytest.approx(plan["lr"], rel=1e-2) and float(logged[4]) == pytest.approx(
        expected["decay_lr"], rel=1e-2
    ), "logged as {:.2e}"
    assert f"num_train_steps={plan['steps']}" in log
    events, _ = run.events()
    assert not [e for e in events if e.kind == "batch_mismatch"], [e.title for e in events]


@pytest.mark.openpi
@pytest.mark.timeout(2400)
def test_real_jax_debug_trains_on_two_cpu_devices_with_fsdp(tmp_path):
    """scripts/train.py, one process over 2 host devices (XLA_FLAGS=--xla_force_host_platform_device_count=2) with
    --fsdp-devices=2: the plan's steps run, loss is read from its `Step N: grad_norm=..., loss=...` lines, the last
    step's checkpoint lands in <output_dir>/debug/<exp-name>/ (src/openpi/training/checkpoints.py), and the command
    that resumes it (debug sets overwrite=True) is accepted by openpi's own CLI. One step: each takes a minute or more
    on 2 CPU cores (debug's image tower is full size), and scripts/train.py saves at step num_train_steps - 1."""
    root = openpi_root()
    preset = debug_preset(root, tmp_path, "jax")
    result = run_headless(preset, timeout=2300)
    run = newest_run()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + run.log.read_text()[-3000:]
    job = run.job()
    assert "--fsdp-devices=2" in job.argv and job.env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
    log = run.log.read_text(errors="replace")
    losses = [parse_openpi(line) for line in log.splitlines() if re.search(r"Step \d+: ", line)]
    assert [info.step for info in losses] == [1] and all(info.loss is not None for info in losses)
    progress = run.progress()
    assert (progress.step, progress.total, progress.finished) == (1, 1, True) and progress.loss == losses[-1].loss
    assert progress.checkpoints == 1
    assert json.loads((run.path / "trainer-check.json").read_text())["status"] == "accepted"
    assert (tmp_path / "out" / "debug" / "openpi-debug-jax" / "0").is_dir(), "saved at the last step's index"
    resume = gw_subprocess("check", "--trust", preset, "--resume", "--json", timeout=600)
    answer = json.loads(resume.stdout)
    assert resume.returncode == 0 and answer["status"] == "accepted", answer
    assert (answer["values"]["resume"], answer["values"]["overwrite"]) == (True, False), "debug sets overwrite=True"
