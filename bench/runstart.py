"""Key latency while a run starts: the wizard in a real pty (80x24), ctrl+r, then `f` pressed again and again in the
monitor during the first 15 s (torchrun and the ranks importing torch, the dataset built, the first steps) with CPU
burners adding load, against the same keys later in the run (the steady state).

Each press of `f` toggles following, which the log pane's border says at once ("paused: f or End follows the
tail" / "following the tail"): the time from the key's byte to that text reaching the terminal is one sample.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from common import PYTHON, ROOT, isolated_env, median, record

START_WINDOW_S = 15.0
STEADY_FROM_S = 30.0
KEY_TIMEOUT_S = 20.0
PRESS_GAP_S = 0.5
GOAL_S = 0.25
BURNER = "while True:\n    pass\n"
PRESET = """\
version: 1
name: keys-at-start
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 8}}
optim: {{lr: 1.0e-3, steps: 100000}}
mixed_precision: "no"
output_dir: {root}/out
trainer_options: {{log_every: 5, step_time_s: 0.01}}
"""


class Terminal:
    """A pty running one command; reads whatever it draws."""

    def __init__(self, cmd: list[str], env: dict[str, str]):
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self.proc = subprocess.Popen(
            cmd,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**env, "TERM": "xterm-256color"},
            start_new_session=True,
            cwd=ROOT,
        )
        os.close(slave)

    def wait_for(self, marker: bytes, timeout: float) -> float | None:
        """Seconds until `marker` is drawn (in what arrives from now on), or None."""
        seen, start = b"", time.perf_counter()
        self.last = seen
        while time.perf_counter() - start < timeout:
            ready, _, _ = select.select([self.master], [], [], 0.005)
            if ready:
                try:
                    seen += os.read(self.master, 1 << 20)
                except OSError:
                    return None
                if marker in seen[-(1 << 16) :]:
                    return time.perf_counter() - start
        self.last = seen
        return None

    def press(self, key: bytes) -> None:
        os.write(self.master, key)

    def close(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        os.close(self.master)


def latencies(term: Terminal, until: float, presses: list[int]) -> list[float]:
    """Press `f` until the monotonic time `until`; each sample is key-to-notice."""
    found: list[float] = []
    while time.monotonic() < until:
        term.wait_for(b"\x00", PRESS_GAP_S)  # drain, and a moment between keys as a user leaves
        term.press(b"f")
        presses[0] += 1
        shown = term.wait_for(b"paused: f or End" if presses[0] % 2 else b"following the tail", KEY_TIMEOUT_S)
        if shown is None:
            raise RuntimeError(f"press {presses[0]}: its notice never appeared within {KEY_TIMEOUT_S:.0f} s")
        found.append(shown)
    return found


def measure(burners: int) -> dict[str, list[float] | float]:
    env = isolated_env()
    root = Path(env["GPUWIZARD_DATA_DIR"]).parent
    presets = Path(env["GPUWIZARD_CONFIG_DIR"]) / "presets"
    presets.mkdir(parents=True)
    (presets / "keys-at-start.yaml").write_text(PRESET.format(root=root))
    load = [subprocess.Popen([PYTHON, "-c", BURNER]) for _ in range(burners)]
    term = Terminal([PYTHON, "-m", "gpuwizard", "--preset", "keys-at-start"], env)
    try:
        if term.wait_for(b"ready", 60) is None:  # the plan is made after the first frame
            raise RuntimeError("the wizard never said the plan is ready")
        term.press(b"\x12")  # ctrl+r
        started = time.monotonic()
        opened = term.wait_for(b"keys-at-start \xc2\xb7 demo", 120)
        if opened is None:
            raise RuntimeError("the monitor never opened")
        presses = [0]
        start = latencies(term, started + START_WINDOW_S, presses)
        while time.monotonic() < started + STEADY_FROM_S:
            term.wait_for(b"\x00", 0.5)
        steady = latencies(term, started + STEADY_FROM_S + START_WINDOW_S, presses)
    finally:
        term.close()
        subprocess.run([PYTHON, "-m", "gpuwizard", "stop"], env=env, capture_output=True, timeout=120, check=False)
        for proc in load:
            proc.kill()
            proc.wait()
    return {"open": opened, "start": start, "steady": steady}


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def run(quick: bool = False) -> None:
    print("9. Key latency while a run starts")
    burners = 2 if quick else 4
    result = measure(burners)
    start, steady = result["start"], result["steady"]
    assert isinstance(start, list) and isinstance(steady, list)
    load = f"2 ranks + {burners} CPU burners on {os.cpu_count()} cores"
    record("runstart", f"ctrl+r to the monitor drawn ({load})", float(result["open"]), "s", None, "info")
    record("runstart", f"first 15 s of a run: key-to-screen median of {len(start)}", median(start) * 1000, "ms")
    record(
        "runstart",
        f"first 15 s of a run: key-to-screen p95 ({load})",
        p95(start) * 1000,
        "ms",
        None,
        "< 250 ms",
        p95(start) < GOAL_S,
    )
    record("runstart", f"steady state (30-45 s): key-to-screen median of {len(steady)}", median(steady) * 1000, "ms")
    record(
        "runstart",
        "steady state (30-45 s): key-to-screen p95",
        p95(steady) * 1000,
        "ms",
        None,
        "< 250 ms",
        p95(steady) < GOAL_S,
    )


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
