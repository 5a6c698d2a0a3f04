"""LeRobot's own reading of gpuwizard's commands (`gpuwizard check`, trainers/check/scripts/check_lerobot.py) in the
real 0.6.1 and main 7427f31 environments, and the plan fixes it found (issue 18, items 12-16)."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from gpuwizard.model.preset_files import load_preset
from gpuwizard.planning.plan import make_plan
from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runner.launch.prepare import prepare_run
from gpuwizard.runner.launch.staging import expectations
from gpuwizard.runs.records import Expectations
from gpuwizard.runs.tail import LogTail
from gpuwizard.trainers.registry import get_trainer
from support.cli import gw_subprocess
from support.data import DATA
from support.presets import shipped_preset
from support.trainers import fake_env, trainer_env

ENVS = [
    pytest.param("GPUWIZARD_LEROBOT_PYTHON", "lerobot-train 0.6.1", id="0.6.1"),
    pytest.param("GPUWIZARD_LEROBOT_MAIN_PYTHON", "lerobot-train 0.6.2", id="main-7427f31"),
]
OFFLINE = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}


def lerobot_python(variable: str) -> str:
    return trainer_env(variable, "a LeRobot interpreter")


def extras() -> str:
    return trainer_env("GPUWIZARD_LEROBOT_EXTRAS", "the folder of lerobot[xvla,pi,smolvla,diffusion]'s packages")


def shipped(tmp_path: Path, preset: str, python: str, env: dict | None = None, **changes) -> Path:
    """A shipped preset as the user has it, pointed at a LeRobot interpreter, with some fields changed (`a__b` for
    a.b)."""
    return shipped_preset(tmp_path, preset, launch__python=python, launch__env={**OFFLINE, **(env or {})}, **changes)


@pytest.fixture
def check(gw, tmp_path, monkeypatch):
    """`gpuwizard check PRESET --json` in process from tmp_path, the presets' folder (relative output dirs land there):
    the CLI's own code without a second interpreter's start-up; its exit code, record and stderr."""
    monkeypatch.chdir(tmp_path)

    def run(preset: Path, *args: str) -> tuple[int, dict, str]:
        result = gw("check", "--trust", preset, "--json", *args)
        return result.code, json.loads(result.out), result.err

    return run


@pytest.mark.lerobot
@pytest.mark.parametrize("variable, parser", ENVS)
def test_the_shipped_act_presets_are_accepted_by_lerobot_trains_own_parser(check, gw, tmp_path, variable, parser):
    """so100-act-ddp2: linear_lr doubles the lr and adds a 5% warmup, which needs --use_policy_training_preset=false
    and the constant_with_warmup scheduler (ACT's preset has none): lerobot-train's own make_optimizer_and_scheduler
    then trains one group at 2e-5 (lerobot/optim/factory.py, schedulers.py)."""
    python = lerobot_python(variable)
    single = shipped(tmp_path, "so100-act-1gpu", python)
    code, record, err = check(single)
    assert code == 0 and record["status"] == "accepted", err
    assert record["parser"] == parser and not record["cached"]
    assert {k: record["values"][k] for k in ("per_device_batch", "lr", "steps", "warmup_steps", "dataset")} == {
        "per_device_batch": 8,
        "lr": 1e-5,
        "steps": 100_000,
        "warmup_steps": 0,
        "dataset": "myuser/so100_pick",
    }
    ddp = shipped(tmp_path, "so100-act-ddp2", python)
    line = gw("check", "--trust", ddp).out.splitlines()[0]
    main = ", dp_shard 1, dp_workers 2, mixed_precision bf16" if "0.6.2" in parser else ""
    assert line == (
        f"so100-act-ddp2: accepted by {parser}'s own parser: batch 8 per process, lr 2e-05 on the logged group, "
        f"100,000 steps, warmup 5,000, dataset myuser/so100_pick{main}, policy act, as planned"
    )
    code, record, _ = check(ddp)
    assert code == 0 and record["cached"], "the same command in the same environment is not asked twice"


@pytest.mark.lerobot
@pytest.mark.parametrize("variable, parser", ENVS[:1])
def test_a_value_the_trainer_reads_differently_blocks_the_launch(check, tmp_path, variable, parser):
    """A later --scheduler.num_warmup_steps in extra_args wins in draccus: lerobot-train would warm up over 100
    steps where the plan says 5,000. The check says so and `run` refuses before starting anything. 0.6.1 only: both
    environments parse with draccus 0.11.6, and the mismatch and the refusal are gpuwizard's; main's parser reads
    the same shipped command in the test above."""
    preset = shipped(
        tmp_path, "so100-act-ddp2", lerobot_python(variable), launch__extra_args=["--scheduler.num_warmup_steps=100"]
    )
    code, record, err = check(preset)
    assert code == 2 and record["status"] == "mismatch"
    assert [(m["key"], m["planned"], m["trainer"]) for m in record["mismatches"]] == [("warmup_steps", 5000, 100)]
    assert f"{parser} will use warmup_steps 100 where the plan says 5,000" in err
    run = gw_subprocess("run", "--trust", preset, "--headless", cwd=tmp_path, timeout=600)
    assert run.returncode == 2 and "warmup_steps 100 where the plan says 5,000" in run.stderr
    assert not (tmp_path / "outputs").exists(), "nothing started"


def write_policy_config(python: str, policy: str, folder: Path) -> Path:
    """A pretrained policy folder's config.json written by the environment's own config class (no weights)."""
    code = (
        "import sys; from pathlib import Path; import lerobot.policies; "
        "from lerobot.configs.policies import PreTrainedConfig; "
        "cls = PreTrainedConfig.get_choice_class(sys.argv[1]); folder = Path(sys.argv[2]); "
        "folder.mkdir(parents=True); cls()._save_pretrained(folder)"
    )
    subprocess.run([python, "-c", code, policy, str(folder)], check=True, capture_output=True, timeout=300)
    return folder


@pytest.mark.lerobot
@pytest.mark.parametrize("variable, parser", ENVS)
def test_the_shipped_smolvla_preset(check, tmp_path, variable, parser):
    """smolvla-ddp4 fine-tunes lerobot/smolvla_base: offline its config cannot be fetched, which is a fact about
    this machine (not checked), not a refusal. From a local checkpoint folder the real parser reads its config
    (--policy.path, lerobot/configs/train.py _resolve_pretrained_from_cli), and SmolVLA's cosine schedule is shrunk
    to the run: 20,000 / 4 = 5,000 steps, warmup int(1000 x 5000 / 30000) = 166, decay 5,000
    (CosineDecayWithWarmupSchedulerConfig.build); lerobot[smolvla]'s packages come from GPUWIZARD_LEROBOT_EXTRAS."""
    python = lerobot_python(variable)
    code, record, _ = check(shipped(tmp_path, "smolvla-ddp4", python))
    assert code == 0 and record["status"] == "not checked"
    assert record["summary"].startswith("not checked: lerobot/smolvla_base is on the Hugging Face Hub, unreachable")
    assert "no training environment" not in record["summary"], "the environment is here; the Hub is not"
    local = write_policy_config(python, "smolvla", tmp_path / "smolvla_base")
    with_extras = shipped(
        tmp_path, "smolvla-ddp4", python, env={"PYTHONPATH": extras()}, trainer_options={"policy_path": str(local)}
    )
    code, record, err = check(with_extras)
    assert code == 0 and record["status"] == "accepted", err
    values = record["values"]
    assert (values["per_device_batch"], values["lr"], values["steps"]) == (64, 1e-4, 5000)
    assert (values["warmup_steps"], values["decay_steps"], values["policy"]) == (166, 5000, "smolvla")


XVLA = dict(
    name="xvla-check",
    policy="xvla",
    trainer_options={},
    optim={"lr": 1.0e-4, "steps": 3000},
    mixed_precision="bf16",
)


@pytest.mark.lerobot
@pytest.mark.parametrize("variable, parser", ENVS)
def test_xvla_is_checked_on_the_group_lerobot_logs(check, tmp_path, variable, parser):
    """Issue 18 item 13: XVLAAdamWConfig.build (lerobot/optim/optimizers.py, 0.6.1 and main at 7427f31) puts the
    VLM's parameters first at lr x 0.1 and lerobot_train.update_policy logs optimizer.param_groups[0]: the real
    optimizer, built on the policy class's own get_optim_params, says 1e-5 for the group the log shows."""
    preset = shipped(tmp_path, "so100-act-1gpu", lerobot_python(variable), env={"PYTHONPATH": extras()}, **XVLA)
    code, record, err = check(preset)
    assert code == 0 and record["status"] == "accepted", err
    assert record["values"]["lr"] == pytest.approx(1e-5) and record["expected"]["lr"] == pytest.approx(1e-5)
    assert "parameter groups: vlm at 1e-05, soft_prompts at 0.0001, other at 0.0001" in record["notes"][0]
    assert (record["values"]["warmup_steps"], record["values"]["decay_steps"]) == (100, 3000)


@pytest.mark.lerobot
@pytest.mark.parametrize("policy", ["pi0", "pi05"])
def test_fp16_on_pi0_and_pi05_runs_as_lerobot_main_autocasts_it(check, tmp_path, policy):
    """Issue 18 item 12 on the real main 7427f31: --policy.dtype=float16 stops PI0Config/PI05Config ("Invalid dtype:
    float16"), so fp16 goes to --accelerator.mixed_precision alone, which the real parser takes."""
    python = lerobot_python("GPUWIZARD_LEROBOT_MAIN_PYTHON")
    env = {"PYTHONPATH": extras()}
    preset = shipped(
        tmp_path, "so100-act-1gpu", python, env, name=f"{policy}-fp16", policy=policy, mixed_precision="fp16"
    )
    code, record, err = check(preset)
    assert code == 0 and record["status"] == "accepted", err
    assert record["values"]["mixed_precision"] == "fp16" and record["values"]["policy"] == policy
    if policy == "pi05":
        return  # the same config check as pi0's, shown once below
    before = shipped(
        tmp_path,
        "so100-act-1gpu",
        python,
        env,
        name=f"{policy}-fp16-dtype",
        policy=policy,
        mixed_precision="no",
        launch__extra_args=["--policy.dtype=float16"],
    )
    code, record, _ = check(before)
    assert (code, record["status"], record["error"]) == (2, "refused", "ValueError: Invalid dtype: float16")


@pytest.mark.lerobot
def test_fp16_on_pi0_is_refused_at_plan_time_where_lerobot_0_6_1_has_no_fp16_path(check, gw, tmp_path):
    """Issue 18 item 12 on the real 0.6.1: lerobot_train.py takes the precision from policy.dtype, whose float16 the
    real parser refuses (quoted here from it); the plan says so in one paragraph before anything runs."""
    python = lerobot_python("GPUWIZARD_LEROBOT_PYTHON")
    env = {"PYTHONPATH": extras()}
    preset = shipped(tmp_path, "so100-act-1gpu", python, env, name="pi0-fp16", policy="pi0", mixed_precision="fp16")
    result = gw("check", "--trust", preset)
    assert result.code == 2 and result.err.count("mixed_precision = 'fp16'") == 1
    assert "LeRobot 0.6.1 takes pi0's mixed precision from --policy.dtype" in result.err
    asked = shipped(
        tmp_path,
        "so100-act-1gpu",
        python,
        env,
        name="pi0-float16",
        policy="pi0",
        mixed_precision="no",
        launch__extra_args=["--policy.dtype=float16"],
    )
    code, record, _ = check(asked)
    assert (code, record["error"]) == (2, "ValueError: Invalid dtype: float16")


@pytest.mark.lerobot
@pytest.mark.parametrize("variable, parser", ENVS)
def test_diffusion_without_its_extra_is_refused_before_the_launch(check, tmp_path, variable, parser):
    """Issue 18 item 14: DiffusionPolicy.__init__ calls require_package("diffusers", extra="diffusion")
    (lerobot/policies/diffusion/modeling_diffusion.py), after the dataset is loaded. The check finds it first and
    `run` stops before starting; with the packages there, the real diffusers cosine schedule keeps its 500-step
    warmup in a 300-step run (issue 18 item 16), and on the tiny dataset (160 frames, 4 episodes) an epoch is what
    lerobot-train's own sampler draws: DiffusionConfig.drop_n_last_frames = 7 frames of each episode left out
    (lerobot_train.py's EpisodeAwareSampler, 0.6.1 and main at 7427f31; issue 28)."""
    python = lerobot_python(variable)
    fields = dict(name="diffusion-check", policy="diffusion", optim={"lr": 1.0e-4, "steps": 300})
    preset = shipped(tmp_path, "so100-act-1gpu", python, **fields)
    code, record, _ = check(preset)
    assert code == 2 and record["status"] == "refused"
    assert record["summary"].startswith(f"refused by {parser}'s own parser: ImportError: 'diffusers' is required")
    assert record["error"] == (
        "ImportError: 'diffusers' is required but not installed. Install it with: pip install 'lerobot[diffusion]' "
        "(or uv pip install 'lerobot[diffusion]')"
    )
    run = gw_subprocess("run", "--trust", preset, "--headless", cwd=tmp_path, timeout=600)
    assert run.returncode == 2 and "pip install 'lerobot[diffusion]'" in run.stderr
    assert "install the missing package in the training environment" in run.stderr
    tiny = {"repo_id": "local/so100_tiny", "root": str(Path(python).parents[2] / "so100_tiny")}
    installed = shipped(tmp_path, "so100-act-1gpu", python, env={"PYTHONPATH": extras()}, dataset=tiny, **fields)
    code, record, err = check(installed)
    assert code == 0 and record["values"]["warmup_steps"] == 500, err
    assert record["values"]["epoch_samples"] == 132, "EpisodeAwareSampler(drop_n_last_frames=7) over 4 episodes"
    assert "an epoch is 132 samples of 160 frames" in " ".join(record["notes"]), record["notes"]
    plan = json.loads(gw_subprocess("plan", "--trust", installed, "--json", cwd=tmp_path).stdout)
    assert any("never reaches lr 0.0001 and ends at 6e-05" in w for w in plan["warnings"])


LEROBOT_PRESET = """\
version: 1
name: {name}
trainer: lerobot
policy: {policy}
dataset: {{repo_id: me/pick}}
hardware: {{gpus: 1, device: {device}}}
batch: {{size: 4}}
optim: {{lr: 1.0e-4, steps: {steps}}}
mixed_precision: {precision}
trainer_options: {{api: {api}}}
launch: {{python: {python}}}
"""


def lerobot_preset(write_preset, tmp_path, **fields) -> Path:
    python = tmp_path / "env" / "bin" / "python"
    if not python.exists():  # lerobot-train's path for preflight; trainer_options.api states the version
        fake_env(tmp_path / "env", "0.6.1", parallelism=False)
    base = dict(name="p", policy="act", device="cuda", steps=1000, precision="bf16", api="v0.6", python=python)
    return write_preset(LEROBOT_PRESET.format(**(base | fields)), f"{fields.get('name', 'p')}.yaml")


@pytest.mark.parametrize("policy", ["pi0", "pi05", "pi0_fast", "xvla"])
def test_fp16_is_refused_on_0_6_1_and_sent_to_accelerate_alone_on_main(gw, write_preset, tmp_path, policy):
    """Issue 18 item 12: PI0Config, PI05Config, PI0FastConfig and XVLAConfig.__post_init__ accept dtype bfloat16 or
    float32 only (lerobot/policies/*/configuration_*.py, 0.6.1 and main at 7427f31; the real parsers' answers are in
    the lerobot-marked tests). 0.6.1 (lerobot_train.py) has no other precision path for them; main autocasts through
    --accelerator.mixed_precision (lerobot/configs/accelerator.py), --policy.dtype only casting parameters."""
    old = gw("plan", "--trust", lerobot_preset(write_preset, tmp_path, name="old", policy=policy, precision="fp16"))
    assert old.code == 2 and old.err.count("mixed_precision = 'fp16'") == 1 and "Invalid dtype: float16" in old.err
    main = lerobot_preset(write_preset, tmp_path, name="new", policy=policy, precision="fp16", api="main")
    argv = json.loads(gw("preview", "--trust", main, "--format", "json").out)["argv"]
    assert "--accelerator.mixed_precision=fp16" in argv and not any(a.startswith("--policy.dtype") for a in argv)
    bf16 = lerobot_preset(write_preset, tmp_path, name="bf16", policy=policy, api="main")
    assert "--policy.dtype=bfloat16" in json.loads(gw("preview", "--trust", bf16, "--format", "json").out)["argv"]


def log_line(step: int, lr: float) -> str:
    """lerobot-train's periodic line as 0.6.1 prints it (tests/data/logs/lerobot061_act_2proc_cpu.log)."""
    return (
        f"INFO 2026-11-29 19:31:01 ot_train.py:641 step:{step} smpl:{step * 8} ep:0 epch:0.12 loss:0.158 grdn:9.731 "
        f"lr:{lr:.1e} updt_s:1.491 data_s:0.045"
    )


XVLA_LOGGED_LR = r"""
import json, sys, torch
from lerobot.policies.xvla.configuration_xvla import XVLAConfig
steps, log_freq = json.loads(sys.stdin.read())
config = XVLAConfig()
named = {name: torch.nn.Parameter(torch.zeros(1)) for name in ("vlm.w", "soft_prompts.w", "head.w")}
optimizer = config.get_optimizer_preset().build(named)
scheduler = config.get_scheduler_preset().build(optimizer, steps)
after, means = [], []
for step in range(1, steps + 1):  # lerobot_train.py: update_policy steps both, then logs param_groups[0]'s lr
    optimizer.step()
    scheduler.step()
    after.append(optimizer.param_groups[0]["lr"])
    if step % log_freq == 0:  # the AverageMeter is reset after each logged line
        means.append(sum(after[-log_freq:]) / log_freq)
print(json.dumps(means))
"""


@pytest.mark.lerobot
@pytest.mark.parametrize("variable, parser", ENVS)
def test_xvla_plans_the_vlm_at_a_tenth_and_the_lr_check_reads_the_logged_group(
    gw, write_preset, tmp_path, variable, parser
):
    """Issue 18 item 13: XVLAAdamWConfig.build (lerobot/optim/optimizers.py, 0.6.1 and main at 7427f31) trains the
    VLM at lr x 0.1 as param_groups[0], which lerobot_train.update_policy logs. Every line of a 4,000-step run, each
    the mean lr of the last 200 steps from XVLA's own optimizer and scheduler presets (its warmup shrunk to the run),
    passes the lr check; the same line at the full lr does not."""
    preset = lerobot_preset(write_preset, tmp_path, policy="xvla", device="cpu", precision='"no"', steps=4000)
    plan = gw("plan", "--trust", preset, "--json").json()
    assert any(
        "X-VLA trains the VLM (Florence-2) at 0.1x the lr (1e-05; the rest at 0.0001)" in n for n in plan["notes"]
    )
    expect = expectations(prepare_run(load_preset(preset), check=False))
    assert expect.lr == pytest.approx(1e-5)
    run = subprocess.run(
        [lerobot_python(variable), "-c", XVLA_LOGGED_LR],
        input=json.dumps([4000, 200]),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": extras(), **OFFLINE},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    logged = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(logged) == 20 and max(logged) < 1.01e-5 and logged[-1] < logged[5], "a tenth, warmed up and decaying"
    monitor = JobMonitor(expect, get_trainer("lerobot"))
    events = [e for n, lr in enumerate(logged, 1) for e in monitor.feed(log_line(200 * n, lr))]
    assert [e.kind for e in events] == []
    wrong = JobMonitor(expect, get_trainer("lerobot"))
    assert [e.kind for e in wrong.feed(log_line(1000, logged[4] * 10))] == ["lr_mismatch"], "the check still checks"


def test_a_rank_that_died_on_a_missing_extra_is_named_by_its_own_exception():
    """Issue 18 item 15, on the real log of lerobot-train 0.6.1 (diffusion, 2 CPU processes, no diffusers):
    torchcodec's caught `OSError: libavutil.so.56...` chains print bare at import, the rank's own ImportError comes
    with torch's `[rank0]:` prefix (distributed_c10d._distributed_excepthook)."""
    monitor = JobMonitor(
        Expectations(steps=4, lr=1e-4, warmup_steps=500, effective_batch=4, world_size=2, hang_timeout_s=30.0),
        get_trainer("lerobot"),
    )
    events = []
    for line in LogTail(DATA / "logs" / "lerobot061_diffusion_without_diffusers.log").read().lines:
        events += monitor.feed(line)
    failed = [e for e in events if e.kind == "rank_failed"]
    assert [e.title for e in failed] == [
        "rank 0 failed (exit code 1): ImportError: 'diffusers' is required but not installed. Install it with: pip "
        "install 'lerobot[diffusion]' (or uv pip install 'lerobot[diffusion]')"
    ]


@pytest.mark.parametrize(
    "steps, said",
    [
        (300, "this 300-step run never reaches lr 0.0001 and ends at 6e-05"),
        (2000, "diffusion warms up over 500 of the run's 2,000 steps"),
        (20_000, None),
    ],
)
def test_diffusions_warmup_is_not_shortened_and_the_plan_says_so(gw, write_preset, tmp_path, steps, said):
    """Issue 18 item 16: DiffuserSchedulerConfig.build passes num_warmup_steps (500, configuration_diffusion.py) to
    diffusers' get_scheduler("cosine") unchanged whatever --steps is (lerobot/optim/schedulers.py, 0.6.1 and main at
    7427f31; diffusers 0.39 optimization.py: lr_lambda = step / num_warmup_steps below it). The real schedule's
    warmup is read back by the lerobot-marked check test."""
    preset = lerobot_preset(write_preset, tmp_path, policy="diffusion", steps=steps)
    plan, _ = make_plan(load_preset(preset))
    assert plan.warmup_steps == 500 and plan.warmup_source == "trainer default"
    told = [p.paragraph() for p in plan.problems if "warms up over 500" in p.message]
    if said is None:
        assert told == []
    else:
        assert len(told) == 1 and said in told[0] and "optim.warmup_ratio" in told[0]


@pytest.mark.parametrize("steps", [333, 10_001, 29_999])
def test_groot_through_lerobot_gets_a_warmup_ratio_that_rounds_to_the_planned_warmup(gw, write_preset, tmp_path, steps):
    """GrootConfig.get_scheduler_preset takes num_warmup_steps=math.ceil(self.max_steps * self.warmup_ratio)
    (lerobot/policies/groot/configuration_groot.py, 0.6.1 and main at 7427f31): a ratio rounded to 6 digits gave
    502 for a planned 501 at 10,001 steps (the same as Isaac-GR00T's own, issue 18 item 2)."""
    preset = lerobot_preset(write_preset, tmp_path, policy="groot", steps=steps)
    text = preset.read_text().replace("optim: {", "optim: {warmup_ratio: 0.05, ")
    argv = json.loads(gw("preview", "--trust", write_preset(text), "--format", "json").out)["argv"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in argv if a.startswith("--policy."))
    assert int(flags["policy.max_steps"]) == steps
    assert math.ceil(steps * float(flags["policy.warmup_ratio"])) == math.ceil(0.05 * steps)
