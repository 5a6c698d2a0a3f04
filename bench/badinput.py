"""Bad input is refused fast: a YAML alias bomb in each placement (`plan FILE`), `presets list` with one in the
preset folder, and what bounding every YAML document costs on the shipped catalog."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from common import PYTHON, ROOT, isolated_env, median, record, wall

sys.path.insert(0, str(ROOT / "tests"))
from support.bad_input import BOMBS  # the bombs the tests refuse, one per placement


def run(quick: bool = False) -> None:
    print("9. Bad input")
    repeat = 3 if quick else 5
    env = isolated_env()
    folder = Path(env["GPUWIZARD_DATA_DIR"])
    folder.mkdir(parents=True)
    good = wall([PYTHON, "-m", "gpuwizard", "plan", "demo-cpu"], env, repeat)
    worst = 0.0
    for placement, text in BOMBS.items():
        path = folder / f"bomb-{placement}.yaml"
        path.write_text(text)
        worst = max(worst, wall([PYTHON, "-m", "gpuwizard", "plan", str(path)], env, repeat))
    record(
        "badinput",
        f"`plan` refusing an alias bomb, worst of {len(BOMBS)} placements (ref: plan demo-cpu)",
        worst,
        "s",
        good,
        "< 1 s",
        worst < 1.0,
    )
    presets = Path(env["GPUWIZARD_CONFIG_DIR"]) / "presets"
    presets.mkdir(parents=True)
    (presets / "bomb.yaml").write_text(BOMBS["launch.extra_args"])
    listed = wall([PYTHON, "-m", "gpuwizard", "presets", "list"], env, repeat)
    record("badinput", "`presets list` with an alias bomb in the preset folder", listed, "s", None, "< 1 s", listed < 1)

    import yaml

    from gpuwizard.core import paths, yamlio

    catalog = (paths.PACKAGE_DIR / "policies.yaml").read_text()

    def per_call_ms(call, n: int = 30) -> float:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return median(times) * 1000

    bounded = per_call_ms(lambda: yamlio.loads(catalog, "policies.yaml"))
    unbounded = per_call_ms(lambda: yaml.load(catalog, Loader=yamlio._Loader))
    record(
        "badinput",
        "reading the shipped policy catalog, bounded (ref: the same loader unbounded)",
        bounded,
        "ms",
        unbounded,
        "info",
    )
