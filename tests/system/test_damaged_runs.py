"""The damaged-folder campaign: each kind of corrupt, hostile or unreadable run folder, and every command run against
it (runs, runs --json, attach, attach --headless, stop, compare, plan and run of the preset sharing the data folder).
None may print a traceback or outlive its timeout, and each names the damaged run or file and why."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuwizard.core import paths
from support.callers import Outcome, drawn, gw_call, gw_tui, unprivileged_reader_available
from support.data import DATA

GOOD = DATA / "runs" / "20261201-005642-demo-cmp"
SAMPLE = DATA / "runs" / "20261201-005700-demo-cmp"
DEEP = 100_000


def rewrite(name: str, edit: Callable[[dict], object]) -> Callable[[Path], None]:
    """Damage that edits one JSON record of the folder, written back as Python's json writes it (Infinity, NaN)."""

    def damage(run: Path) -> None:
        data = json.loads((run / name).read_text())
        edit(data)
        (run / name).write_text(json.dumps(data))

    return damage


def replace_with(name: str, make: Callable[[Path], None]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        target = run / name
        if target.exists() or target.is_symlink():
            target.unlink()
        make(target)

    return damage


def text(body: str) -> Callable[[Path], None]:
    return lambda target: target.write_text(body)


def deep_list(prefix: str = "", suffix: str = "") -> str:
    return prefix + "[" * DEEP + "]" * DEEP + suffix


def sparse(size: int) -> Callable[[Path], None]:
    def make(target: Path) -> None:
        with open(target, "wb") as fh:
            fh.truncate(size)

    return make


def chmod(name: str | None, mode: int) -> Callable[[Path], None]:
    return lambda run: os.chmod(run / name if name else run, mode)


def lost_read_only(run: Path) -> None:
    """A run that claims to be running, its supervisor long gone, in a folder nobody may write."""
    rewrite("status.json", lambda s: s.update(state="running", ended=None, exit_code=None))(run)
    os.chmod(run, 0o500)


@dataclass(frozen=True)
class Damage:
    make: Callable[[Path], None]
    named: str
    """What a command that reads the damaged file says: `runs`, attach, stop and compare for a damaged status;
    attach --headless for the files it follows; compare for the plan."""
    status: bool = True
    """The status cannot be read: `runs` lists the run as corrupt; attach, stop and compare refuse in one paragraph."""
    unprivileged: bool = False
    """Needs a reader without root's permission override (mode 000 files are readable by root)."""
    compare_refuses: bool = False


def raw(name: str, old: str, new: str) -> Callable[[Path], None]:
    """Damage written as JSON text: numbers JSON can spell that no record may hold (1e400, 400 digits)."""

    def damage(run: Path) -> None:
        path = run / name
        before = path.read_text()
        assert old in before, (name, old)
        path.write_text(before.replace(old, new))

    return damage


DAMAGES: dict[str, Damage] = {
    "status: nested arrays in a value": Damage(
        replace_with("status.json", text(deep_list('{"format": 1, "run_id": ', "}"))), "nests too deep"
    ),
    "status: nested arrays": Damage(replace_with("status.json", text(deep_list())), "nests too deep"),
    "status: ended Infinity": Damage(rewrite("status.json", lambda s: s.update(ended=float("inf"))), "ended"),
    "status: ended 1e400": Damage(raw("status.json", '"ended":1796086641.5378213', '"ended":1e400'), "ended"),
    "status: created -1e308": Damage(
        rewrite("status.json", lambda s: s.update(created=-1e308, started=-1e308)), "created"
    ),
    "status: started NaN": Damage(rewrite("status.json", lambda s: s.update(started=float("nan"))), "started"),
    "status: a 400-digit exit code": Damage(
        raw("status.json", '"exit_code":0', '"exit_code":' + "1" * 400), "exit_code"
    ),
    "status: a pid past any pid": Damage(
        rewrite(
            "status.json",
            lambda s: s.update(state="running", survivors=[10**30], supervisor=dict(s["supervisor"], pid=10**30)),
        ),
        "pid",
    ),
    "status: markup in a value": Damage(rewrite("status.json", lambda s: s.update(preset=["[/bold]"])), "[/bold]"),
    "status: world_size 0": Damage(rewrite("status.json", lambda s: s.update(world_size=0)), "world_size"),
    "status: a FIFO": Damage(replace_with("status.json", os.mkfifo), "not a regular file"),
    "status: a folder": Damage(replace_with("status.json", os.mkdir), "not a regular file"),
    "status: a symlink loop": Damage(replace_with("status.json", lambda t: os.symlink(t.name, t)), "symbolic links"),
    "status: /dev/zero": Damage(replace_with("status.json", lambda t: os.symlink("/dev/zero", t)), "not a regular"),
    "status: 64 MiB": Damage(replace_with("status.json", sparse(64 << 20)), "bytes, more than"),
    "log: a FIFO": Damage(replace_with("log.txt", os.mkfifo), "log.txt cannot be read", status=False),
    "log: a folder": Damage(replace_with("log.txt", os.mkdir), "log.txt cannot be read", status=False),
    "log: a symlink loop": Damage(
        replace_with("log.txt", lambda t: os.symlink(t.name, t)), "log.txt cannot be read", status=False
    ),
    "events: a FIFO": Damage(replace_with("events.jsonl", os.mkfifo), "events.jsonl cannot be read", status=False),
    "events: nested arrays and Infinity": Damage(
        replace_with(
            "events.jsonl",
            text(deep_list() + '\n{"format": 1, "kind": "x", "severity": "info", "title": "t", "t": Infinity}\n'),
        ),
        "",
        status=False,
    ),
    "metrics: a FIFO": Damage(replace_with("metrics.jsonl", os.mkfifo), "metrics.jsonl cannot be read", status=False),
    "metrics: Infinity and huge steps": Damage(
        replace_with(
            "metrics.jsonl",
            text(
                '{"format":1,"t":Infinity,"step":10,"loss":0.5}\n{"format":1,"t":1796086626.6,"step":'
                + "9" * 400
                + ',"loss":0.5}\n{"format":1,"t":1796086626.6,"step":10,"loss":Infinity}\n'
            ),
        ),
        "",
        status=False,
    ),
    "ranks: a FIFO": Damage(replace_with("ranks.jsonl", os.mkfifo), "ranks.jsonl cannot be read", status=False),
    "gpu: a FIFO": Damage(replace_with("gpu.jsonl", os.mkfifo), "gpu.jsonl cannot be read", status=False),
    "progress: a FIFO": Damage(replace_with("progress.json", os.mkfifo), "", status=False),
    "progress: Infinity and a huge step": Damage(
        rewrite("progress.json", lambda p: p.update(eta_s=float("inf"), samples_per_s=float("inf"), step=10**30)),
        "",
        status=False,
    ),
    "plan: world_size 0": Damage(
        rewrite("plan.json", lambda p: p.update(world_size=0)), "plan.json", status=False, compare_refuses=True
    ),
    "plan: nested arrays": Damage(
        replace_with("plan.json", text(deep_list('{"world_size": 1, "x": ', "}"))),
        "plan.json",
        status=False,
        compare_refuses=True,
    ),
    "plan: a FIFO": Damage(replace_with("plan.json", os.mkfifo), "plan.json", status=False, compare_refuses=True),
    "preset.yaml: an alias bomb": Damage(
        replace_with(
            "preset.yaml",
            text(
                "a: &a0 [x, x, x, x, x, x, x, x, x]\n"
                + "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9))
            ),
        ),
        "",
        status=False,
    ),
    "folder: mode 000": Damage(chmod(None, 0), "Permission denied", unprivileged=True),
    "status: mode 000": Damage(chmod("status.json", 0), "Permission denied", unprivileged=True),
    "log: mode 000": Damage(chmod("log.txt", 0), "log.txt cannot be read", status=False, unprivileged=True),
    "events: mode 000": Damage(
        lambda run: ((run / "events.jsonl").write_text(""), os.chmod(run / "events.jsonl", 0)),
        "events.jsonl cannot be read",
        status=False,
        unprivileged=True,
    ),
    "folder: read-only, supervisor lost": Damage(
        lost_read_only, "its stop cannot be recorded", status=False, unprivileged=True
    ),
}


# -- the folders ------------------------------------------------------------------------------------------------
def place(sample: Path, name: str) -> Path:
    """A copy of a real finished run under the data folder, renamed."""
    target = paths.runs_dir() / name
    shutil.copytree(sample, target)
    status = target / "status.json"
    status.write_text(status.read_text().replace(sample.name, name))
    return target


def camp_preset() -> None:
    """The user preset the damaged runs belong to (demo-cmp), small enough to run in seconds."""
    text = (SAMPLE / "preset.yaml").read_text()
    text = text.replace("  gpus: 2", "  gpus: 1").replace("  root: /tmp/cmp/dataset", "  root: null")
    text = text.replace("output_dir: /tmp/cmp/out", f"output_dir: {paths.data_dir() / 'out'}")
    folder = paths.user_presets_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "demo-cmp.yaml").write_text(text)


