"""How short times and mistyped words read (issue 25): one form for a time under a minute, a suggestion for a word
close to a choice and none for a word close to nothing."""

from __future__ import annotations

import pytest

from gpuwizard.core.errors import closest, unknown
from gpuwizard.core.units import about, fmt_hours
from gpuwizard.model import datasets
from support.data import DATA


@pytest.mark.parametrize("hours", [0.0, 0.001, 0.008])
def test_a_time_under_half_a_minute_reads_as_under_one_minute_with_or_without_about(hours):
    assert fmt_hours(hours) == "<1 min" and about(hours) == "<1 min"


@pytest.mark.parametrize("hours, said", [(0.01, "~1 min"), (0.17, "~10 min"), (1.5, "~1.5 h")])
def test_about_marks_a_figure_as_approximate(hours, said):
    assert about(hours) == said == f"~{fmt_hours(hours)}"


@pytest.mark.parametrize(
    "word, choices, meant",
    [
        ("lerobt", ["lerobot", "groot", "openpi", "hf", "demo"], "lerobot"),
        ("linear", ["none", "linear_lr", "sqrt_lr", "divide_steps"], "linear_lr"),
        ("deepspeed", ["lerobot", "groot", "openpi", "hf", "demo"], None),
    ],
)
def test_a_mistyped_word_is_matched_to_a_close_choice_only(word, choices, meant):
    assert closest(word, choices) == meant
    assert unknown("unknown trainer", word, choices) == (
        f"unknown trainer; did you mean {meant}?" if meant else "unknown trainer"
    )


def test_a_dataset_shorter_than_a_minute_does_not_read_as_zero_minutes():
    meta = datasets.read_metadata(DATA / "datasets" / "so100_tiny_lerobot061")
    assert meta.frames / meta.fps < 30, "the recorded dataset is a few seconds long"
    summary = meta.summary()
    assert "(<1 min)" in summary and "~0 min" not in summary, summary
