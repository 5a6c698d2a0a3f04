"""The gauge's sitecustomize chains the environment's own (issue 40 item 9): that module runs as itself, so code that
reads `sys.modules["sitecustomize"]` or imports `sitecustomize` again finds the environment's, not the gauge's."""

from __future__ import annotations

import os
import subprocess
import sys

from support.data import REPO

GAUGE = REPO / "src" / "gpuwizard" / "gauge"


def test_the_environments_sitecustomize_sees_itself_and_stays_importable(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text(
        "import sys\nOWN = 'theirs'\nSEEN = getattr(sys.modules.get('sitecustomize'), 'OWN', None)\n"
    )
    code = "import sitecustomize, sys; print(sitecustomize.OWN, sitecustomize.SEEN, sitecustomize.__file__)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(GAUGE), str(theirs)])}
    env.pop("GPUWIZARD_GAUGE_FILE", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    own, seen, path = done.stdout.split()
    assert (own, seen) == ("theirs", "theirs"), done.stdout
    assert path == str(theirs / "sitecustomize.py")


def test_without_one_of_its_own_the_gauges_stays(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(GAUGE)}
    env.pop("GPUWIZARD_GAUGE_FILE", None)
    code = "import sitecustomize; print(sitecustomize.__file__)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(GAUGE / "sitecustomize.py")
