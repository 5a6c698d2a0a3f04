"""`gpuwizard check` and the check before every launch, on the demo trainer's own argparse parser
(gpuwizard/demo/train.py parse_args), run for real in the training interpreter by
gpuwizard/trainers/check/scripts/check_demo.py."""

from __future__ import annotations

import json
import os
import sys

from gpuwizard.model.preset_files import load_preset
from gpuwizard.planning.plan import build_command, make_plan
from gpuwizard.trainers import check as trainercheck
from gpuwizard.trainers.check import compare, parse_output
from gpuwizard.trainers.check.envcache import EnvCache, interpreter
from gpuwizard.trainers.registry import check_command, get_trainer

PRESET = """\
version: 1
name: {name}
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 4, grad_accum: 2}}
optim: {{lr: 1.0e-3, steps: 40}}
scaling: {{rule: linear_lr, reference_gpus: 1}}
mixed_precision: "no"
output_dir: {root}/out-{name}
{extra}
"""


def preset_file(tmp_path, name="demo-check", extra=""):
    path = tmp_path / f"{name}.yaml"
    path.write_text(PRESET.format(name=name, root=tmp_path, extra=extra))
    return path


def test_check_accepts_the_planned_command_with_the_trainers_own_values(gw, tmp_path):
    result = gw("check", "--trust", preset_file(tmp_path), "--json")
    assert result.code == 0, result.err
    check = result.json()
    assert check["status"] == "accepted"
    assert check["parser"] == "gpuwizard.demo.train"
    # linear_lr against 1 GPU: the effective batch doubles, so the lr the trainer parses is doubled too
    assert check["values"] == {"per_device_batch": 4, "grad_accum": 2, "lr": 2e-3, "steps": 40, "warmup_steps": 2}
    text = gw("check", "--trust", preset_file(tmp_path))
    assert text.code == 0
    assert "accepted by gpuwizard.demo.train's own parser: batch 4 per process, accumulation 2, lr 0.002" in text.out
    assert text.out.rstrip().endswith("as planned")


def test_a_refusal_by_the_trainers_parser_is_quoted_and_blocks_the_launch(gw, tmp_path):
    path = preset_file(tmp_path, extra="launch: {extra_args: ['--no-such-flag']}")
    result = gw("check", "--trust", path)
    assert result.code == 2
    assert "refuses this command" in result.err and "unrecognized arguments: --no-such-flag" in result.err
    assert "Traceback" not in result.err
    run = gw("run", "--trust", path, "--headless")
    assert run.code == 2
    assert "unrecognized arguments: --no-such-flag" in run.err
    assert not (tmp_path / "data" / "runs").exists() or not list((tmp_path / "data" / "runs").iterdir())


def test_a_value_that_differs_from_the_plan_names_both_values_and_the_field(tmp_path):
    """The trainer's real reading of the 2-GPU command, compared with the plan of the 1-GPU one."""
    preset = load_preset(str(preset_file(tmp_path)))
    _, ctx2 = make_plan(preset)
    _, ctx1 = make_plan(preset, gpus=1)
    trainer = get_trainer("demo")
    real = trainer.trainer_query(ctx2, build_command(ctx2))
    import subprocess

    out = subprocess.run(real.argv, capture_output=True, text=True, timeout=120, cwd=real.cwd)
    answer = parse_output(out.stdout)
    assert answer is not None and answer.status == "parsed"
    planned_for_one = trainer.trainer_query(ctx1, build_command(ctx1))
    check = compare(answer, planned_for_one, cached=False, seconds=0.0)
    assert check.status == "mismatch" and check.blocks
    # linear_lr adds a warmup on 2 GPUs that the 1-GPU plan does not have
    assert [(m.key, m.planned, m.trainer) for m in check.mismatches] == [("lr", 1e-3, 2e-3), ("warmup_steps", 0, 2)]
    paragraph = check.problems()[0].paragraph("demo-check")
    assert paragraph.startswith(
        "demo-check: optim.lr: gpuwizard.demo.train will use lr 0.002 where the plan says 0.001"
    )
    assert "Fix:" in paragraph


def test_the_answer_is_remembered_until_the_environment_changes(tmp_path, monkeypatch):
    preset = load_preset(str(preset_file(tmp_path)))
    _, ctx = make_plan(preset)
    spec = build_command(ctx)
    first = check_command(ctx, spec)
    again = check_command(ctx, spec)
    assert (first.cached, again.cached) == (False, True)
    assert again.values == first.values
    with monkeypatch.context() as patched:  # an upgraded gpuwizard whose probe reads the trainer differently
        patched.setattr(trainercheck, "scripts_stamp", lambda: "another probe")
        assert check_command(ctx, spec).cached is False
    other = build_command(make_plan(preset, gpus=1)[1])
    assert check_command(make_plan(preset, gpus=1)[1], other).cached is False  # another argv, another answer
    watched = tmp_path / "site-packages-stand-in"
    watched.mkdir()
    cache, exe = EnvCache("stamp-test"), interpreter(sys.executable)
    cache.put("k", exe, {"x": 1}, [str(watched)])
    assert cache.get("k", exe) == {"x": 1}
    os.utime(watched, ns=(1, 1))  # a pip install or a branch switch touches the folders it watches
    assert cache.get("k", exe) is None


def test_a_second_identical_check_from_another_pane_or_login_is_answered_from_the_cache(gw, tmp_path, monkeypatch):
    """Issue 39 item 3: three identical `check` calls in a row each asked the parser again (20-27 s each): the key
    hashed the whole environment, and a new tmux pane or SSH login differs in variables no parser reads."""
    path = preset_file(tmp_path)
    calls = []
    for pane, login in (("%1", "10.0.0.7 50111 10.0.0.1 22"), ("%4", "10.0.0.7 50388 10.0.0.1 22")):
        monkeypatch.setenv("TMUX_PANE", pane)
        monkeypatch.setenv("SSH_CONNECTION", login)
        monkeypatch.setenv("OLDPWD", f"/home/someone/{pane}")
        result = gw("check", "--trust", path, "--json")
        assert result.code == 0, result.err
        calls.append(result.json()["cached"])
    assert calls == [False, True]
    remembered = json.loads((tmp_path / "data" / "cache" / f"{trainercheck.CACHE}.json").read_text())
    assert len(remembered) == 1
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a variable a trainer reads is still part of the key
    assert gw("check", "--trust", path, "--json").json()["cached"] is False


def test_an_interpreter_without_the_trainer_is_not_checked_and_says_so(gw, tmp_path):
    bare = tmp_path / "bare"
    import venv

    venv.EnvBuilder(with_pip=False).create(bare)
    path = preset_file(tmp_path, extra=f"launch: {{python: {bare}/bin/python}}")
    result = gw("check", "--trust", path)
    assert result.code == 0
    assert "not checked: no training environment here (gpuwizard is not installed in this interpreter" in result.out


def test_run_keeps_the_trainers_reading_in_the_run_folder(gw, tmp_path):
    result = gw("run", "--trust", preset_file(tmp_path), "--headless", "--gpus", "1")
    assert result.code == 0, result.err
    assert "accepted by gpuwizard.demo.train's own parser" in result.out
    (run,) = (tmp_path / "data" / "runs").iterdir()
    record = json.loads((run / "trainer-check.json").read_text())
    assert record["status"] == "accepted" and record["values"]["steps"] == 40
