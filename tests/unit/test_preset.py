"""Preset validation, YAML I/O and lookup: bad input is one paragraph naming the field, value and fix."""

from __future__ import annotations

import os

import pytest

from gpuwizard.core import yamlio
from gpuwizard.core.errors import UserError
from gpuwizard.core.schema import updated
from gpuwizard.model.preset_files import find_preset, load_preset, load_preset_file, save_user_preset

GOOD = """\
version: 1
name: my-act
trainer: lerobot
policy: act
dataset: {repo_id: me/pick}
hardware: {gpus: 2}
batch: {size: 8}
optim: {lr: 1e-4, steps: 1000}
"""


def error_of(write_preset, text):
    with pytest.raises(UserError) as info:
        load_preset_file(write_preset(text))
    message = info.value.paragraph()
    assert "\n" not in message and "Traceback" not in message
    return message


def test_good_preset_loads_and_reads_1e_minus_4_as_a_number(write_preset):
    preset = load_preset_file(write_preset(GOOD))
    assert preset.optim.lr == pytest.approx(1e-4)
    assert preset.world_size == 2
    assert preset.scaling.rule == "none"


def test_malformed_yaml_names_the_line(write_preset):
    message = error_of(write_preset, GOOD.replace("trainer: lerobot", "trainer: [lerobot"))
    assert "malformed YAML" in message and "line" in message and "Fix:" in message


def test_unknown_key_names_its_dotted_path(write_preset):
    message = error_of(write_preset, GOOD.replace("batch: {size: 8}", "batch: {size: 8, sise: 4}"))
    assert "batch.sise" in message and "unknown key" in message and "Fix:" in message


def test_wrong_type_names_field_and_value(write_preset):
    message = error_of(write_preset, GOOD.replace("batch: {size: 8}", 'batch: {size: "eight"}'))
    assert "batch.size = 'eight'" in message and "whole number" in message


@pytest.mark.parametrize(
    "field, text", [("batch.size", "batch: {size: 0}"), ("batch.grad_accum", "batch: {size: 8, grad_accum: -2}")]
)
def test_non_positive_numbers_rejected(write_preset, field, text):
    message = error_of(write_preset, GOOD.replace("batch: {size: 8}", text))
    assert field in message and "must be 1 or more" in message and "use a positive number" in message


def test_non_positive_lr_and_steps(write_preset):
    assert "optim.lr = -0.001" in error_of(write_preset, GOOD.replace("lr: 1e-4", "lr: -1e-3"))
    assert "optim.steps = 0" in error_of(write_preset, GOOD.replace("steps: 1000", "steps: 0"))


def test_invalid_environment_variable_name(write_preset):
    message = error_of(write_preset, GOOD + "launch:\n  env:\n    1BAD-NAME: x\n")
    assert "launch.env" in message and "'1BAD-NAME'" in message


def test_unquoted_numeric_env_values_become_strings(write_preset):
    preset = load_preset_file(write_preset(GOOD + "launch:\n  env:\n    NCCL_P2P_DISABLE: 1\n"))
    assert preset.launch.env == {"NCCL_P2P_DISABLE": "1"}


def test_unknown_trainer_and_policy(write_preset):
    assert "unknown trainer" in error_of(write_preset, GOOD.replace("trainer: lerobot", "trainer: deepspeed"))
    assert "not in the policy catalog" in error_of(write_preset, GOOD.replace("policy: act", "policy: rt2"))


def test_trainer_options_are_typed_per_trainer(write_preset):
    message = error_of(write_preset, GOOD + "trainer_options: {num_workers: many}\n")
    assert "trainer_options.num_workers = 'many'" in message
    message = error_of(write_preset, GOOD + "trainer_options: {embodiment_tag: so100}\n")
    assert "trainer_options.embodiment_tag" in message and "unknown key" in message


def test_devices_must_match_and_the_endpoint_is_host_port(write_preset):
    """(A missing endpoint is the plan's to refuse: with SLURM the head node is found at run time; test_slurm.py.)"""
    assert "hardware.devices lists 1" in error_of(
        write_preset, GOOD.replace("hardware: {gpus: 2}", "hardware: {gpus: 2, devices: [0]}")
    )
    assert "host:port" in error_of(
        write_preset, GOOD.replace("hardware: {gpus: 2}", "hardware: {gpus: 2, nodes: 2, rdzv_endpoint: nohost}")
    )


