"""The words one process writes and another compares (core/kinds.py): no string literal for them outside their
enum, folders written before read the same, a word from a newer version never crashes a reader, and the typed
payloads and status updates name only real fields."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import get_type_hints

import pytest

from gpuwizard.core.codes import RunState
from gpuwizard.core.kinds import EventKind, ProbeState, ProblemLevel, Severity, StopReason, SweepState
from gpuwizard.runs.events import CheckpointWait, Hang, Payload, RankVerdict, Stacks
from gpuwizard.runs.records import Event, RecordError, Status, StatusUpdate, parse_lines, parse_record
from gpuwizard.runs.sweeps import Sweep
from support.source import parsed

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuwizard"
KINDS = SRC / "core" / "kinds.py"
DATA = Path(__file__).resolve().parents[1] / "data"

WORDS: dict[str, frozenset[str]] = {
    "kind": frozenset(EventKind),
    "stop_reason": frozenset(StopReason),
    "state": frozenset(RunState) | frozenset(SweepState) | frozenset(ProbeState),
    "severity": frozenset(Severity),
    "level": frozenset(ProblemLevel),
}
"""What a field or variable of each name holds. `severity` counts only in an Event(...) call: Textual's notify takes
a severity of its own words."""


def named(node: ast.expr) -> str | None:
    """The contract field an expression reads: x.kind, row["state"], str(status.state), a variable called
    stop_reason, or a collection of them named for it (OOM_KINDS, ACTIVE_STATES)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
        return named(node.args[0])
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    if not isinstance(node, ast.Name):
        return None
    plural = {"kinds": "kind", "states": "state", "reasons": "stop_reason"}  # OOM_KINDS = {...}
    return next((field for end, field in plural.items() if node.id.lower().endswith(end)), node.id)


def strings(node: ast.AST) -> list[ast.Constant]:
    return [c for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)]


def literals(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, field, word) for each string literal a contract word is written or compared as."""
    found: list[tuple[int, str, str]] = []

    def check(field: str | None, value: ast.AST) -> None:
        if field in WORDS:
            found.extend((c.lineno, field, c.value) for c in strings(value) if c.value in WORDS[field])

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for side in operands:
                for other in operands:
                    if other is not side:
                        check(named(side), other)
        elif isinstance(node, ast.Call):
            is_event = isinstance(node.func, ast.Name) and node.func.id == "Event"
            for keyword in node.keywords:
                if keyword.arg != "severity" or is_event:
                    check(keyword.arg, keyword.value)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for part, value in zip(target.elts, node.value.elts, strict=False):
                        check(named(part), value)
                else:
                    check(named(target), node.value)
    return found


def test_no_string_literal_for_a_stop_reason_event_kind_or_state_outside_its_enum():
    found = [
        f"{path.relative_to(SRC)}:{line}: {field} {word!r}"
        for path in sorted(SRC.rglob("*.py"))
        if path != KINDS
        for line, field, word in literals(parsed(path))
    ]
    assert found == [], "write these with their enum in core/kinds.py (or core/codes.py's RunState):\n" + "\n".join(
        found
    )


def test_the_scan_finds_a_planted_literal_in_each_form_and_passes_the_enum():
    planted = """
if event.kind == "hang_suspected": pass
if row["state"] in ("queued", PENDING) or str(status.state) == "stopped": pass
Event(kind="rank_failed", severity="error", title="t")
run.state, run.error = "failed", "gone"
sup.stop_reason = sup.stop_reason or "hang"
problem("f", "m", level="warning")
OOM_KINDS = {"out_of_memory"}
"""
    assert sorted((field, word) for _, field, word in literals(ast.parse(planted))) == [
        ("kind", "hang_suspected"),
        ("kind", "out_of_memory"),
        ("kind", "rank_failed"),
        ("level", "warning"),
        ("severity", "error"),
        ("state", "failed"),
        ("state", "queued"),
        ("state", "stopped"),
        ("stop_reason", "hang"),
    ]
    clean = """
