"""Prints, as one JSON object, what the command line says for every shipped preset (plan --json, preview --format
json and sbatch, check --json) and every --help text: the golden copies that keep a refactor from changing what a
user sees. Run in a child process with empty data and config folders, as on a 2-core machine without a GPU (CPU
plans offer only the process counts the cores allow); paths and timings are normalised."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
from pathlib import Path

import psutil

os.cpu_count = lambda: 2  # the machine the golden copies describe, whatever this one has
psutil.cpu_count = lambda logical=True: 2 if logical else 1

from gpuwizard.cli.main import build_parser, main  # noqa: E402  (after the machine is pinned)

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/support/golden_driver.py


def normalise(text: str) -> str:
    for folder, name in ((os.environ["GPUWIZARD_DATA_DIR"], "<data>"), (Path(sys.executable).parent, "<bin>")):
        text = text.replace(str(folder), name)
    text = text.replace(str(ROOT), "<repo>")
    return re.sub(r'"seconds": [0-9.e-]+', '"seconds": 0', text)


def call(argv: list[str]) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return normalise(f"exit {code}\n--- stdout\n{out.getvalue()}--- stderr\n{err.getvalue()}")


def commands() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"help": ["--help"]}
    listed = build_parser().format_help().split("COMMAND\n", 2)[-1]  # argparse lists sub-commands only in its help
    for name in re.findall(r"^    ([a-z]+)\b", listed, re.M):
        found[f"help {name}"] = [name, "--help"]
    for path in sorted((ROOT / "presets").glob("*.yaml")):
        name = path.stem
        found[f"plan {name}"] = ["plan", name, "--json"]
        found[f"preview {name} json"] = ["preview", name, "--format", "json"]
        found[f"preview {name} sbatch"] = ["preview", name, "--format", "sbatch"]
        found[f"check {name}"] = ["check", name, "--json"]
    return found


if __name__ == "__main__":
    print(json.dumps({key: call(argv) for key, argv in commands().items()}, indent=1, sort_keys=True))
