"""Files a preset points at that are not what they claim: a GR00T checkout whose gr00t/configs/finetune_config.py is
a FIFO (plan, preview and check once waited for a writer forever) or a link to /dev/zero (read until MemoryError).
Each command answers at once with one paragraph saying what is wrong, and never a traceback."""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwizard.core import yamlio
from gpuwizard.trainers.groot import trainer as groot
from gpuwizard.trainers.groot.trainer import FINETUNE_CONFIG, read_finetune_config

PRESET = """\
version: 1
name: groot-bad-config
trainer: groot
policy: groot
dataset: {{root: demo_data/cube_to_bowl_5}}
hardware: {{gpus: 2}}
batch: {{size: 64}}
optim: {{steps: 1000}}
mixed_precision: bf16
trainer_options: {{base_model_path: nvidia/GR00T-N1.7-3B, embodiment_tag: GR1, uv: true}}
launch: {{workdir: {workdir}}}
output_dir: {root}/out
"""


@contextlib.contextmanager
def address_space_capped(extra: int = 2 << 30) -> Iterator[None]:
    """Allocations past this process's size plus `extra` fail: a read without end raises MemoryError at once
    instead of taking the memory of a machine others test on too."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (size + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def checkout(tmp_path: Path, kind: str) -> Path:
    """An Isaac-GR00T working folder whose finetune_config.py is a FIFO, a link to /dev/zero, or a folder."""
    work = tmp_path / f"Isaac-GR00T-{kind}"
    config = work / FINETUNE_CONFIG
    config.parent.mkdir(parents=True)
    (work / "gr00t" / "experiment").mkdir()
    (work / "gr00t" / "experiment" / "launch_finetune.py").write_text("")
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "zero":
        config.symlink_to("/dev/zero")
    else:
        config.mkdir()
    groot._config_fields.cache_clear()
    return work


KINDS = ["fifo", "zero", "folder"]


@pytest.mark.timeout(60)  # the FIFO once blocked here forever: the timeout turns a hang into a failure
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", ["plan", "preview", "check"])
def test_plan_preview_and_check_say_the_groot_config_cannot_be_read(gw, write_preset, tmp_path, kind, command):
    work = checkout(tmp_path, kind)
    preset = write_preset(PRESET.format(workdir=work, root=tmp_path))
    trusted = ["--trust"] if command == "check" else []  # the checkout is the user's: check asks the trust first
    with address_space_capped():
        result = gw(command, preset, *trusted)
    assert "Traceback" not in result.err and result.code == 0, result.err
    said = "".join((result.out + result.err).split())  # the plan report wraps its paragraphs, also at hyphens
    if command == "check":  # no GR00T environment here: it says why the parser was not asked
        assert "notchecked:notrainingenvironmenthere" in said, said
        return
    expected = (
        f"{FINETUNE_CONFIG} in {work} cannot be read: not a regular file (a FIFO, device "
        "or folder in its place); so whether this GR00T takes --resume-from-checkpoint is unknown"
    )
    assert said.count("".join(expected.split())) == 1 and "launch.workdir='" in said, said
    assert "Fix:restorethecheckout'sown" in said


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
def test_the_trainer_check_names_the_unreadable_config_instead_of_reading_it(tmp_path, kind):
    """With an interpreter present, the check would go on to GR00T's own parser: it says why it does not."""
    work = checkout(tmp_path, kind)
    fields, unreadable = read_finetune_config(str(work))
    assert fields == frozenset() and unreadable == yamlio.NOT_REGULAR


def read_afresh(work: Path) -> tuple[frozenset[str], str | None]:
    """Read again: the answers are cached by the file's mtime, which two writes in one clock tick share."""
    groot._config_fields.cache_clear()
    return read_finetune_config(str(work))


def test_a_huge_or_broken_config_is_named_too_and_a_good_one_is_read(tmp_path):
    work = tmp_path / "Isaac-GR00T"
    config = work / FINETUNE_CONFIG
    config.parent.mkdir(parents=True)
    with config.open("wb") as fh:  # sparse: 2 GiB on no disk
        fh.truncate(2 << 30)
    assert read_afresh(work)[1] == (f"it is {2 << 30} bytes, more than the {groot.MAX_CONFIG_BYTES} expected here")
    config.write_text("class FinetuneConfig:\n    resume_from_checkpoint: bool = False\n    x: int = (\n")
    assert read_afresh(work)[1] == "it is not valid Python (line 3)"
    config.write_bytes(b"\xff\xfe")
    assert read_afresh(work)[1] == "it is not UTF-8 text"
    config.write_text("class FinetuneConfig:\n    resume_from_checkpoint: bool = False\n    lr: float = 1e-4\n")
    assert read_afresh(work) == (frozenset({"resume_from_checkpoint", "lr"}), None)
    assert read_afresh(tmp_path / "elsewhere") == (frozenset(), None), "no checkout: nothing to say"


@pytest.mark.parametrize(
    "argv",
    [
        ["attach", "--headless"],
        ["stop"],
        ["runs", "--best"],
        ["compare", "x" * 5000],
        ["run", "demo-cpu", "--headless", "--resume"],
        ["probe", "demo-cpu", "--from-run"],
    ],
)
def test_a_run_id_longer_than_a_file_name_is_no_run(gw, argv):
    """Issue 40's campaign: a 5000-character run id was a traceback (ENAMETOOLONG from the folder look-up)."""
    result = gw(*argv, "x" * 5000)
    assert result.code == 2 and "Traceback" not in result.out + result.err, result.err
    assert result.err.count("Fix:") >= 1 and len(result.err) < 12_000, result.err[:300]


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--repeat", "999999", "--repeat = 999999: 999,999 alternating rounds would start 1,999,998 more runs"),
        ("--budget", "99999999999h", "--budget = '99999999999h': is longer than a probe is meant to take"),
    ],
)
def test_a_probe_asked_for_endless_rounds_or_time_is_refused_before_it_starts(gw, flag, value, said):
    """Issue 40's campaign: both were taken and planned (2,000,002 runs; 359999999996400 s)."""
    result = gw("probe", "demo-cpu", flag, value)
    assert result.code == 2 and said in result.err and "Fix:" in result.err, result.err
