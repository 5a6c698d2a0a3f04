"""Long listings: `gpuwizard runs` over 1,000 and 5,000 runs, `gpuwizard presets list` and the Open dialog over 1,000
and 10,000 presets, each median and spread over 3 repeats (issue 29: under 1 s each).

`python bench/listing.py [--quick]` (quick: the smaller sizes only); bench/run_all.py runs it as `listing`.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import PYTHON, ROOT, isolated_env, record
from gpuwizard.core.statcache import RACY_S
from history import make_history

REPEAT = 3
PRESET = (ROOT / "presets" / "demo-cpu.yaml").read_text()

PICKER_TIME = """
import sys, time
from textual.app import App
from gpuwizard.tui.dialogs.modals import PresetPicker

class Host(App):
    def on_mount(self):
        self.picker = PresetPicker()
        self.start = time.perf_counter()
        self.push_screen(self.picker)

async def main():
    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        while True:
            await pilot.pause(0.01)
            if app.screen is app.picker and app.picker.query_one("#presets").option_count >= int(sys.argv[1]):
                break
        print(time.perf_counter() - app.start)

import asyncio
asyncio.run(main())
"""


LISTING_AS_CLI = """
from gpuwizard.model.preset_files import preset_listing
rows = [p.columns() for p in preset_listing()]
width = max((len(r[0]) for r in rows), default=4)
for r in rows:
    print(f"{r[0]:<{width}}  {r[1]:<7}  {r[2]:<7}  {r[3]:<8}  {r[4]:>4}  {r[5]}")
"""
"""What `presets list` prints, through preset_listing: cli/presets.py's loop once it calls it (see the report)."""


def make_presets(config: Path, count: int) -> None:
    """`count` user presets: copies of demo-cpu under new names, every tenth on CUDA and every hundredth damaged."""
    folder = config / "presets"
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        text = PRESET.replace("name: demo-cpu", f"name: bench-{n}")
        if n % 10 == 0:
            text = text.replace("device: cpu", "device: cuda")
        if n % 100 == 99:
            text = text.replace("gpus: 2", "gpus: many")
        (folder / f"bench-{n}.yaml").write_text(text)


def times(cmd: list[str], env: dict[str, str], repeat: int = REPEAT) -> list[float]:
    """Wall seconds of each run of a command (it must succeed)."""
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - start)
    return out


def picker(env: dict[str, str], count: int, repeat: int = REPEAT) -> list[float]:
    """Seconds from pushing the Open dialog to its list holding every preset, each in a fresh process."""
    cmd = [PYTHON, "-c", PICKER_TIME, str(count)]
    return [
        float(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout) for _ in range(repeat)
    ]


def forget(env: dict[str, str]) -> None:
    """Drop the listing caches (core/statcache.py): the next listing reads every file."""
    shutil.rmtree(Path(env["GPUWIZARD_DATA_DIR"]) / "cache", ignore_errors=True)


def report(figure: str, values: list[float], goal: str = "< 1 s") -> None:
    median = statistics.median(values)
    spread = f"{min(values):.3f}-{max(values):.3f} s over {len(values)}" if len(values) > 1 else "once"
    record("listing", f"{figure} ({spread})", median, "s", None, goal, median < 1.0 if goal else None)


def done(env: dict[str, str]) -> None:
    """Remove a size's folders (thousands of runs or presets)."""
    shutil.rmtree(Path(env["GPUWIZARD_DATA_DIR"]).parent, ignore_errors=True)


def run(quick: bool = False) -> None:
    print("Listing")
    for count in (1000,) if quick else (1000, 5000):
        env = isolated_env()
        make_history(Path(env["GPUWIZARD_DATA_DIR"]), count)
        time.sleep(RACY_S)  # files this fresh are read each time, by design: the figures are of an older history
        runs = [PYTHON, "-m", "gpuwizard", "runs"]
        report(f"gpuwizard runs, {count:,} runs, first listing", times(runs, env, 1), "")
        report(f"gpuwizard runs, {count:,} runs", times(runs, env))
        done(env)
    for count in (1000,) if quick else (1000, 10000):
        env = isolated_env()
        make_presets(Path(env["GPUWIZARD_CONFIG_DIR"]), count)
        time.sleep(RACY_S)
        listing = [PYTHON, "-m", "gpuwizard", "presets", "list"]
        report(f"gpuwizard presets list, {count:,} presets, first listing", times(listing, env, 1), "")
        report(f"gpuwizard presets list, {count:,} presets", times(listing, env))
        forget(env)
        as_cli = [PYTHON, "-c", LISTING_AS_CLI]
        report(f"preset_listing() printed as presets list, {count:,} presets, first listing", times(as_cli, env, 1), "")
        report(f"preset_listing() printed as presets list, {count:,} presets", times(as_cli, env))
        report(f"Open dialog populated, {count:,} presets", picker(env, count))
        forget(env)
        report(f"Open dialog populated, {count:,} presets, first listing", picker(env, count, 1), "")
        done(env)


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