@pytest.mark.parametrize(
    "change, expected",
    [
        ("hardware: {gpus: 2, device: tpu}", "hardware.device = 'tpu': must be one of auto, cuda, cpu"),
        ("hardware: {gpus: 2, devices: [0, -1]}", "hardware.devices.1 = -1: must be 0 or more"),
        ("hardware: {gpus: 2, devices: [1, 1]}", "hardware.devices = [1, 1]: device indices must be unique"),
        ("hardware: 2", "hardware = 2: must be a mapping"),
        (
            "hardware: {gpus: 2}\nlaunch: {env: {NCCL_DEBUG: true}}",
            "launch.env.NCCL_DEBUG = True: true/false is ambiguous",
        ),
        ("hardware: {gpus: 2}\nlaunch: {extra_args: --foo}", "launch.extra_args = '--foo': must be a list"),
        (
            "hardware: {gpus: 2}\ntrainer_options: {api: v0.5}",
            "trainer_options.api = 'v0.5': must be one of auto, v0.6, main",
        ),
    ],
)
def test_messages_name_the_path_the_value_and_the_allowed_values(write_preset, change, expected):
    assert expected in error_of(write_preset, GOOD.replace("hardware: {gpus: 2}", change))


def test_not_a_mapping(write_preset):
    assert "YAML mapping" in error_of(write_preset, "- just\n- a list\n")


def test_lookup_prefers_user_folder_then_shipped(tmp_path):
    shipped = load_preset("demo-cpu")
    assert shipped.trainer == "demo"
    mine = updated(shipped, description="my own demo")
    save_user_preset(mine)
    assert load_preset("demo-cpu").description == "my own demo"
    assert find_preset("demo-cpu").parent == tmp_path / "config" / "presets"


def test_unknown_preset_name_lists_choices():
    with pytest.raises(UserError) as info:
        load_preset("no-such-preset")
    assert "demo-cpu" in info.value.paragraph() and "did you mean" not in info.value.paragraph()
    with pytest.raises(UserError) as typo:
        load_preset("demo_cpu")
    assert "Fix: did you mean demo-cpu? Or use one of: demo-cpu, demo-gpu" in typo.value.paragraph()


def test_save_round_trips_and_is_atomic(tmp_path, monkeypatch):
    preset = load_preset("so100-act-ddp2")
    path = save_user_preset(preset)
    assert load_preset_file(path) == preset
    before = path.read_text()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        save_user_preset(updated(preset, description="changed"))
    assert path.read_text() == before
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, "preset.schema.json"]), (
        "no temporary file is left"
    )


def test_atomic_write_creates_folders(tmp_path):
    target = tmp_path / "a" / "b" / "c.yaml"
    yamlio.atomic_write(target, "x: 1\n")
    assert yamlio.load_file(target) == {"x": 1}


def test_presets_commands(gw, write_preset):
    listed = gw("presets", "list")
    assert listed.code == 0
    for name in (
        "demo-cpu",
        "so100-act-1gpu",
        "so100-act-ddp2",
        "smolvla-ddp4",
        "groot-n17-8gpu",
        "groot-n17-accum",
        "pi05-openpi-fsdp",
    ):
        assert name in listed.out
    shown = gw("presets", "show", "groot-n17-accum")
    assert shown.code == 0 and "grad_accum: 8" in shown.out
    assert gw("presets", "delete", "demo-cpu").code == 2
    save_user_preset(updated(load_preset("demo-cpu"), name="mine"))
    assert gw("presets", "delete", "mine").code == 0
    assert "mine" not in gw("presets").out


FIVE_MISTAKES = """\
version: 1
name: five-mistakes
trainer: lerobot
policy: act
dataset: {repo_id: me/pick}
hardware: {gpuz: 2}
batch: {size: 0}
optim: {lr: .inf, steps: ten}
scaling: {rule: linear}
trainer_options: {nmu_workers: 2}
"""


def test_a_preset_with_five_mistakes_names_all_five(gw, write_preset):
    result = gw("plan", write_preset(FIVE_MISTAKES))
    assert result.code == 2 and "Traceback" not in result.err
    paragraphs = result.err.strip().split("\n")
    assert len(paragraphs) == 6, result.err
    expected = [
        "hardware.gpuz: unknown key; did you mean gpus? Fix: rename it to gpus.",
        "batch.size = 0: must be 1 or more. Fix: use a positive number.",
        "optim.lr = inf: must be a finite number.",
        "optim.steps = 'ten': must be a whole number.",
        "scaling.rule = 'linear': must be one of none, linear_lr, sqrt_lr, divide_steps; did you mean linear_lr?",
        "trainer_options.nmu_workers: unknown key; did you mean num_workers?",
    ]
    for paragraph, wanted in zip(paragraphs, expected):
        assert wanted in paragraph and paragraph.startswith(str(write_preset(FIVE_MISTAKES)))


