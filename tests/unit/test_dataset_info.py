"""A LeRobot dataset's meta/info.json with a field of the wrong kind (a feature's shape that is no list of whole
numbers, counts and fps that are no numbers, features that are no mapping): one sentence naming the field, its value
and what LeRobot writes there, never Python's own words (`invalid literal for int()`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuwizard.model.datasets import DatasetError, read_metadata

GOOD: dict[str, Any] = {
    "codebase_version": "v2.1",
    "robot_type": "so100",
    "total_episodes": 4,
    "total_frames": 480,
    "fps": 30,
    "features": {
        "observation.state": {"dtype": "float32", "shape": [6]},
        "action": {"dtype": "float32", "shape": [6]},
        "observation.images.top": {"dtype": "video", "shape": [480, 640, 3]},
    },
}


def dataset(tmp_path: Path, **changes: Any) -> Path:
    info = json.loads(json.dumps(GOOD))
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = info
        for key in parents:
            node = node[key]
        node[leaf] = value
    (tmp_path / "ds" / "meta").mkdir(parents=True)
    (tmp_path / "ds" / "meta" / "info.json").write_text(json.dumps(info))
    return tmp_path / "ds"


def test_the_good_info_reads(tmp_path):
    meta = read_metadata(dataset(tmp_path))
    assert (meta.episodes, meta.frames, meta.fps, meta.state_dim, meta.action_dim) == (4, 480, 30.0, 6, 6)
    assert meta.cameras == ["observation.images.top"]


@pytest.mark.parametrize(
    "changes, said",
    [
        ({"features__action__shape": ["six"]}, 'features.action the shape ["six"]'),
        ({"features__action__shape": "6"}, 'features.action the shape "6"'),
        ({"features__action__shape": [6.5]}, "features.action the shape [6.5]"),
        ({"features__action__shape": []}, "features.action the shape []"),
        ({"features__observation.state__shape": [None]}, "features.observation.state the shape [null]"),
        ({"features__observation.state__shape": [-1]}, "features.observation.state the shape [-1]"),
        ({"features__action": [6]}, "features.action the shape nothing"),
        ({"features__action__shape": [True]}, "features.action the shape [true]"),
    ],
)
def test_a_shape_that_is_no_whole_number_is_named_with_its_value(tmp_path, changes, said):
    root = dataset(tmp_path, **changes)
    with pytest.raises(DatasetError) as raised:
        read_metadata(root)
    assert str(raised.value) == (
        f"{root}/meta/info.json gives {said}; LeRobot writes a list of whole numbers there, the width first (e.g. [6])"
    )


@pytest.mark.parametrize(
    "changes, said",
    [
        ({"total_episodes": "four"}, 'gives total_episodes as "four"; LeRobot writes a whole number there'),
        ({"total_frames": 4.5}, "gives total_frames as 4.5; LeRobot writes a whole number there"),
        ({"total_frames": None}, "gives total_frames as nothing; LeRobot writes a whole number there"),
        ({"fps": "fast"}, 'gives fps as "fast"; LeRobot writes the frames per second there, a number above 0'),
        ({"fps": 0}, "gives fps as 0; LeRobot writes the frames per second there, a number above 0"),
        ({"features": [1, 2]}, "gives features as [1, 2]; LeRobot writes a mapping there"),
        ({"total_episodes": "x" * 500}, 'gives total_episodes as "' + "x" * 56 + "...; LeRobot"),
    ],
)
def test_a_count_or_rate_of_the_wrong_kind_is_named_with_its_value(tmp_path, changes, said):
    root = dataset(tmp_path, **changes)
    with pytest.raises(DatasetError, match="^" + str(root)) as raised:
        read_metadata(root)
    assert said in str(raised.value) and "invalid literal" not in str(raised.value)
