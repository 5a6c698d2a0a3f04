"""Issue 27: a sweep's grid, from --set and --seeds or a sweep file, expands to full presets; every bad grid is
refused in one paragraph per mistake before anything starts (no sweep folder, no process)."""

from __future__ import annotations

import json

import pytest

from gpuwizard.core import paths
from gpuwizard.core.errors import UserError
from gpuwizard.model.preset_files import load_preset
from gpuwizard.model.sweep import expand, parse_sets
from gpuwizard.runs.sweeps import sweeps_dir
from support.data import replay
from support.presets import demo_preset


def refused(result) -> str:
    """The command refused the grid, said it in paragraphs without a traceback, and started nothing."""
    assert result.code == 2, result.out + result.err
    assert "Traceback" not in result.err and result.err.strip()
    assert not sweeps_dir().exists(), "nothing may start before the grid is accepted"
    return result.err


def test_the_grid_expands_to_every_combination_with_its_seed():
    runs = expand(load_preset("demo-cpu"), parse_sets(["optim.lr=1e-4,2e-4", "batch.size=8,16"]), seeds=3)
    assert len(runs) == 12
    seen = {(r.preset.optim.lr, r.preset.batch.size, r.preset.options.seed) for r in runs}
    assert len(seen) == 12 and {s for _, _, s in seen} == {0, 1, 2}
    assert {lr for lr, _, _ in seen} == {1e-4, 2e-4}, "1e-4 reads as a number, not as YAML's text"


def test_an_unknown_field_names_the_closest(gw):
    err = refused(gw("sweep", "demo-cpu", "--set", "optim.lrr=1e-4,2e-4"))
    assert "grid.optim.lrr" in err and "did you mean optim.lr?" in err
    err = refused(gw("sweep", "demo-cpu", "--set", "trainer_options.sed=1,2"))
    assert "did you mean trainer_options.seed?" in err


def test_fields_every_run_shares_or_the_scheduler_chooses_are_refused(gw):
    assert "same for every run" in refused(gw("sweep", "demo-cpu", "--set", "trainer=demo,hf"))
    assert "places each run" in refused(gw("sweep", "demo-cpu", "--set", "hardware.devices=[0],[1]"))


def test_a_value_the_preset_refuses_is_named(gw):
    err = refused(gw("sweep", "demo-cpu", "--set", "batch.size=8,0"))
    assert "batch.size = 0" in err and "Fix:" in err and len(err.strip().splitlines()) == 1


def test_an_empty_grid_and_a_field_without_values(gw):
    assert "the grid is empty" in refused(gw("sweep", "demo-cpu"))
    assert "has no values" in refused(gw("sweep", "demo-cpu", "--set", "optim.lr="))


def test_ten_thousand_combinations_are_refused(gw):
    lrs = ",".join(f"{i}e-5" for i in range(1, 101))
    sizes = ",".join(str(i) for i in range(1, 101))
    err = refused(gw("sweep", "demo-cpu", "--set", f"optim.lr={lrs}", "--set", f"batch.size={sizes}"))
    assert "10,000 combinations" in err and "256" in err


def test_seeds_need_a_trainer_seed_option():
    preset = load_preset("example-hf")
    with pytest.raises(UserError) as caught:
        expand(preset, {}, seeds=2)
    assert "--seeds" in caught.value.paragraph() and "no seed option" in caught.value.paragraph()


def test_a_plan_error_of_any_run_refuses_the_sweep(gw, monkeypatch):
    """The CPU run would start; the GPU run has no GPU on this (recorded) machine: nothing starts."""
    replay(monkeypatch, "no_driver")
    demo_preset("sw-plan", hardware="{gpus: 1, device: cpu}")
    err = refused(gw("sweep", "sw-plan", "--set", "hardware.device=cpu,cuda"))
    assert "GPU" in err, err


def test_a_sweep_file_is_validated_like_a_preset(gw, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\npreset: demo-cpu\ngrid: {optim.lr: [1.0e-4]}\nseed: 2\n")
    assert "seed" in refused(gw("sweep", "--file", bad))
    empty = tmp_path / "empty.yaml"
    empty.write_text("version: 1\npreset: demo-cpu\ngrid: {optim.lr: []}\n")
    assert "grid.optim.lr" in refused(gw("sweep", "--file", empty))
    schema = gw("sweep", "schema")
    assert schema.code == 0 and json.loads(schema.out)["title"] == "gpuwizard sweep"
    assert "grid" in json.loads(schema.out)["properties"]


def test_an_untrusted_preset_is_refused_without_trust(gw, tmp_path):
    foreign = tmp_path / "foreign.yaml"
    text = (paths.shipped_presets_dir() / "demo-cpu.yaml").read_text().replace("name: demo-cpu", "name: foreign")
    foreign.write_text(text + "launch:\n  env: {LD_PRELOAD: /tmp/x.so}\n")
    err = refused(gw("sweep", foreign, "--set", "optim.lr=1e-4,2e-4"))
    assert "PRESET" in err and "--trust" in err and "sweep" in err


def test_a_fixed_output_folder_is_refused(gw, tmp_path):
    demo_preset("sw-fixed", extra=f"output_dir: {tmp_path}/out", hardware="{gpus: 1, device: cpu}")
    err = refused(gw("sweep", "sw-fixed", "--set", "optim.lr=1e-4,2e-4"))
    assert "output_dir" in err and "null" in err


def test_save_best_is_refused_until_the_sweep_has_a_best_run(gw):
    """A sweep record whose runs are still queued (no scheduler): --save-best says why in one paragraph, saves
    nothing; on another action it says where it belongs; runs --sweep of an unknown id names it."""
    import time

    from gpuwizard.runs.sweeps import Sweep, SweepRun, write_sweep

    folder = sweeps_dir() / "20261202-000000-demo-cpu-abcd"
    folder.mkdir(parents=True)
    runs = [
        SweepRun(index=i, values={"optim.lr": lr}, preset_file=f"runs/{i:03d}.yaml", processes=1, device="cpu")
        for i, lr in enumerate((1e-4, 2e-4))
    ]
    write_sweep(
        folder,
        Sweep(
            sweep_id=folder.name,
            preset="demo-cpu",
            source="demo-cpu",
            created=time.time(),
            grid={"optim.lr": [1e-4, 2e-4]},
            workdir=str(folder),
            runs=runs,
        ),
    )
    early = gw("sweep", "status", folder.name, "--save-best", "kept")
    assert early.code == 2 and "--save-best" in early.err and "has not ended" in early.err, early.err
    assert "Traceback" not in early.err and not (paths.user_presets_dir() / "kept.yaml").exists()
    misplaced = gw("sweep", "resume", folder.name, "--save-best", "kept")
    assert misplaced.code == 2 and "sweep status" in misplaced.err
    listed = gw("runs", "--sweep", folder.name)
    assert listed.code == 0 and "no run of it has started yet" in listed.out, listed.out + listed.err
    unknown = gw("runs", "--sweep", "nope")
    assert unknown.code == 2 and "SWEEP_ID" in unknown.err and "nope" in unknown.err