def test_an_unknown_key_far_from_any_lists_the_known_ones(write_preset):
    message = error_of(write_preset, GOOD.replace("batch: {size: 8}", "batch: {size: 8, colour: red}"))
    assert "batch.colour: unknown key. Fix: remove it; the keys here are size, grad_accum." in message


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("name: my-act", 'name: "my-act\\n"', "name = 'my-act\\n': use letters, digits"),
        (
            "batch: {size: 8}",
            'batch: {size: 8}\nlaunch: {extra_args: ["a\\0b"]}',
            "launch.extra_args.0 = 'a\\x00b': contains a NUL byte",
        ),
        (
            "batch: {size: 8}",
            'batch: {size: 8}\nlaunch: {env: {X: "a\\0b"}}',
            "launch.env.X = 'a\\x00b': contains a NUL byte",
        ),
        ("steps: 1000", "steps: 1000000000000", "optim.steps = 1000000000000: must be at most 1000000000"),
        ("lr: 1e-4", "lr: .nan", "optim.lr = nan: must be a finite number"),
    ],
)
def test_absurd_values_are_refused(write_preset, old, new, expected):
    assert expected in error_of(write_preset, GOOD.replace(old, new))


def test_duplicate_keys_are_refused_not_silently_merged(write_preset):
    message = error_of(write_preset, GOOD + "batch: {size: 16}\n")
    assert "malformed YAML" in message and "'batch' appears twice" in message


def test_schema_command_describes_every_field(gw):
    import json

    from gpuwizard.core.schema import undocumented_fields

    result = gw("presets", "schema")
    schema = json.loads(result.out)
    assert result.code == 0 and schema["title"] == "gpuwizard preset"
    assert undocumented_fields(schema) == []
    assert (
        "gpus" in schema["$defs"]["Hardware"]["properties"]
        and schema["$defs"]["Hardware"]["additionalProperties"] is False
    )
    lerobot = next(b for b in schema["allOf"] if b["if"]["properties"]["trainer"]["const"] == "lerobot")
    assert lerobot["then"]["properties"]["trainer_options"]["$ref"] == "#/$defs/LeRobotOptions"
    assert schema["$defs"]["LeRobotOptions"]["properties"]["api"]["enum"] == ["auto", "v0.6", "main"]
    assert undocumented_fields({"properties": {"x": {"type": "integer"}}}) == ["x"], "the check itself can fail"


def test_saved_user_presets_get_the_schema_beside_them(tmp_path):
    path = save_user_preset(load_preset("demo-cpu"))
    assert path.read_text().startswith("# yaml-language-server: $schema=./preset.schema.json\n")
    assert (path.parent / "preset.schema.json").is_file()
    assert load_preset_file(path) == load_preset("demo-cpu")


def test_presets_show_refuses_what_is_not_a_preset(gw, tmp_path):
    binary = tmp_path / "blob.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    result = gw("presets", "show", binary)
    assert result.code == 2 and "Traceback" not in result.err and "not UTF-8 text" in result.err
    secret = tmp_path / "notes.yaml"
    secret.write_text("token: abc\n")
    result = gw("presets", "show", secret)
    assert result.code == 2 and "abc" not in result.out and "required field is missing" in result.err


def test_redacted_secrets_come_back_from_the_environment_or_refuse(monkeypatch):
    """A preset read back from a run folder (the monitor's restart keys) has its secrets redacted."""
    from gpuwizard.core.secrets import REDACTED
    from gpuwizard.runner.launch.prepare import restore_secrets

    preset = load_preset("demo-cpu")
    preset = updated(preset, launch=updated(preset.launch, env={"HF_TOKEN": REDACTED, "PLAIN": "1"}))
    monkeypatch.setenv("HF_TOKEN", "hf_from_the_shell")
    assert restore_secrets(preset).launch.env == {"HF_TOKEN": "hf_from_the_shell", "PLAIN": "1"}
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(UserError) as info:
        restore_secrets(preset)
    assert (
        "launch.env.HF_TOKEN = '<redacted>': is a secret" in info.value.paragraph()
        and "export HF_TOKEN" in info.value.paragraph()
    )
