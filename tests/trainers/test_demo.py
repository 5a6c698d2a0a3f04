"""Issue 27: the demo trainer takes a seed (a sweep's --seeds go there): the option reaches the command as --seed
and the demo's own parser reads it (gpuwizard/demo/train.py, which imports torch: a trainer's test, not a unit's)."""

from __future__ import annotations

from gpuwizard.demo.train import parse_args
from gpuwizard.gpus.inventory import read_inventory
from gpuwizard.model.preset import with_field
from gpuwizard.model.preset_files import load_preset
from gpuwizard.planning.plan import build_command, plan_here
from support.data import noise_truth


def command_of(seed: int | None) -> list[str]:
    preset = load_preset("demo-cpu")
    if seed is not None:
        preset = with_field(preset, "trainer_options.seed", seed)
    _, ctx = plan_here(preset, read_inventory())
    return build_command(ctx).argv


def test_the_seed_option_reaches_the_command_and_the_demo_parser():
    assert not any(a.startswith("--seed") for a in command_of(None)), "the default keeps the command as it was"
    argv = command_of(2)
    assert "--seed=2" in argv
    flags = argv[argv.index("gpuwizard.demo.train") + 1 :]
    assert parse_args(flags).seed == 2


def test_the_noise_tasks_answer_the_fast_loop_uses_is_the_demos_own():
    from gpuwizard.demo.noise import closed_form

    for dim, sigma, offset in ((4, 1.0, 0.25), (4, 10**0.5, 0.25), (8, 0.3, 1.5)):
        assert noise_truth(dim, sigma, offset) == closed_form(dim, sigma, offset)