def damaged_id(kind: str) -> str:
    return f"20261129-13{list(DAMAGES).index(kind):04d}-demo-cmp"


def make_damaged(kind: str) -> str:
    run_id = damaged_id(kind)
    DAMAGES[kind].make(place(SAMPLE, run_id))
    return run_id


def restore_modes(base: Path) -> None:
    """Let pytest remove what the campaign locked."""
    for root, dirs, files in os.walk(base):
        for name in dirs + files:
            path = Path(root) / name
            if not path.is_symlink():
                os.chmod(path, 0o700)
    if base.exists():
        os.chmod(base, 0o700)


@pytest.fixture
def data_with_good_run(tmp_path):
    paths.runs_dir().mkdir(parents=True, mode=0o700)
    place(GOOD, GOOD.name)
    camp_preset()
    yield
    restore_modes(paths.runs_dir())


# -- the campaign -----------------------------------------------------------------------------------------------
def strict_json(text: str) -> object:
    """JSON as other programs read it: NaN and Infinity are not JSON."""

    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def check(
    outcome: Outcome, problems: list[str], *, code: int | set[int] | None = None, says: str | tuple[str, ...] = ()
) -> None:
    """No traceback, no hang, the expected exit code and words; a failure is noted, not raised, to list them all."""
    what = " ".join(outcome.argv)
    codes = {code} if isinstance(code, int) else code
    missing = [words for words in ((says,) if isinstance(says, str) else says) if words not in outcome.output]
    if outcome.hung:
        problems.append(f"{what}: hung for {outcome.seconds:.0f} s")
    elif outcome.traceback:
        problems.append(f"{what}: traceback\n{outcome.output[-1500:]}")
    elif codes is not None and outcome.code not in codes:
        problems.append(f"{what}: exit {outcome.code}, wanted {sorted(codes)}\n{outcome.output[-800:]}")
    elif missing:
        problems.append(f"{what}: does not say {missing[0]!r}\n{outcome.output[-800:]}")


