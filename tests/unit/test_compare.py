"""`gpuwizard compare`: the arithmetic on known curves, and the comparison of recorded demo runs (1 and 2 processes);
on runs made here: tests/system/test_compare_runs.py."""

from __future__ import annotations

import json
import shutil

import pytest

from gpuwizard.analysis.compare.runs import CurvePoint, RunFacts, at_samples, compare, compare_text, time_to, verdict
from gpuwizard.runs.rundir import RunDir
from support.data import DATA
from support.runs import copy_runs

TWO_PROCESS_RUNS = ("20261129-120000-demo-cpu", "20261201-005700-demo-cmp")
"""Two real finished demo runs, both on 2 CPU processes: the demo-cpu preset (linear_lr) and demo-cmp (rule none)."""
ONE_PROCESS_RUN = "20261201-005642-demo-cmp"


def facts(run_id: str, gpus: int, time_to_target: float, loss_eq: float) -> RunFacts:
    return RunFacts(
        run_id=run_id,
        preset="p",
        gpus=gpus,
        device="cuda",
        state="finished",
        duration_s=time_to_target,
        samples_per_s=100.0 * gpus,
        samples_seen=None,
        gpu_hours=gpus * time_to_target / 3600,
        cost=None,
        final_loss=0.05,
        time_to_target_s=time_to_target,
        gpu_hours_to_target=gpus * time_to_target / 3600,
        loss_at_equal_samples=loss_eq,
    )


def test_interpolation_between_logged_points():
    curve = [CurvePoint(0, 0, 1.0), CurvePoint(100, 10, 0.5), CurvePoint(200, 30, 0.1)]
    assert at_samples(curve, 50) == pytest.approx(0.75)
    assert at_samples(curve, 200) == pytest.approx(0.1)
    assert at_samples(curve, 201) is None, "never extrapolated past what the run saw"
    assert at_samples(curve, 20, by_time=True) == pytest.approx(0.3)
    assert time_to(curve, 0.3) == pytest.approx(20.0)
    assert time_to(curve, 0.05) is None


@pytest.mark.parametrize(
    "other_time, loss_eq, expected",
    [
        (
            620,
            1.0,
            "2 GPUs (b) reached loss 0.05 in 0.62x the time of 1 (a) for 1.24x the GPU-hours: pays for "
            "wall-clock, costs 24% more compute.",
        ),
        (450, 1.0, "in 0.45x the time of 1 (a) for 0.90x the GPU-hours: pays: sooner, for about the same compute"),
        (1000, 1.0, "in 1.00x the time of 1 (a) for 2.00x the GPU-hours: does not pay: no sooner, and costs more"),
        (1300, 1.0, "does not pay: slower."),
        (620, 1.3, "Per sample it learned less (loss 1.30x at equal samples)"),
    ],
)
def test_the_verdict_in_plain_words(other_time, loss_eq, expected):
    base, other = facts("a", 1, 1000, 1.0), facts("b", 2, other_time, loss_eq)
    assert expected in verdict(base, other, 0.05)


def recorded(data, *names: str) -> list[RunDir]:
    copy_runs(data, *names)
    return [RunDir(data / "runs" / name) for name in names]


