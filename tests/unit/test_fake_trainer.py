"""Adding a trainer touches the files ARCHITECTURE.md's checklist lists and no more: a sixth trainer, registered the
way the five are (its name in model/trainer_names.TRAINERS, its options model in model/trainer_options.OPTIONS, its
TRAINER in gpuwizard.trainers.<name>.trainer), is named by every list of trainers without another edit."""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path

import pytest
from pydantic import Field

from gpuwizard.core import paths
from gpuwizard.core.errors import UserError
from gpuwizard.model import trainer_names
from gpuwizard.model.catalog import load_catalog
from gpuwizard.model.preset import parse_preset, preset_schema
from gpuwizard.model.trainer_options import OPTIONS, TrainerOptions
from gpuwizard.trainers import envs
from gpuwizard.trainers.base import Trainer
from gpuwizard.trainers.registry import get_trainer

TRAINERS_DIR = Path(__file__).resolve().parents[2] / "src" / "gpuwizard" / "trainers"
CATALOG = """\
tiny:
  title: Tiny
  vram: {full_gb: 1, at_batch: 8}
  trainers: [fake]
  default_lr: {fake: 1.0e-3}
"""


class FakeOptions(TrainerOptions):
    """The fake trainer's one knob."""

    package = "pytest"
    """A distribution the test's own interpreter has, so that asking it finds the fake trainer there."""

    knob: int = Field(1, gt=0, description="A knob.")


class FakeTrainer(Trainer):
    name = "fake"
    title = "A sixth trainer"
    batch_flag = "--batch"
    batch_meaning = "--batch is per process."
    Options = FakeOptions
    any_policy = True


@pytest.fixture
def fake(monkeypatch):
    """The sixth trainer, registered through the same three places as the five (monkeypatched, so undone after)."""
    module = types.ModuleType("gpuwizard.trainers.fake.trainer")
    module.TRAINER = FakeTrainer()
    monkeypatch.setattr(trainer_names, "TRAINERS", (*trainer_names.TRAINERS, "fake"))
    monkeypatch.setitem(OPTIONS, "fake", FakeOptions)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    get_trainer.cache_clear()
    load_catalog.cache_clear()
    yield module.TRAINER
    get_trainer.cache_clear()
    load_catalog.cache_clear()


def write_catalog() -> None:
    paths.config_dir().mkdir(parents=True, exist_ok=True)
    (paths.config_dir() / "policies.yaml").write_text(CATALOG)
    load_catalog.cache_clear()


def test_the_command_line_offers_it(fake, gw):
    result = gw("envs", "--help")
    assert result.code == 0 and "--trainer {lerobot,groot,openpi,hf,demo,fake}" in result.out


def test_the_environment_table_asks_for_its_distribution_and_finds_it(fake):
    assert envs.distributions()["fake"] == "pytest"
    found = envs.ask(Path(sys.executable), "this test's interpreter")
    assert found.error is None and found.trainers["fake"] == pytest.__version__
    assert envs.envs_for("fake", [found]) == [found]


def test_the_schema_types_its_options_and_names_it(fake):
    schema = preset_schema()
    branch = next(b for b in schema["allOf"] if b["if"]["properties"]["trainer"]["const"] == "fake")
    assert branch["then"]["properties"]["trainer_options"]["$ref"] == "#/$defs/FakeOptions"
    assert schema["$defs"]["FakeOptions"]["properties"]["knob"]["description"] == "A knob."
    assert schema["properties"]["trainer"]["description"].endswith("| demo | fake")


def test_the_catalog_and_a_preset_take_it(fake, tmp_path):
    write_catalog()
    assert load_catalog()["tiny"].trainers == ["fake"]
    data = {"name": "f", "trainer": "fake", "policy": "tiny", "dataset": {"repo_id": "me/x"}}
    preset = parse_preset({**data, "trainer_options": {"knob": 3}}, "here")
    assert FakeOptions.of(preset).knob == 3 and preset.trainer_options == {"knob": 3}
    assert get_trainer("fake") is fake and fake.package == "pytest"
    with pytest.raises(UserError, match="trainer_options.knbo: unknown key; did you mean knob"):
        parse_preset({**data, "trainer_options": {"knbo": 3}}, "here")

    from gpuwizard.planning.plan import trainers_for

    assert "fake" in trainers_for(load_catalog()["act"]), "it trains any policy, as hf does"


def test_without_it_registered_the_catalog_refuses_its_name(gw):
    """The same catalog, the fake trainer not registered: the names are the registry's, not a copy that takes any."""
    write_catalog()
    with pytest.raises(UserError, match="tiny.trainers.0 = 'fake': unknown trainer"):
        load_catalog()
    load_catalog.cache_clear()
    assert "fake" not in gw("envs", "--help").out


def test_every_trainer_is_registered_the_same_way():
    """Each name has its options model and a folder whose __init__.py only exports trainer.py's TRAINER and class."""
    assert tuple(OPTIONS) == trainer_names.trainer_names()
    folders = sorted(p.name for p in TRAINERS_DIR.iterdir() if (p / "trainer.py").is_file())
    assert folders == sorted(trainer_names.trainer_names())
    for name in trainer_names.trainer_names():
        trainer = get_trainer(name)
        assert trainer.Options is OPTIONS[name] and trainer.package == OPTIONS[name].package
        _, imported, listed = ast.parse((TRAINERS_DIR / name / "__init__.py").read_text()).body
        assert isinstance(imported, ast.ImportFrom) and isinstance(listed, ast.Assign), f"{name}/__init__.py"
        assert imported.module == f"gpuwizard.trainers.{name}.trainer"
        exported = sorted(["TRAINER", type(trainer).__name__])
        assert sorted(alias.name for alias in imported.names) == sorted(ast.literal_eval(listed.value)) == exported
