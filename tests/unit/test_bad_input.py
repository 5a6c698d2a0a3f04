"""Bad input never crashes or hangs a command: YAML that would blow up is refused before it is built, and values that
pass their type but fail later (NUL bytes, newlines in paths, 5,000-digit numbers, subnormal rates) are refused at
load, one paragraph each. The real command on alias bombs: tests/system/test_bad_input_cli.py."""

from __future__ import annotations

import pytest

from gpuwizard.core import paths, yamlio
from gpuwizard.core.errors import UserError
from gpuwizard.model.preset_files import load_preset_file
from support.bad_input import HEAD


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