def test_two_runs_on_the_same_count_are_a_run_to_run_difference_that_names_what_differs(isolated_dirs):
    """Two 2-process runs measure no scaling: no speedup, efficiency or "pays", but what differs and by how much."""
    result = compare(recorded(isolated_dirs / "data", *TWO_PROCESS_RUNS))
    assert [(f.speedup, f.efficiency) for f in result.runs] == [(None, None), (None, None)]
    text = compare_text(result)
    for claim in ("as fast", "efficiency", "pay", "fewest", "1.23x", "123%"):
        assert claim not in text, f"{claim!r} claims a scaling the runs cannot show:\n{text}"
    assert "run proc   smp/s  speed  eff" in text, "CPU runs count processes, not GPUs"
    assert "all runs on 2 processes: no speedup to measure; below, how they differ" in text
    [paragraph] = result.verdicts
    assert paragraph.startswith(
        "20261201-005700-demo-cmp and 20261129-120000-demo-cpu both ran on 2 processes, so they say nothing about "
        "scaling: they differ in"
    ), paragraph
    for differs in (
        "lr 0.001 against 0.002",
        "scaling rule none against linear_lr",
        "warmup steps none against 15",
        "trainer_options.step_time_s 0.02 against default",
        "preset demo-cmp against demo-cpu",
    ):
        assert differs in paragraph, differs
    assert "machine" not in paragraph, "demo-cpu's folder records no environment: the machine is unknown, not different"
    assert "394 samples/s against 320 (+23%) and took 20 s against 15 s (+36%)" in paragraph
    assert (
        result.runs[1].same_count_as == result.runs[0].run_id and "lr 0.001 against 0.002" in result.runs[1].differences
    )


def test_runs_that_share_a_count_are_compared_across_counts_only(isolated_dirs):
    """1, 1 again and 2 processes: the second 1-process run gets no speedup against the first, only its difference;
    both counts' runs are compared with each other across counts."""
    data = isolated_dirs / "data"
    again = data / "runs" / "20261201-010000-demo-cmp"
    shutil.copytree(DATA / "runs" / ONE_PROCESS_RUN, again)
    status = json.loads((again / "status.json").read_text())
    (again / "status.json").write_text(json.dumps(status | {"run_id": again.name}))
    one, two = recorded(data, ONE_PROCESS_RUN, "20261201-005700-demo-cmp")
    result = compare([two, RunDir(again), one])
    rows = {f.run_id: f for f in result.runs}
    assert result.base == ONE_PROCESS_RUN
    assert rows[again.name].speedup is None and rows[again.name].efficiency is None
    assert rows[two.run_id].speedup == pytest.approx(394.19655 / 240.68276)
    scaling, same = result.verdicts
    assert scaling.startswith(f"2 processes ({two.run_id}) reached loss") and "process-hours" in scaling
    assert same.startswith(f"{again.name} and {ONE_PROCESS_RUN} both ran on 1 process, so they say nothing about")
    assert "they differ in nothing gpuwizard records" in same
    text = compare_text(result)
    assert f"speed and eff: against {ONE_PROCESS_RUN}, the fewest processes" in text
    assert "GPU" not in text, text


def test_the_curve_legend_counts_processes_for_cpu_runs(isolated_dirs):
    from gpuwizard.analysis.compare.runs import curve_label

    one, two = compare(recorded(isolated_dirs / "data", ONE_PROCESS_RUN, "20261201-005700-demo-cmp")).runs
    assert (curve_label(one, "A"), curve_label(two, "B")) == ("A: 1 process", "B: 2 processes")
    assert curve_label(RunFacts(**{**vars(two), "device": "cuda"}), "B") == "B: 2 GPUs"


def test_a_run_that_trained_no_step_is_not_called_noise(isolated_dirs):
    """A run stopped before its first step beside a finished one (a new user's walk): its time is start-up, so the
    comparison says it trained nothing instead of "they differ in nothing ... so the gap is noise"."""
    data = isolated_dirs / "data"
    empty = data / "runs" / "20261201-010000-demo-cmp"
    shutil.copytree(DATA / "runs" / ONE_PROCESS_RUN, empty)
    status = json.loads((empty / "status.json").read_text())
    (empty / "status.json").write_text(json.dumps(status | {"run_id": empty.name, "state": "stopped"}))
    (empty / "metrics.jsonl").write_text("")
    (empty / "progress.json").unlink(missing_ok=True)
    (one,) = recorded(data, ONE_PROCESS_RUN)
    result = compare([RunDir(empty), one])
    [paragraph] = result.verdicts
    assert f"{empty.name} trained no step, so there is nothing to compare" in paragraph, paragraph
    assert "noise" not in paragraph


