"""What a user sees stays put through a refactor: every shipped preset's plan, preview (json and sbatch) and check
output, and every --help text, against the golden copies in tests/data/golden/cli.json.
GPUWIZARD_UPDATE_GOLDEN=1 rewrites them (only after a change meant to alter what users see)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.data import DATA, TESTS

GOLDEN = DATA / "golden" / "cli.json"
DRIVER = TESTS / "support" / "golden_driver.py"


def test_every_shipped_preset_prints_what_it_printed(tmp_path):
    env = {
        **os.environ,
        "GPUWIZARD_DATA_DIR": str(tmp_path / "data"),
        "GPUWIZARD_CONFIG_DIR": str(tmp_path / "config"),
        "COLUMNS": "100",
    }
    out = subprocess.run([sys.executable, str(DRIVER)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    now = json.loads(out.stdout)
    if os.environ.get("GPUWIZARD_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    before = json.loads(GOLDEN.read_text())
    assert len(before) > 40 and any(key.startswith("check ") for key in before), "the golden copies were read"
    assert sorted(now) == sorted(before)
    changed = [key for key in before if now[key] != before[key]]
    assert changed == [], "\n\n".join(f"{key}:\n{now[key]}" for key in changed[:3])
