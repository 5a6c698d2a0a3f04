"""Long listings (issue 29): `gpuwizard runs` and `presets list` list the same rows whether a file is read or its
summary remembered (core/statcache.py), name damaged runs and presets, hide probe runs unless asked, and read a
file again as soon as it changes."""

from __future__ import annotations

import json
import shutil

import pytest

from gpuwizard.core import paths, statcache
from gpuwizard.model.catalog import load_catalog
from gpuwizard.model.preset_files import preset_listing
from gpuwizard.runs.listing import listed_runs
from gpuwizard.runs.records import MAX_RECORD_INT, Event, RecordError, Status, parse_record
from gpuwizard.runs.rundir import RunDir
from support.data import DATA
from support.presets import user_preset

SAMPLE = DATA / "runs" / "20261201-005642-demo-cmp"
PRESET = (paths.shipped_presets_dir() / "demo-cpu.yaml").read_text()


@pytest.fixture
def remembered(monkeypatch):
    """Files written by the test are remembered at once (a user's are after RACY_S): the cache path is exercised."""
    monkeypatch.setattr(statcache, "RACY_S", 0.0)


def history(*kinds: str) -> dict[str, RunDir]:
    """One real finished run per kind: "finished", "probe" (a probe's measurement), "damaged" (status truncated)."""
    made = {}
    for n, kind in enumerate(kinds):
        run = RunDir(paths.runs_dir() / f"20261201-0100{n:02d}-demo-{kind}")
        shutil.copytree(SAMPLE, run.path)
        run.update_status(run_id=run.run_id, preset=f"demo-{kind}", probe="p1" if kind == "probe" else None)
        if kind == "damaged":
            (run.path / "status.json").write_text('{"format": 1, "run_id": "x", "pre')
        made[kind] = run
    return made


def test_runs_lists_damaged_runs_by_name_and_hides_probes_until_asked(gw, remembered):
    runs = history("finished", "probe", "damaged")
    for _ in range(2):  # read, then remembered: the same rows
        listed = gw("runs")
        assert listed.code == 0, listed.err
        assert runs["finished"].run_id in listed.out and runs["probe"].run_id not in listed.out
        damaged = next(line for line in listed.out.splitlines() if line.startswith(runs["damaged"].run_id))
        assert damaged.split()[1:5] == ["corrupt", "status.json", "is", "not"], damaged
        assert "1 probe runs hidden: --probes lists them" in listed.out
        with_probes = gw("runs", "--probes", "--json").json()
        assert {r["run_id"]: r["state"] for r in with_probes} == {
            runs["finished"].run_id: "finished",
            runs["probe"].run_id: "finished",
            runs["damaged"].run_id: "corrupt",
        }
        assert next(r for r in with_probes if r["run_id"] == runs["probe"].run_id)["probe"] == "p1"


def test_a_remembered_run_is_read_again_once_its_files_change(remembered):
    runs = history("finished", "other")
    first = {e.run.run_id: e for e in listed_runs()}
    assert first[runs["finished"].run_id].status.state == "finished"
    assert list((paths.data_dir() / "cache").glob("runs-*.json")), "ended runs are remembered"
    runs["finished"].update_status(state="stopped", stop_reason="user")
    (runs["other"].path / "progress.json").write_text(json.dumps({"format": 1, "step": 7, "samples_per_s": 5.0}))
    again = {e.run.run_id: e for e in listed_runs()}
    assert again[runs["finished"].run_id].status.state == "stopped"
    assert again[runs["other"].run_id].run.progress().step == 7
    (runs["other"].path / "status.json").write_text("[]")
    damaged = {e.run.run_id: e for e in listed_runs()}[runs["other"].run_id]
    assert damaged.status is None and "holds list, not a record" in damaged.problem


def test_a_damaged_or_foreign_cache_costs_only_the_reads(remembered):
    runs = history("finished")
    listed_runs()
    (cache,) = (paths.data_dir() / "cache").glob("runs-*.json")
    data = json.loads(cache.read_text())
    (key,) = data["entries"]
    summary = data["entries"][key][1]
    summary["status"] = summary["status"].replace('"world_size":1', '"world_size":"two"')  # not what a status holds
    assert '"two"' in summary["status"], "the cache keeps each record as JSON text"
    cache.write_text(json.dumps(data))
    assert [e.status.world_size for e in listed_runs()] == [1], "read from the file instead"
    for garbage in ("{", "[]", json.dumps({"version": "0.0.0", "folder": "x", "entries": {}})):
        cache.write_text(garbage)
        assert [e.run.run_id for e in listed_runs()] == [runs["finished"].run_id]


def test_presets_list_names_invalid_presets_and_sees_every_change(gw, remembered):
    user_preset("fine", PRESET.replace("name: demo-cpu", "name: fine"))
    user_preset("broken", PRESET.replace("gpus: 2", "gpus: many"))
    for _ in range(2):  # read, then remembered
        rows = {p.name: p for p in preset_listing()}
        assert rows["fine"].workers() == "2 processes" and rows["fine"].trainer == "demo"
        assert "hardware.gpus = 'many': must be a whole number" in rows["broken"].problem
        assert rows["demo-gpu"].source == "shipped" and rows["demo-gpu"].workers() == "1 GPU"
    changed = PRESET.replace("name: demo-cpu", "name: fine").replace("description: The", "description: Now the")
    user_preset("fine", changed)  # in place, at once: only its size tells (a user's edit is older than RACY_S)
    assert {p.name: p.description for p in preset_listing()}["fine"].startswith("Now the built-in demo")
    (paths.config_dir() / "policies.yaml").write_text("demo: []\n")  # the catalog decides what is valid
    load_catalog.cache_clear()  # as a new process reads it
    assert {p.name: p.problem for p in preset_listing()}["fine"] is not None
    (paths.config_dir() / "policies.yaml").unlink()
    load_catalog.cache_clear()
    (paths.user_presets_dir() / "broken.yaml").unlink()
    rows = {p.name: p for p in preset_listing()}
    assert "broken" not in rows and rows["fine"].problem is None


BIG = MAX_RECORD_INT + 1


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        (Status, json.dumps(json.loads((SAMPLE / "status.json").read_text()) | {"steps": BIG})),
        (Event, json.dumps({"format": 1, "kind": "x", "severity": "info", "title": "t", "data": {"n": [1, -BIG]}})),
    ],
)
def test_a_whole_number_past_the_bound_is_refused_wherever_it_is(kind, text):
    """The fast path of the bound (plain strings, floats and small ints) leaves no way round it."""
    with pytest.raises(RecordError, match="past 9,007,199,254,740,992"):
        parse_record(text, kind, "record")