def test_an_efficiency_above_100_percent_is_never_said_as_a_fact():
    """Issue 35: compare printed 2 GPUs at 2.4x the samples/s of 1 with no caveat; at the same batch per device no
    added GPU gives that, so the paragraph and the table's notes say the load differed."""
    one, two = facts("a", 1, 100.0, 0.05), facts("b", 2, 40.0, 0.05)
    one.per_device_batch = two.per_device_batch = 8
    two.speedup, two.efficiency = 2.4, 1.2
    said = verdict(one, two, 0.05)
    assert said.endswith(
        "Its scaling efficiency reads 120%, above 100%, which more GPUs at the same work each cannot give: the "
        "machine's load differed between the runs, so this is not the scaling."
    )
    two.per_device_batch = 16
    assert "part is its batch of 16 per device against 8, the rest the machine's load" in verdict(one, two, 0.05)
    two.efficiency = 0.9
    assert "100%" not in verdict(one, two, 0.05)


def test_the_closing_lines_scaling_gives_an_efficiency_above_100_percent_only_with_its_caveat():
    """run's closing line (cli/headless.py) names the preset's scaling from its finished runs: 1.64x on 2 processes
    (82%) as measured; the same 2-process run read at 3x the samples/s is said to be no scaling."""
    from gpuwizard.analysis.compare.runs import scaling_line
    from gpuwizard.core import paths

    copy_runs(paths.data_dir(), ONE_PROCESS_RUN, "20261201-005700-demo-cmp")
    said = scaling_line("demo-cmp")
    assert said == "scaling of demo-cmp: 2 processes: 1.64x the 1-process samples/s (efficiency 82%)"
    progress = paths.data_dir() / "runs" / "20261201-005700-demo-cmp" / "progress.json"
    record = json.loads(progress.read_text())
    progress.write_text(json.dumps(record | {"samples_per_s_mean": 3 * 240.6827586206897}))
    assert scaling_line("demo-cmp") == (
        "scaling of demo-cmp: 2 processes: 3.00x the 1-process samples/s (efficiency 150%, above 100%: the runs' load "
        "or batch per process differed, so it is no scaling)"
    )


def held_out(run: RunDir, losses: dict[int, float]) -> None:
    """Add held-out lines (dataset.eval_split) to a recorded run, at its own logged steps' times."""
    times = {m.step: m.t for m in run.metrics() if m.kind == "train"}
    with run.metrics_file.open("a") as fh:
        for step, loss in losses.items():
            fh.write(json.dumps({"format": 1, "t": times[step], "step": step, "loss": loss, "kind": "held_out"}) + "\n")


def test_runs_that_all_held_episodes_out_are_judged_on_the_held_out_loss_and_say_so(isolated_dirs):
    """Issue 37 item 5: the 2-process run's training loss is the lower at equal samples, its held-out loss the higher
    (it memorises); compare judges on the held-out loss when every run has one, and says which loss it used."""
    one, two = recorded(isolated_dirs / "data", "20261201-005642-demo-cmp", "20261201-005700-demo-cmp")
    held_out(one, {10: 0.30, 20: 0.25, 30: 0.20})
    trained = compare([one, two])
    assert trained.loss_kind == "training" and "not every run logged a held-out loss" in compare_text(trained)
    held_out(two, {10: 0.40, 20: 0.45, 30: 0.50})
    judged = compare([one, two])
    assert judged.loss_kind == "held-out"
    assert "loss: the held-out loss (episodes no run trained on), which every run logged" in compare_text(judged)
    by_id = {f.run_id: f for f in judged.runs}
    assert by_id[two.run_id].loss_at_equal_samples > by_id[one.run_id].loss_at_equal_samples
    assert by_id[two.run_id].final_loss == pytest.approx(by_id[two.run_id].held_out_curve[-1].loss)
    assert json.loads(json.dumps(judged.to_json()))["loss_kind"] == "held-out"
