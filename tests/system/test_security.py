"""Hostile output and hostile folders: no escape sequence from a job, a log or a run folder reaches the terminal,
whether printed by the CLI or drawn by the TUI (issue 19, item 2); the sanitiser itself: tests/unit/test_safetext.py."""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwizard.runs.rundir import RunDir, list_runs
from support.cli import gw_subprocess, poll_until
from support.data import DATA
from support.hostile import DCS, HOSTILE, OSC_CLIPBOARD, OSC_TITLE, PAYLOADS

TERMINAL_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")
"""Bytes a terminal acts on (tab and newline aside), in UTF-8 output: C0, DEL, and the C1 controls."""


def assert_inert(output: bytes | str, where: str) -> None:
    data = output.encode() if isinstance(output, str) else output
    found = TERMINAL_CONTROL.search(data)
    context = data[max(0, found.start() - 60) :][:160] if found else b""
    assert found is None, f"{where} writes {found[0]!r}: {context!r}"
    for payload in PAYLOADS:
        assert payload.encode() not in data, f"{where} shows the body of a control string ({payload})"


HOSTILE_SCRIPT = """\
text = open("hostile.txt", encoding="utf-8").read()  # not in the source: a traceback quotes the source line
print("hello " + text + " end", flush=True)
raise RuntimeError("boom " + text + " done")
"""

HOSTILE_PRESET = """\
version: 1
name: hostile
trainer: hf
policy: act
dataset: {{repo_id: me/data}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 2}}
optim: {{lr: 1.0e-4, steps: 10}}
mixed_precision: "no"
launch: {{python: {python}, workdir: {root}}}
trainer_options: {{script: hostile.py}}
"""


@pytest.fixture
def hostile_job(tmp_path, write_preset):
    """A 2-process job under the real torchrun whose ranks print OSC 0, OSC 52, DCS and CSI, then fail with them
    in their error line."""
    (tmp_path / "hostile.py").write_text(HOSTILE_SCRIPT)
    (tmp_path / "hostile.txt").write_text(HOSTILE, encoding="utf-8")
    return write_preset(HOSTILE_PRESET.format(python=sys.executable, root=tmp_path), "hostile.yaml")


def raw(*args: str, timeout: float = 180):
    return subprocess.run(
        [sys.executable, "-m", "gpuwizard", *args], capture_output=True, timeout=timeout, env=dict(os.environ)
    )


def test_a_hostile_job_reaches_the_cli_without_its_sequences(hostile_job):
    run = raw("run", "--trust", str(hostile_job), "--headless", "--log")
    assert run.returncode == 1, run.stdout.decode(errors="replace") + run.stderr.decode(errors="replace")
    out = run.stdout.decode()
    assert "rank 0 failed (exit code 1): RuntimeError: boom" in out and "done" in out, out
    assert "hello" in out and " end" in out, "the log lines are streamed, their sequences removed"
    assert_inert(run.stdout, "run --headless --log")
    assert_inert(run.stderr, "run --headless (stderr)")
    run_id = list_runs()[0].run.run_id
    log = (list_runs()[0].run.log).read_bytes()
    assert b"\x1b]52;" in log, "the log file keeps what the job wrote; only what is shown is cleaned"
    for args, code in ((("attach", run_id, "--headless", "--log"), 1), (("runs",), 0), (("stop", run_id), 0)):
        result = raw(*args)
        assert result.returncode == code, result.stdout + result.stderr  # attach ends with the run's own code
        assert_inert(result.stdout + result.stderr, " ".join(args))
    attached = raw("attach", run_id, "--headless").stdout.decode()
    assert "RuntimeError: boom" in attached and "failed" in attached


CMP_RUNS = ("20261201-005642-demo-cmp", "20261201-005700-demo-cmp")


