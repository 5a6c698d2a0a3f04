"""What the installed LeRobot accepts (issue 38 items 1 and 4), asked of its own classes: PreTrainedConfig's choice
registry (lerobot/configs/policies.py, filled by each policy's @register_subclass) and TrainPipelineConfig's fields
(lerobot/configs/train.py), in 0.6.1 (GPUWIZARD_LEROBOT_PYTHON) and main at 7427f31 (GPUWIZARD_LEROBOT_MAIN_PYTHON).
Before: a registered type the catalog lacks (vqbet, tdmpc, ...) was refused, and --wandb.enable was added to every
command, which a LeRobot without `wandb` in its config (0.7.0: --trackio.*) refuses."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuwizard.core.errors import UserError
from gpuwizard.model import trust
from gpuwizard.model.catalog import load_catalog
from gpuwizard.model.preset import parse_preset
from gpuwizard.planning.plan import build_command, make_plan
from gpuwizard.trainers.check import ask
from gpuwizard.trainers.registry import get_trainer
from support.trainers import trainer_env

pytestmark = pytest.mark.lerobot

ENVS = [pytest.param("GPUWIZARD_LEROBOT_PYTHON", id="0.6.1"), pytest.param("GPUWIZARD_LEROBOT_MAIN_PYTHON", id="main")]
REGISTRY = "from lerobot.configs.policies import PreTrainedConfig as P; import lerobot.scripts.lerobot_train as t\n"
REGISTRY += "t.register_third_party_plugins(); print(' '.join(sorted(P.get_known_choices())))"


def preset_of(python: str, policy: str, **changes):
    """A CPU preset of `policy`, set after validation (the preset's own check knows only the catalog)."""
    data = {
        "version": 1,
        "name": "lerobot-accepts",
        "trainer": "lerobot",
        "policy": "act",
        "dataset": {"repo_id": "me/pick"},
        "hardware": {"gpus": 2, "device": "cpu"},
        "batch": {"size": 8},
        "optim": {"steps": 100},
        "scaling": {"rule": "none", "reference_gpus": 2},
        "launch": {"python": python},
    } | changes
    preset = parse_preset(data, "test").model_copy(update={"policy": policy})
    trust.grant_for_session(preset)  # --trust: its interpreter may be asked
    return preset


@pytest.mark.parametrize("variable", ENVS)
def test_a_policy_the_trainer_registers_is_planned_and_a_name_neither_knows_is_refused(variable):
    python = trainer_env(variable, "a LeRobot environment")
    said = subprocess.run([python, "-c", REGISTRY], capture_output=True, text=True, timeout=300, check=True)
    registered = said.stdout.split()
    missing = [name for name in registered if name not in load_catalog()]
    assert {"vqbet", "tdmpc"} <= set(missing), missing
    for name in missing:
        plan, ctx = make_plan(preset_of(python, name))
        wanted = [] if ctx.policy.default_lr else ["optim.lr"]  # a config without optimizer_lr (gaussian_actor)
        assert [p.field for p in plan.errors] == wanted, (name, plan.errors)
        assert plan.fits.fits is None and not ctx.policy.memory_known
        [said_policy] = [p for p in plan.problems if p.field == "policy"]
        assert "unknown: probe it" in said_policy.paragraph()
        assert f"--policy.type={name}" in build_command(ctx).argv
    plan, _ = make_plan(preset_of(python, "vqbet"))
    assert plan.base_lr == 1e-4  # VQBeTConfig.optimizer_lr (policies/vqbet/configuration_vqbet.py)
    with pytest.raises(UserError) as refused:
        make_plan(preset_of(python, "vqbett"))
    [paragraph] = [p.paragraph() for p in refused.value.problems]
    assert "vqbett" in paragraph and all(name in paragraph for name in registered)


def renamed_config_site(python: str, site: Path) -> None:
    """A copy of the lerobot package whose TrainPipelineConfig calls its tracker `trackio`, as 0.7's does."""
    source = subprocess.run(
        [python, "-c", "import lerobot, os; print(os.path.dirname(lerobot.__file__))"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    shutil.copytree(source, site / "lerobot", ignore=shutil.ignore_patterns("__pycache__"))
    train = site / "lerobot" / "configs" / "train.py"
    text = train.read_text()
    assert "    wandb: WandBConfig" in text
    train.write_text(text.replace("    wandb: WandBConfig", "    trackio: WandBConfig"))


@pytest.mark.parametrize("variable", ENVS)
def test_a_flag_the_installed_config_lacks_is_left_out_with_a_note(variable, tmp_path, monkeypatch):
    python = trainer_env(variable, "a LeRobot environment")
    _, ctx = make_plan(preset_of(python, "act"))
    assert "--wandb.enable=false" in build_command(ctx).argv  # the config as shipped has wandb
    renamed_config_site(python, tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    plan, ctx = make_plan(preset_of(python, "act"))
    spec = build_command(ctx)
    assert not [arg for arg in spec.argv if arg.startswith("--wandb.")]
    assert any("--wandb.enable=false left out" in p.paragraph() for p in plan.notes), plan.notes
    assert not plan.errors
    query = get_trainer("lerobot").trainer_query(ctx, spec)
    assert not isinstance(query, str)
    answer, _, _ = ask(query, dict(os.environ) | spec.env)
    assert answer.status == "parsed", answer.error  # the renamed config's own draccus parser takes the command
    with_wandb = [*query.argv, "--wandb.enable=false"]
    refused, _, _ = ask(type(query)(argv=with_wandb, expected={}), dict(os.environ) | spec.env)
    assert refused.status == "refused" and "wandb" in (refused.error or ""), refused.error