if event.kind == EventKind.HANG_SUSPECTED and preset.source == "user": pass
self.notify("Pick a run that has ended.", severity="warning")
Event(kind=EventKind.RANK_FAILED, severity=Severity.ERROR, title="error")
"""
    assert literals(ast.parse(clean)) == []


OLD_EVENTS = "\n".join(
    [
        '{"format": 1, "kind": "hang_suspected", "severity": "error", "title": "hang suspected: no progress for 61 s", '
        '"detail": "", "suggestion": "", "rank": 1, "t": 1764550000.0, "data": {"stale_s": 61.2, "limit_s": 60.0, '
        '"busy": false, "spinning": false, "cpu": {"0": 0.5, "1": 97.0}, "differing_rank": 1, "summary": "CPU per '
        'rank: rank 0 0%, rank 1 97%.", "stacks": {"ok": true, "note": "2 ranks", "per_rank": {"0": ["barrier"], '
        '"1": ["step"]}, "outside_collective": [1], "files": [], "unreadable": []}}}',
        '{"format": 1, "kind": "stop_waits_for_checkpoint", "severity": "warning", "title": "stop waits", "t": '
        '1764550100.0, "data": {"started_t": 1764550090.0, "limit_s": 30.0}}',
        '{"format": 1, "kind": "out_of_memory", "severity": "error", "title": "GPU out of memory", "t": 1764550200.0}',
    ]
)
"""events.jsonl lines as gpuwizard wrote them before the enums (the hang with its stacks as the supervisor adds
them)."""


def test_the_enums_hold_the_words_folders_already_hold():
    """A folder written before the enums reads the same: each word is the one the files hold."""
    events, bad = parse_lines(OLD_EVENTS, Event)
    assert bad == 0 and [e.kind for e in events] == [
        EventKind.HANG_SUSPECTED,
        EventKind.STOP_WAITS_FOR_CHECKPOINT,
        EventKind.OUT_OF_MEMORY,
    ]
    hang = Hang.of(events[0])
    assert hang is not None and hang.stale_s == 61.2 and hang.cpu == {0: 0.5, 1: 97.0}
    assert hang.stacks is not None and hang.stacks.per_rank[1] == ["step"] and hang.stacks.outside_collective == [1]
    assert CheckpointWait.of(events[1]) == CheckpointWait(started_t=1764550090.0, limit_s=30.0)
    assert [json.loads(e.to_json_text())["kind"] for e in events] == [
        json.loads(line)["kind"] for line in OLD_EVENTS.splitlines()
    ]
    status = Status.model_validate_json(
        (DATA / "runs" / "20261201-005642-demo-cmp" / "status.json").read_text()
    ).model_copy(update={"stop_reason": StopReason.USER_SUPERVISOR_GONE})
    written = json.loads(status.to_json_text())
    assert written["stop_reason"] == "user (supervisor was gone)" and written["state"] == str(status.state)
    assert StopReason.FOLDER_GONE == "run folder deleted" and SweepState.HUNG == "hung"


def test_a_word_from_a_newer_version_never_crashes_a_reader():
    """An unknown event kind is still shown (UNKNOWN, with its title); an unknown stop reason reads as none given;
    an unknown severity or sweep state leaves that line or record unreadable, said in one line."""
    newer = json.dumps({"format": 1, "kind": "gpu_on_fire", "severity": "error", "title": "the GPU is on fire"})
    louder = json.dumps({"format": 1, "kind": "rank_failed", "severity": "critical", "title": "t"})
    events, bad = parse_lines("\n".join([newer, louder]), Event)
    assert [(e.kind, e.severity, e.title) for e in events] == [(EventKind.UNKNOWN, "error", "the GPU is on fire")]
    assert bad == 1
    status = json.loads((DATA / "runs" / "20261201-005642-demo-cmp" / "status.json").read_text())
    assert parse_record(json.dumps(status | {"stop_reason": "cosmic ray"}), Status, "s").stop_reason is None
    assert parse_record(json.dumps(status | {"stop_reason": "hang"}), Status, "s").stop_reason is StopReason.HANG
    sweep = {
        "format": 1,
        "sweep_id": "s",
        "preset": "p",
        "source": "p.yaml",
        "created": 1.0,
        "grid": {},
        "workdir": "/",
        "runs": [{"index": 0, "values": {}, "preset_file": "runs/00.yaml", "processes": 1, "device": "cpu"}],
    }
    assert parse_record(json.dumps(sweep), Sweep, "sweep.json").runs[0].state is SweepState.QUEUED
    sweep["runs"][0]["state"] = "paused"
    with pytest.raises(RecordError, match=r"^sweep.json is damaged: .*state.*paused") as raised:
        parse_record(json.dumps(sweep), Sweep, "sweep.json")
    assert "\n" not in str(raised.value)


def test_a_status_update_names_only_status_fields_with_their_types():
    fields = Status.model_fields
    assert set(StatusUpdate.__annotations__) <= set(fields) - {"format", "run_id"}
    hints = get_type_hints(StatusUpdate)
    assert hints["stop_reason"] == StopReason | None and hints["state"] is RunState


def test_a_payload_round_trips_through_a_line_and_a_foreign_one_reads_as_none():
    verdict = RankVerdict(busy=False, spinning=True, cpu={0: 99.0, 1: 1.0}, differing_rank=1, summary="rank 1")
    stacks = Stacks(ok=True, note="2 ranks", per_rank={0: ["f"], 1: ["g"]}, outside_collective=[1], files=["a"])
    hang = Hang(stale_s=61.0, limit_s=60.0, stacks=stacks, **verdict.data())
    event = Event(kind=EventKind.HANG_SUSPECTED, severity=Severity.ERROR, title="hang", data=hang.data())
    (read,), _ = parse_lines(event.to_json_text(), Event)
    assert Hang.of(read) == hang and RankVerdict.of(read) == verdict, "extra keys are left aside"
    wait = CheckpointWait(started_t=100.0, limit_s=30.0)
    assert (
        CheckpointWait.of(
            Event(kind=EventKind.STOP_WAITS_FOR_CHECKPOINT, severity=Severity.WARNING, title="w", data=wait.data())
        )
        == wait
    )
    foreign = Event(kind=EventKind.HANG_SUSPECTED, severity=Severity.ERROR, title="old", data={"stale_s": "soon"})
    assert Hang.of(foreign) is None and CheckpointWait.of(foreign) is None
    assert all(issubclass(p, Payload) for p in (CheckpointWait, Hang, RankVerdict, Stacks))
