"""Start-up: the wizard's first frame in a real terminal (a pty) against a minimal Textual app; CLI wall times."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

from common import PYTHON, ROOT, isolated_env, median, record, wall

FIRST_FRAME_TIMEOUT_S = 30


def first_frame(cmd: list[str], marker: bytes, env: dict[str, str]) -> float:
    """Seconds from spawn until `marker` is drawn on an 80x24 pseudo-terminal."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**env, "TERM": "xterm-256color", "COLORTERM": "truecolor"},
        start_new_session=True,
        cwd=ROOT,
    )
    os.close(slave)
    seen = b""
    elapsed = None
    try:
        while time.perf_counter() - start < FIRST_FRAME_TIMEOUT_S:
            ready, _, _ = select.select([master], [], [], 0.05)
            if not ready:
                continue
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
            if marker in seen:
                elapsed = time.perf_counter() - start
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.close(master)
    if elapsed is None:
        raise RuntimeError(f"{cmd} never drew {marker!r}")
    return elapsed


LIBRARIES = ("pydantic", "yaml", "pynvml", "platformdirs", "psutil")
WHICH_LIBRARIES = (
    "import sys, io, contextlib\nfrom gpuwizard import cli\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n    cli.main(['plan', 'demo-cpu'])\n"
    f"print(','.join(m for m in {LIBRARIES!r} if m in sys.modules))"
)


def plan_libraries(env: dict[str, str]) -> str:
    """The third-party libraries `plan demo-cpu` imports here (pynvml only where the NVML library loads)."""
    out = subprocess.run([PYTHON, "-c", WHICH_LIBRARIES], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def compile_bytecode() -> None:
    """Write gpuwizard's .pyc files as a first run would (PYTHONDONTWRITEBYTECODE would time the compiler)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [PYTHON, "-m", "compileall", "-q", str(ROOT / "src" / "gpuwizard")],
        env=env,
        stdout=subprocess.DEVNULL,
        check=True,
    )


def lerobot_preset(env: dict[str, str]) -> str:
    """The shipped ACT DDP preset pointed at a LeRobot interpreter (GPUWIZARD_LEROBOT_PYTHON, else this one)."""
    python = os.environ.get("GPUWIZARD_LEROBOT_PYTHON") or PYTHON
    text = (ROOT / "presets" / "so100-act-ddp2.yaml").read_text().replace("name: so100-act-ddp2", "name: act-bench")
    presets = Path(env["GPUWIZARD_CONFIG_DIR"]) / "presets"
    presets.mkdir(parents=True, exist_ok=True)
    (presets / "act-bench.yaml").write_text(text + f"launch:\n  python: {python}\n")
    return "act-bench"


def cold_probe_wall(cmd: list[str], env: dict[str, str], repeat: int) -> float:
    """Median wall time when the LeRobot probe is not remembered yet (first plan after an install)."""
    cache = Path(env["GPUWIZARD_DATA_DIR"]) / "cache" / "lerobot-install.json"
    times = []
    for _ in range(repeat):
        cache.unlink(missing_ok=True)
        start = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return median(times)


def run(repeat: int = 7) -> None:
    print("1. Start-up")
    env = isolated_env()
    compile_bytecode()
    wizard = [PYTHON, "-m", "gpuwizard", "--preset", "demo-cpu"]
    minimal = [PYTHON, str(ROOT / "bench" / "minimal_app.py")]
    first_frame(wizard, b"Policy & data", env)  # warm the page cache for both
    first_frame(minimal, b"minimal-first-frame", env)
    ours, ref = [], []
    for _ in range(repeat):
        ours.append(first_frame(wizard, b"Policy & data", env))
        ref.append(first_frame(minimal, b"minimal-first-frame", env))
    w, m = median(ours), median(ref)
    record("startup", "wizard first frame (pty 80x24) vs minimal Textual app", w, "s", m, "<= 1.5x", w / m <= 1.5)
    python_start = wall([PYTHON, "-c", "pass"], env, repeat)
    help_time = wall([PYTHON, "-m", "gpuwizard", "--help"], env, repeat)
    plan_time = wall([PYTHON, "-m", "gpuwizard", "plan", "demo-cpu"], env, repeat)
    record(
        "startup",
        "gpuwizard --help wall time (ref: python -c pass)",
        help_time,
        "s",
        python_start,
        "< 0.3 s",
        help_time < 0.3,
    )
    record(
        "startup",
        "gpuwizard plan demo-cpu wall time (ref: python -c pass)",
        plan_time,
        "s",
        python_start,
        "< 0.3 s",
        plan_time < 0.3,
    )
    act = [PYTHON, "-m", "gpuwizard", "plan", lerobot_preset(env)]
    cold = cold_probe_wall(act, env, repeat)
    warm = wall(act, env, repeat)
    record(
        "startup",
        "gpuwizard plan on a LeRobot ACT preset, its environment probed before (ref: python -c pass)",
        warm,
        "s",
        python_start,
        "< 0.3 s",
        warm < 0.3,
    )
    record(
        "startup",
        "same, first plan after an install (the probe starts the LeRobot interpreter)",
        cold,
        "s",
        warm,
        "(info)",
    )
    # What no gpuwizard code can remove: the interpreter plus the libraries `plan` must import to validate a preset and
    # read NVML.
    pydantic_floor = wall([PYTHON, "-c", "import pydantic, yaml"], env, repeat)
    record(
        "startup",
        "gpuwizard plan demo-cpu vs python -c 'import pydantic, yaml'",
        plan_time,
        "s",
        pydantic_floor,
        "<= 1.8x",
        plan_time <= 1.8 * pydantic_floor,
    )
    # `import pydantic` is lazy (pydantic 2 loads BaseModel on first use); what validating anything costs is this:
    in_use = wall(
        [PYTHON, "-c", "from pydantic import BaseModel\nclass M(BaseModel):\n    x: int = 1\nimport yaml"], env, repeat
    )
    record(
        "startup",
        "pydantic in use: import BaseModel, build one model, import yaml",
        in_use,
        "s",
        pydantic_floor,
        "(info)",
    )
    record("startup", "gpuwizard plan demo-cpu vs pydantic in use", plan_time, "s", in_use, "(info)")
    libraries = plan_libraries(env)
    floor = wall([PYTHON, "-c", f"import {libraries}"], env, repeat)
    record("startup", f"plan's dependency floor (python -c 'import {libraries}')", floor, "s", plan_time, "(info)")
    record("startup", "gpuwizard plan demo-cpu above that floor", plan_time - floor, "s", floor, "(info)")