def campaign(kind: str) -> tuple[list[Outcome], list[str]]:
    """Every command against one damaged run (and the healthy one beside it); the outcomes and what went wrong."""
    damage, run_id = DAMAGES[kind], make_damaged(kind)
    low = damage.unprivileged
    problems: list[str] = []
    outcomes = []

    def call(*args: str, **expect: object) -> Outcome:
        outcome = gw_call(*args, unprivileged=low)
        outcomes.append(outcome)
        check(outcome, problems, **expect)  # type: ignore[arg-type]
        return outcome

    listed = call("runs", code=0, says=run_id)
    row = next((line for line in listed.output.splitlines() if line.startswith(run_id[:36])), "")
    if damage.status and not (" corrupt " in row and damage.named in row):
        problems.append(f"runs: the damaged run is not listed as corrupt saying {damage.named!r}: {row!r}")
    as_json = call("runs", "--json", code=0)
    if not as_json.hung and as_json.code == 0:
        try:
            rows = {r["run_id"]: r for r in strict_json(as_json.output)}  # type: ignore[union-attr]
            if damage.status and rows[run_id]["state"] != "corrupt":
                problems.append(f"runs --json: {rows[run_id]}")
        except (ValueError, KeyError) as exc:
            problems.append(f"runs --json is not a JSON list naming the run: {exc}")
    refused = {"code": 2, "says": (run_id, damage.named)}
    followed = {"says": "" if damage.compare_refuses else damage.named}  # the follower reads all but the plan
    call("attach", run_id, "--headless", **(refused if damage.status else followed))
    call("stop", run_id, **(refused if damage.status else {}))
    compared = refused if damage.status or damage.compare_refuses else {"code": 0}
    call("compare", run_id, GOOD.name, **compared)
    call("plan", "demo-cmp", code=0)
    if not damage.status:  # the monitor opens: it names a file it cannot follow in a notification
        shown = damage.named if damage.named.endswith("cannot be read") else "View"
        outcomes.append(gw_tui("attach", run_id, shows=shown, unprivileged=low))
        check(outcomes[-1], problems, code=0)
        if not outcomes[-1].hung and not drawn(outcomes[-1].output.encode(), shown):
            problems.append(f"tui attach {run_id}: never drew {shown!r}")
    return outcomes, problems


