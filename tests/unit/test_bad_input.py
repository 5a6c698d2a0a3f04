"""Bad input never crashes or hangs a command: YAML bombs are refused before they are built, and values that pass
their type but fail later (NUL bytes, newlines in paths, 5,000-digit numbers, subnormal rates) are refused at load,
one paragraph each."""

from __future__ import annotations

import os
import sys

import pytest

from conftest import gw_subprocess
from gpuwizard.core import paths, yamlio
from gpuwizard.core.errors import UserError
from gpuwizard.model.preset_files import load_preset_file

HEAD = """\
version: 1
name: {name}
trainer: {trainer}
policy: act
dataset: {{repo_id: me/pick}}
"""
BOMB_TIMEOUT_S = 60
"""A refused bomb answers in well under a second (bench: yaml_bomb); this only bounds a regression that hangs."""


def tower(levels: int = 9, width: int = 9) -> str:
    """The classic alias bomb: each level lists the previous one `width` times, width**levels strings in all."""
    text = "&a0 [" + ", ".join(['"lol"'] * width) + "]"
    for level in range(1, levels):
        text = f"&a{level} [{text}, " + ", ".join([f"*a{level - 1}"] * (width - 1)) + "]"
    return text


BOMBS = {
    "hardware.gpus": HEAD.format(name="b", trainer="lerobot") + f"hardware:\n  gpus: {tower()}\n",
    "optim.lr": HEAD.format(name="b", trainer="lerobot") + f"optim:\n  lr: {tower()}\n",
    "name": HEAD.format(name=tower(), trainer="lerobot"),
    "launch.env": HEAD.format(name="b", trainer="lerobot") + f"launch:\n  env:\n    HF_HOME: {tower()}\n",
    "launch.extra_args": HEAD.format(name="b", trainer="lerobot") + f"launch:\n  extra_args: {tower()}\n",
    "trainer_options.script_args": HEAD.format(name="b", trainer="hf")
    + f"trainer_options:\n  script: train.py\n  script_args: {tower()}\n",
}


