"""Issue 35's test of the probe's answer: five probes of the shipped demo-cpu, one after the other, while a CPU burner
changes its load every 20-40 s (0, 1 or 2 busy processes, drawn from a seed). Done when every probe gives the same
recommendation or says "cannot tell here" with its reason, none says "sure" and then contradicts itself, and no
efficiency above 100% is said as a fact. Prints one row per probe and the checks; `--probes N`, `--seed S`.

    .venv/bin/python bench/probe_under_load.py
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import re
import signal
import sys
import time
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

from common import isolated_env
from jobs import gw

BURNER_LIMIT_S = 3 * 3600
"""The burner ends itself after this long whatever happens to this script."""


def spin(stop: float, ended: EventType) -> None:
    """One core kept busy until `stop` (epoch seconds) or the bench ends."""
    x, look = 0, 0
    while time.time() < stop:
        x = (x * 1103515245 + 12345) % 2**31
        look += 1
        if look % 100_000 == 0 and ended.is_set():
            return


def burner(seed: int, log: Path, ended: EventType) -> None:
    """Change the number of busy processes (0, 1, 2) every 20-40 s, and write each change to `log`."""
    draw, end = random.Random(seed), time.time() + BURNER_LIMIT_S
    while time.time() < end and not ended.is_set():
        busy, hold = draw.choice((0, 1, 2)), draw.uniform(20, 40)
        with log.open("a") as out:
            out.write(f"{time.time():.1f} {busy}\n")
        stop = time.time() + hold
        workers = [multiprocessing.Process(target=spin, args=(stop, ended)) for _ in range(busy)]
        for w in workers:
            w.start()
        ended.wait(max(0.0, stop - time.time()))
        for w in workers:
            w.join()


PERCENT = re.compile(r"(\d{3,})%")


def over_100_as_fact(lines: list[str]) -> list[str]:
    """Sentences that give an efficiency above 100% without saying why it cannot be one."""
    found = []
    for line in lines:
        for sentence in re.split(r"(?<=[.;])\s", line):
            if (
                any(int(p) > 100 for p in PERCENT.findall(sentence))
                and "no added" not in sentence
                and ("above 100%" not in sentence)
            ):
                found.append(sentence)
    return found


def contradicted(probe: dict) -> str:
    """Why a probe's answer contradicts itself (empty where it does not): the evidence recommends otherwise, or the
    paragraph says sure while its own interval reaches across the bar."""
    decision = probe.get("decision") or {}
    said = "\n".join(probe["verdict"][1:]).lower()
    if any(word in said for word in ("recommended", " sure", "does not pay", "pays")):
        return "the evidence judges on its own"
    if decision.get("confidence") == "sure":
        for c in decision.get("compared", []):
            if c["low"] < 0.7 <= c["high"]:
                return f"sure with an interval {c['low']:.0%}-{c['high']:.0%} across the bar"
    return ""


def row(n: int, probe: dict, wall: float) -> tuple[str, str]:
    decision = probe.get("decision") or {}
    compared = (decision.get("compared") or [{}])[0]
    windows = [*probe["rows"], *probe.get("repeats", [])]
    background = [w["background"] for w in windows if w.get("background") is not None]
    said = f"{decision.get('gpus')}x{decision.get('batch')}" if decision else "-"
    interval = f"{compared['low']:.0%}-{compared['high']:.0%}" if compared else "-"
    kept = f"{compared.get('pairs', 0)}/{compared.get('pairs', 0) + len(compared.get('dropped', []))}"
    bg = f"{min(background):.1f}-{max(background):.1f}" if background else "-"
    text = (
        f"{n:>2} {said:>6} {decision.get('confidence', '-'):<12} {compared.get('efficiency', 0):>5.0%} "
        f"{interval:>9} {kept:>5} {bg:>9} {wall:>6.0f}"
    )
    return text, decision.get("confidence", "-")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=35)
    args = parser.parse_args()
    env = isolated_env()
    log = Path(env["GPUWIZARD_DATA_DIR"]).parent / "burner.log"
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))  # the burner is stopped on the way out
    ended = multiprocessing.Event()
    burn = multiprocessing.Process(target=burner, args=(args.seed, log, ended))
    burn.start()
    rows, answers, problems = [], [], []
    try:
        for n in range(1, args.probes + 1):
            start = time.perf_counter()
            done = gw(env, "probe", "demo-cpu", "--json", timeout=1800)
            wall = time.perf_counter() - start
            if done.returncode != 0:
                problems.append(f"probe {n} exited {done.returncode}: {done.stderr.strip()[-300:]}")
                continue
            probe = json.loads(done.stdout)
            text, confidence = row(n, probe, wall)
            rows.append(text)
            d = probe.get("decision") or {}
            answers.append("cannot tell" if confidence == "cannot tell" else f"{d.get('gpus')}x{d.get('batch')}")
            if why := contradicted(probe):
                problems.append(f"probe {n} contradicts itself: {why}")
            for sentence in over_100_as_fact(probe["verdict"]):
                problems.append(f"probe {n} gives an efficiency above 100% as a fact: {sentence}")
            print(f"probe {n}: {probe['verdict'][0]}", file=sys.stderr, flush=True)
    finally:
        ended.set()
        burn.join()
    changes = len(log.read_text().splitlines()) if log.exists() else 0
    print(f"{args.probes} probes of demo-cpu while a burner changed its load {changes} times (seed {args.seed})")
    print(
        f"{'n':>2} {'answer':>6} {'confidence':<12} {'eff':>5} {'interval':>9} {'pairs':>5} {'bg cores':>9} "
        f"{'wall s':>6}"
    )
    print("\n".join(rows))
    recommended = {a for a in answers if a != "cannot tell"}
    same = len(recommended) <= 1
    print(
        f"same recommendation or cannot tell: {'yes' if same else 'no'} ({', '.join(answers)}); "
        f"contradictions and efficiencies above 100% as facts: {len(problems)}"
    )
    for p in problems:
        print(f"  {p}")
    return 0 if same and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