def privileged_kinds() -> list[str]:
    return [kind for kind, damage in DAMAGES.items() if not damage.unprivileged]


def unprivileged_kinds() -> list[str]:
    return [kind for kind, damage in DAMAGES.items() if damage.unprivileged]


@pytest.mark.parametrize("kind", privileged_kinds())
def test_every_command_on_a_damaged_run_answers_without_a_traceback(data_with_good_run, kind):
    _, problems = campaign(kind)
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize("kind", unprivileged_kinds())
def test_every_command_on_an_unreadable_run_answers_without_a_traceback(data_with_good_run, kind):
    reason = unprivileged_reader_available()
    if reason:
        pytest.skip(reason)
    _, problems = campaign(kind)
    assert not problems, "\n\n".join(problems)


def test_a_data_folder_full_of_damage_still_lists_plans_and_runs(data_with_good_run):
    """Every kind at once: `runs` names each damaged run once, and plan and run of their preset work beside them.
    (The run left claiming to be running is not among them: `stop` and `attach` would rightly pick it.)"""
    low = unprivileged_reader_available() is None
    kinds = [kind for kind, damage in DAMAGES.items() if (low or not damage.unprivileged) and "lost" not in kind]
    for kind in kinds:
        make_damaged(kind)
    problems: list[str] = []
    listed = gw_call("runs", unprivileged=low)
    check(listed, problems, code=0)
    for kind in kinds:
        if DAMAGES[kind].status and sum(line.startswith(damaged_id(kind)) for line in listed.output.splitlines()) != 1:
            problems.append(f"runs does not list {kind} once")
    check(gw_call("runs", "--json", unprivileged=low), problems, code=0)
    check(gw_call("stop", unprivileged=low), problems, code=0)
    check(gw_call("attach", "--headless", unprivileged=low), problems, code=0, says="attached to ")
    check(gw_call("plan", "demo-cmp", "--gpus", "2", unprivileged=low), problems, code=0)
    ran = gw_call("run", "demo-cmp", "--headless", "--smoke", unprivileged=low, timeout=300)
    check(ran, problems, code=0, says="finished green")
    assert not problems, "\n\n".join(problems)


async def test_the_runs_screen_lists_damaged_runs_with_their_reason(data_with_good_run):
    """ended: Infinity crashed the screen; a nested-array status left it empty without a word."""
    from textual.widgets import DataTable

    from gpuwizard.tui.app import GpuWizardApp
    from gpuwizard.tui.screens.runs import RunsScreen
    from support.tui import wait_until

    reasons = {
        "status: ended Infinity": "ended = inf",
        "status: nested arrays in a value": "nests too deep",
        "status: markup in a value": "preset = ['[/bold]']",  # drawn as text, not read as a closing tag
    }
    for kind in reasons:
        make_damaged(kind)
    app = GpuWizardApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+l")
        assert await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen) and len(app.screen.rows) == 4, 30)
        table = app.screen.query_one("#runs-table", DataTable)
        cells = {key.value: [str(cell) for cell in table.get_row(key)] for key in table.rows}
        for kind, reason in reasons.items():
            assert cells[damaged_id(kind)][1] == "corrupt" and reason in cells[damaged_id(kind)][-1], cells
        assert cells[GOOD.name][1] == "finished"
        assert "(4 runs)" in str(app.screen.query_one("#runs-hint").render())


async def test_the_runs_screen_says_when_the_history_cannot_be_read(data_with_good_run, monkeypatch):
    """Whatever fails while the history is read is said on the screen, not left as an empty table."""
    from gpuwizard.core.errors import UserError, problem
    from gpuwizard.runs import listing
    from gpuwizard.tui.app import GpuWizardApp
    from gpuwizard.tui.screens.runs import RunsScreen
    from support.tui import wait_until

    def unreadable(*args: object, **kwargs: object) -> list:
        raise UserError(problem(None, "the runs folder /x cannot be read: Permission denied", "make it yours"))

    monkeypatch.setattr(listing, "listed_runs", unreadable)
    app = GpuWizardApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+l")

        def hint() -> str:
            return str(app.screen.query_one("#runs-hint").render()) if isinstance(app.screen, RunsScreen) else ""

        assert await wait_until(pilot, lambda: "cannot be read: Permission denied" in hint(), 30), hint()