@pytest.fixture
def hostile_folders(tmp_path):
    """The two real demo runs of tests/data, copied under folder names that carry control strings, with an error,
    an event and log lines that carry them too."""
    runs = tmp_path / "data" / "runs"
    made = []
    for index, name in enumerate(CMP_RUNS):
        target = runs / f"{name}{OSC_TITLE if index else OSC_CLIPBOARD}"
        shutil.copytree(DATA / "runs" / name, target)
        status = json.loads((target / "status.json").read_text())
        status.update(state="failed", exit_code=1, job_exit_code=1, error=f"the job said {HOSTILE}")
        status["run_id"] = target.name
        (target / "status.json").write_text(json.dumps(status))
        event = {
            "format": 1,
            "kind": "rank_failed",
            "severity": "error",
            "title": f"rank 1 failed: {HOSTILE}",
            "detail": f"detail {DCS}",
            "suggestion": f"next {OSC_CLIPBOARD}",
            "t": 1.0,
        }
        (target / "events.jsonl").write_text(json.dumps(event) + "\n")
        with open(target / "log.txt", "a") as log:
            log.write(f"[rank1]: RuntimeError: {HOSTILE} in the log\n")
        made.append(RunDir(target))
    return made


def test_hostile_run_folders_reach_the_cli_without_their_sequences(hostile_folders):
    first, second = hostile_folders
    for args, code in (
        (("runs",), 0),
        (("attach", first.run_id, "--headless", "--log"), 1),
        (("stop", second.run_id), 0),
        (("compare", first.run_id, second.run_id), 0),
    ):
        result = raw(*args)
        assert result.returncode == code, (args, result.stdout + result.stderr)
        assert_inert(result.stdout + result.stderr, " ".join(args))
    as_json = raw("runs", "--json").stdout
    assert TERMINAL_CONTROL.search(as_json) is None, "JSON escapes control characters itself"
    assert {row["run_id"] for row in json.loads(as_json)} == {first.run_id, second.run_id}, "and keeps the true names"
    listed = raw("runs").stdout.decode()
    assert "20261201-005642-demo-cmp" in listed and "20261201-005700-demo-cmp" in listed
    attached = raw("attach", first.run_id, "--headless", "--log").stdout.decode()
    assert "rank 1 failed:" in attached and "the job said" in attached and "in the log" in attached


def screen_text(app) -> str:
    """What the screen shows, from Textual's own screenshot of it (SVG text, entities decoded)."""
    return html.unescape(app.export_screenshot()).replace("\xa0", " ")


async def test_the_tui_draws_hostile_runs_without_their_sequences(hostile_folders):
    from gpuwizard.tui.app import GpuWizardApp
    from gpuwizard.tui.monitor.screen import MonitorScreen
    from gpuwizard.tui.screens.runs import CompareScreen, RunsScreen

    first, second = hostile_folders
    app = GpuWizardApp(run=first)
    async with app.run_test(size=(120, 40)) as pilot:

        async def until(predicate, timeout: float = 30) -> bool:
            for _ in range(int(timeout / 0.05)):
                if predicate():
                    return True
                await pilot.pause(0.05)
            return False

        assert await until(lambda: isinstance(app.screen, MonitorScreen) and app.screen.events)
        screen = app.screen
        assert await until(lambda: screen.query_one("#banner").display and screen.query_one("#log").line_count > 3)
        log = screen.query_one("#log")
        log.follow(True)
        await pilot.pause(0.3)
        drawn = screen_text(app)
        assert "rank 1 failed:" in drawn and "in the log" in drawn, "the event line and the log pane are drawn"
        assert_inert(drawn, "the monitor (event line, banner, toast, title, log pane)")
        await pilot.press("ctrl+l")
        assert await until(lambda: isinstance(app.screen, RunsScreen) and len(app.screen.rows) == 2)
        await pilot.pause(0.3)
        drawn = screen_text(app)
        assert "20261201-005642" in drawn
        assert_inert(drawn, "the Runs screen")
        await pilot.press("space", "down", "space", "c")
        assert await until(lambda: isinstance(app.screen, CompareScreen) and app.screen.result is not None)
        await pilot.pause(0.3)
        drawn = screen_text(app)
        assert "reached loss" in drawn
        assert_inert(drawn, "the compare view")