def one_refusal(result, source: str) -> str:
    """The command refused with exit 2 and exactly one paragraph on stderr, naming the file; no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "Error:" not in result.stderr, result.stderr[-2000:]
    paragraphs = result.stderr.strip().split("\n")
    assert len(paragraphs) == 1 and paragraphs[0].startswith(source), result.stderr[-2000:]
    return paragraphs[0]


@pytest.mark.parametrize("placement", list(BOMBS))
def test_an_alias_bomb_anywhere_in_a_preset_is_refused_in_one_paragraph(tmp_path, placement):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMBS[placement])
    paragraph = one_refusal(gw_subprocess("plan", path, timeout=BOMB_TIMEOUT_S), str(path))
    assert "expands to more than 100,000 values" in paragraph and "aliases" in paragraph, paragraph
    assert "line " in paragraph and "Fix:" in paragraph


def test_presets_list_names_a_bomb_as_invalid_and_lists_the_rest(tmp_path):
    folder = paths.user_presets_dir()
    folder.mkdir(parents=True)
    (folder / "bomb.yaml").write_text(BOMBS["launch.extra_args"])
    result = gw_subprocess("presets", "list", timeout=BOMB_TIMEOUT_S)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    (bomb_row,) = [line for line in result.stdout.splitlines() if line.startswith("bomb ")]
    assert "INVALID:" in bomb_row and "expands to more than 100,000 values" in bomb_row
    assert any(line.startswith("demo-cpu ") and "demo" in line for line in result.stdout.splitlines())


def test_a_long_string_multiplied_by_aliases_is_refused_too():
    text = 'big: &s "' + "x" * 1_000_000 + '"\nmany: [' + ", ".join(["*s"] * 20) + "]\n"
    with pytest.raises(UserError) as info:
        yamlio.loads(text, "big.yaml")
    assert "16 MiB of text" in info.value.paragraph()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a: " + "[" * 64 + "]" * 64 + "\n", "nest deeper than 64 levels"),
        ("a: &x [1, *x]\n", "the alias *x is inside its own anchor"),
        ("steps: " + "9" * 5000 + "\n", "a whole number of 5,000 digits"),
    ],
)
def test_nesting_self_reference_and_huge_numbers_are_refused_with_their_line(text, expected):
    with pytest.raises(UserError) as info:
        yamlio.loads(text, "x.yaml")
    paragraph = info.value.paragraph()
    assert expected in paragraph and "line 1" in paragraph and "\n" not in paragraph, paragraph


def test_ordinary_aliases_and_the_shipped_files_still_load(tmp_path):
    assert yamlio.loads("a: &x [1, 2]\nb: *x\n", "ok.yaml") == {"a": [1, 2], "b": [1, 2]}
    assert yamlio.loads("a: " + "[" * 63 + "]" * 63 + "\n", "deep.yaml")["a"] is not None
    assert yamlio.load_file(paths.PACKAGE_DIR / "model" / "policies.yaml")


SNIPPETS = {  # each of the other YAML files read, through the command or call that reads it
    "settings.yaml": "from gpuwizard.model.settings import check_settings; print(check_settings())",
    "themes/bomb.yaml": "from gpuwizard.tui.themes import load_themes; print(load_themes()[1])",
    "policies.yaml": "from gpuwizard.model.catalog import load_catalog\n"
    "try:\n    load_catalog()\nexcept Exception as exc:\n    print(exc)",
}


@pytest.mark.parametrize("relative", list(SNIPPETS))
def test_a_bomb_in_settings_themes_or_the_user_catalog_is_reported_not_built(relative):
    import subprocess

    target = paths.config_dir() / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"name: {tower()}\n")
    result = subprocess.run(
        [sys.executable, "-c", SNIPPETS[relative]], capture_output=True, text=True, timeout=BOMB_TIMEOUT_S
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "expands to more than 100,000 values" in result.stdout, result.stdout[-2000:]


LATE_FAILURES = [  # values of the right type that used to be accepted and failed at run time
    ('output_dir: "/tmp/a\\0b"', "output_dir = '/tmp/a\\x00b': contains a control character"),
    ('output_dir: "/"', "output_dir = '/': is the root of the file system"),
    ('output_dir: "//./"', "output_dir = '//./': is the root of the file system"),
    ('output_dir: "/tmp/a\\nb"', "output_dir = '/tmp/a\\nb': contains a control character"),
    ("optim: {lr: 5e-324}", "optim.lr = 5e-324: must be 1e-09 or more"),
    ("trainer_options: {log_freq: 100000000000000000000}", "trainer_options.log_freq = 100000000000000000000: is too"),
    ("trainer_options: {seed: -100000000000000000000}", "trainer_options.seed = -100000000000000000000: is too"),
    ("optim: {steps: " + "9" * 5000 + "}", "a whole number of 5,000 digits"),
    ("launch: {env: {A: [1]}}", "launch.env.A = [1]: must be text or a number"),
    ("launch: {env: {A: true}}", "launch.env.A = True: true/false is ambiguous"),
    ("launch: {env: {A: .inf}}", "launch.env.A = inf: must be a finite number"),
    ('launch: {env: {A: "x\\0"}}', "launch.env.A = 'x\\x00': contains a NUL byte"),
    ('launch: {workdir: "a\\tb"}', "launch.workdir = 'a\\tb': contains a control character"),
    ("monitor: {hang_timeout_s: 1.0e-310}", "monitor.hang_timeout_s = 1e-310: is too close to 0"),
]


@pytest.mark.parametrize("line, expected", LATE_FAILURES)
def test_values_that_would_fail_later_are_refused_at_load_in_one_paragraph(write_preset, line, expected):
    path = write_preset(HEAD.format(name="late", trainer="lerobot") + line + "\n")
    with pytest.raises(UserError) as info:
        load_preset_file(path)
    assert len(info.value.problems) == 1, info.value.paragraph()
    assert expected in info.value.paragraph() and "Fix:" in info.value.paragraph(), info.value.paragraph()


def test_a_nul_in_the_dataset_id_is_refused_by_plan_and_run_not_at_launch(write_preset, gw):
    path = write_preset(HEAD.format(name="late", trainer="demo").replace("act", "demo").replace("me/pick", '"a\\0b"'))
    for command in ("plan", "run"):
        result = gw(command, path, "--headless") if command == "run" else gw(command, path)
        assert result.code == 2 and "Traceback" not in result.err
        assert result.err.strip().count("\n") == 0 and "dataset.repo_id = 'a\\x00b'" in result.err, result.err


def test_numbers_written_unquoted_in_the_environment_become_text(write_preset):
    path = write_preset(HEAD.format(name="env", trainer="lerobot") + "launch: {env: {NCCL_P2P_DISABLE: 1, X: 0.5}}\n")
    assert load_preset_file(path).launch.env == {"NCCL_P2P_DISABLE": "1", "X": "0.5"}


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda info: os.mkfifo(info), "info.json cannot be read: not a regular file"),
        (lambda info: info.write_text("[" * 100_000 + "]" * 100_000), "info.json is not readable JSON"),
        (
            lambda info: info.write_text('{"total_episodes": Infinity, "total_frames": 1, "fps": 30}'),
            "info.json holds an infinite total_episodes or total_frames",
        ),
    ],
)
def test_a_dataset_folder_with_a_bad_info_json_is_a_paragraph_not_a_hang(tmp_path, make, expected):
    root = tmp_path / "dataset"
    (root / "meta").mkdir(parents=True)
    make(root / "meta" / "info.json")
    preset = tmp_path / "ds.yaml"
    preset.write_text(HEAD.format(name="ds", trainer="lerobot").replace("me/pick}", f"me/pick, root: {root}}}"))
    result = gw_subprocess("plan", preset, timeout=BOMB_TIMEOUT_S)
    assert "Traceback" not in result.stderr and expected in result.stdout + result.stderr, result.stderr[-2000:]
