"""GR00T's --data_yaml (issue 38 item 8) against the pinned checkout's own tyro parser (GPUWIZARD_GROOT_DIR: Isaac-GR00T
main 626af89 and its venv). Upstream, gr00t/experiment/launch_finetune_multi.py (NVIDIA/Isaac-GR00T af5de1a) parses a
MultiFinetuneConfig whose `data_yaml: str` replaces FinetuneConfig's dataset_path and embodiment_tag; the pin has no
such script, and its FinetuneConfig (gr00t/configs/finetune_config.py) no data_yaml field. Before: the plan passed
both forms, and tyro refused the command only when the run started."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuwizard.model import trust
from gpuwizard.model.preset import with_field
from gpuwizard.model.preset_files import load_preset
from gpuwizard.planning.plan import build_command, make_plan
from gpuwizard.trainers.registry import get_trainer
from support.trainers import parse_many, trainer_env

pytestmark = pytest.mark.groot


def in_env(groot: Path, checkout: Path, **fields):
    """The shipped groot-n17-8gpu preset pointed at `checkout` and the GR00T interpreter, with fields changed."""
    preset = load_preset("groot-n17-8gpu")
    fields = {"launch.python": str(groot / "venv" / "bin" / "python"), "launch.workdir": str(checkout)} | fields
    for dotted, value in fields.items():
        preset = with_field(preset, dotted, value)
    trust.grant_for_session(preset)
    return preset


def parsed(groot: Path, checkout: Path, preset) -> dict:
    """The command gpuwizard builds, through check_groot.py's real tyro FinetuneConfig in `checkout`."""
    _, ctx = make_plan(preset)
    query = get_trainer("groot").trainer_query(ctx, build_command(ctx))
    assert not isinstance(query, str), query
    [answer] = parse_many(groot / "venv" / "bin" / "python", "check_groot", [query.argv[2:]], cwd=checkout)
    return answer


def test_data_yaml_is_refused_in_the_plan_where_the_installed_launcher_has_no_such_field():
    groot = Path(trainer_env("GPUWIZARD_GROOT_DIR", "an Isaac-GR00T checkout (Isaac-GR00T/) and its venv/"))
    checkout = groot / "Isaac-GR00T"
    assert not (checkout / "gr00t" / "experiment" / "launch_finetune_multi.py").exists()
    with_yaml = in_env(groot, checkout, **{"launch.extra_args": ["--data_yaml", "mix.yaml"]})
    answer = parsed(groot, checkout, with_yaml)
    assert answer["status"] == "refused" and "--data-yaml" in answer["error"]  # tyro: "Unrecognized options"
    plan, _ = make_plan(with_yaml)
    [refusal] = plan.errors
    assert refusal.field == "launch.extra_args" and "launch_finetune_multi.py" in refusal.paragraph()
    multi = in_env(groot, checkout, **{"trainer_options.script": "gr00t/experiment/launch_finetune_multi.py"})
    plan, _ = make_plan(multi)
    [refusal] = plan.errors
    assert refusal.field == "trainer_options.script" and "--data_yaml" in refusal.paragraph()


def test_a_launcher_whose_config_has_data_yaml_is_given_it(tmp_path):
    groot = Path(trainer_env("GPUWIZARD_GROOT_DIR", "an Isaac-GR00T checkout (Isaac-GR00T/) and its venv/"))
    checkout = tmp_path / "Isaac-GR00T"
    shutil.copytree(groot / "Isaac-GR00T", checkout)
    config = checkout / "gr00t" / "configs" / "finetune_config.py"
    config.write_text(config.read_text() + '\n    data_yaml: str = ""\n    """A YAML of datasets."""\n')
    preset = in_env(groot, checkout, **{"launch.extra_args": ["--data_yaml", "mix.yaml"]})
    plan, _ = make_plan(preset)
    assert plan.errors == []
    assert parsed(groot, checkout, preset)["status"] == "parsed"