# -- item 3: the sockets of a single-node run ------------------------------------------------------------------------

LISTENER = re.compile(r"^LISTEN\s+\d+\s+\d+\s+(?P<addr>\S+):(?P<port>\d+)\s+\S+\s+users:\((?P<users>.*)\)$")


def listeners() -> list[tuple[str, int, set[int]]]:
    """Every listening TCP socket on this machine as `ss -ltnp` reports it: (address, port, owning pids)."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=30).stdout
    found = []
    for line in out.splitlines():
        match = LISTENER.match(line.strip())
        if match:
            pids = {int(p) for p in re.findall(r"pid=(\d+)", match["users"])}
            found.append((match["addr"].strip("[]"), int(match["port"]), pids))
    return found


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def lan_address() -> str | None:
    """A non-loopback address of this machine, for a host name that resolves to it (as on most servers)."""
    if shutil.which("ip") is None:
        return None
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True).stdout
    found = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", out)
    return found[1] if found else None


def as_a_lan_host(argv: list[str], tmp_path: Path) -> list[str]:
    """argv run where this machine's name resolves to its LAN address, as on most servers (here it resolves to
    127.0.0.1, which would hide the problem): a private /etc/hosts and host name in new mount and UTS namespaces.
    As it is where that cannot be done (not root, no unshare)."""
    address = lan_address()
    if os.geteuid() != 0 or shutil.which("unshare") is None or address is None:
        return argv
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{address} gpuwizard-lan-host\n")
    inner = (
        f"mount --bind {shlex.quote(str(hosts))} /etc/hosts && hostname gpuwizard-lan-host && exec {shlex.join(argv)}"
    )
    return ["unshare", "--mount", "--uts", "sh", "-c", inner]


LOOPBACK_DEMO = """\
version: 1
name: demo-sockets
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 4}}
optim: {{steps: 3000}}
mixed_precision: "no"
output_dir: {root}/out
trainer_options: {{log_every: 5, step_time_s: 0.05}}
"""


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_a_single_node_run_keeps_the_ranks_sockets_on_loopback(tmp_path, write_preset):
    """A real 2-process gloo demo run: every socket its ranks listen on is on 127.0.0.1; what listens elsewhere is
    only torchrun's own two stores (the rendezvous store and the one it shares with the ranks), which torch 2.13
    binds on every interface whatever it is given (README, Safety nets)."""
    preset = write_preset(LOOPBACK_DEMO.format(root=tmp_path), "sockets.yaml")
    argv = as_a_lan_host([sys.executable, "-m", "gpuwizard", "run", "--trust", str(preset), "--headless"], tmp_path)
    job = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ))
    try:
        poll_until(lambda: list_runs() and (list_runs()[0].run.progress() or None), 180, "the demo is training")
        agent = list_runs()[0].run.status().job.pid

        def sockets() -> tuple[list, list]:
            found = listeners()
            ranks = [(a, p) for a, p, pids in found if any(parent_of(pid) == agent for pid in pids)]
            return ranks, [(a, p) for a, p, pids in found if agent in pids]

        poll_until(lambda: len(sockets()[0]) >= 2, 60, lambda: f"each rank listens (gloo): {listeners()}")
        ranks, stores = sockets()
        assert {address for address, _ in ranks} == {"127.0.0.1"}, f"the ranks listen on loopback only: {ranks}"
        assert len(stores) <= 2, f"torchrun itself listens only for its two stores: {stores}"
    finally:
        stop = gw_subprocess("stop", timeout=120)
        job.communicate(timeout=120)
    assert stop.returncode == 0, stop.stdout + stop.stderr
