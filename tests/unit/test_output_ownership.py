"""Issue 25, data and runs: each run owns its output folder (a folder of its own where output_dir is null, a fixed one
refused while another run's checkpoints are in it), a resume reads the step of its checkpoint, and a run on this
machine needs its dataset folder here. The jobs themselves are in tests/system/test_run_owns_output.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuwizard.core.errors import UserError
from gpuwizard.model import trust
from gpuwizard.model.preset_files import load_preset_file
from gpuwizard.runner.launch.prepare import prepare_run

OWN = """\
version: 1
name: own
trainer: demo
policy: demo
dataset: {repo_id: demo/so100_reach}
hardware: {gpus: 2, device: cpu}
optim: {lr: 1.0e-3, steps: 20}
mixed_precision: "no"
"""

HF_LOCAL = """\
version: 1
name: hf-local
trainer: hf
policy: smolvla
dataset: {repo_id: me/data, root: /nonexistent/gpuwizard-dataset}
hardware: {gpus: 1}
optim: {lr: 2.0e-5, steps: 500}
trainer_options: {script: train.py}
"""


def demo_checkpoint(out: Path, step: int) -> None:
    """A complete demo checkpoint, laid out as gpuwizard/demo/train.py saves one."""
    folder = out / "checkpoints" / f"{step:06d}"
    folder.mkdir(parents=True)
    (folder / "model.pt").write_bytes(b"weights")
    (out / "checkpoints" / "last").symlink_to(folder.name)


def test_a_preset_without_output_dir_plans_a_folder_per_run(gw, write_preset):
    """The plan has no run id yet: it shows the folder with a placeholder and says each run gets its own."""
    path = write_preset(OWN)
    plan = gw("plan", path, "--json").json()
    assert any(
        "output_dir is null: each run writes to a folder of its own, outputs/train/own/<run-id>" in n
        for n in plan["notes"]
    ), plan["notes"]
    argv = gw("preview", path, "--format", "json").json()["argv"]
    assert "--output-dir=outputs/train/own/<run-id>" in argv


def test_the_nodes_of_a_job_started_by_hand_share_one_folder(gw, write_preset):
    """Each node of a hand-started job has a run id of its own, so they keep one folder between them."""
    path = write_preset(OWN.replace("{gpus: 2, device: cpu}", "{gpus: 1, device: cpu, nodes: 2, rdzv_endpoint: h:1}"))
    argv = gw("preview", path, "--format", "json").json()["argv"]
    assert "--output-dir=outputs/train/own" in argv


@pytest.mark.parametrize("owner", ["20261130-101010-own", None])
def test_a_fixed_output_dir_holding_another_runs_checkpoints_is_a_plan_error(gw, write_preset, tmp_path, owner):
    out = tmp_path / "out"
    demo_checkpoint(out, 20)
    if owner:
        from gpuwizard.runs.owner import OutputOwner, read_owner, write_owner

        write_owner(out, OutputOwner(run_id=owner, chain=owner))
        assert read_owner(out).run_id == owner
    path = write_preset(OWN + f"output_dir: {out}\n")
    result = gw("plan", path)
    assert result.code == 2 and "Traceback" not in result.err
    whose = f"run {owner}" if owner else "a run gpuwizard has no record of"
    again = f"--resume {owner}" if owner else "--resume"
    assert (
        f"own: output_dir = '{out}': holds checkpoints written by {whose}: a fresh run there would overwrite them, "
        "and a later resume would continue from a mix of the two runs. Fix: resume that run with `gpuwizard run own "
        f"{again}`, or choose another output_dir (null gives each run a folder of its own)." in result.err.splitlines()
    ), result.err
    assert gw("preview", path, "--resume").code == 0, "a resume is what the folder is for"


def test_the_marker_is_beside_the_folder_and_readable_by_whoever_shares_it(tmp_path):
    from gpuwizard.runs.owner import OutputOwner, read_owner, write_owner

    out = tmp_path / "shared" / "out"
    where = write_owner(out, OutputOwner(run_id="r2", chain="r1", node_rank=1))
    assert where == tmp_path / "shared" / ".out.gpuwizard-run-node1.json"
    assert os.stat(where).st_mode & 0o777 == 0o644
    assert read_owner(out, 1).chain == "r1" and read_owner(out) is None


@pytest.mark.parametrize(
    ("checkpoint", "step"),
    [
        ("checkpoints/000040", 40),
        ("checkpoint-1500", 1500),
        ("pi05/exp/2000", 2000),
        ("checkpoints/000040/pretrained_model/train_config.json", 40),
        ("checkpoints/last", None),
    ],
)
def test_a_checkpoints_step_is_read_from_its_step_folder(tmp_path, checkpoint, step):
    """Only the part under the output folder counts: a folder of digits above it is no step."""
    from gpuwizard.runner.launch.resume import checkpoint_step

    out = tmp_path / "2026" / "out"
    (out / checkpoint).parent.mkdir(parents=True, exist_ok=True)
    assert checkpoint_step(out / checkpoint, out) == step


def test_a_local_run_refuses_a_dataset_folder_that_is_not_here(write_preset):
    """The plan only warns (it may be for another machine); a run on this one would fail once it reads its data."""
    preset = load_preset_file(write_preset(HF_LOCAL))
    trust.grant_for_session(preset)  # the user said yes to its script: what is left to refuse is the dataset
    with pytest.raises(UserError) as refused:
        prepare_run(preset, check=False)
    assert (
        "hf-local: dataset.root = '/nonexistent/gpuwizard-dataset': /nonexistent/gpuwizard-dataset does not exist on "
        "this machine, so the job would fail as soon as it reads its data. Fix: fix the path (a relative one is under "
        "launch.workdir) or copy the dataset there." in refused.value.paragraphs()
    ), refused.value.paragraph()
    with pytest.raises(UserError) as on_slurm:
        prepare_run(preset, check=False, slurm=True)  # the cluster's file system is not this machine's
    assert "dataset.root" not in on_slurm.value.paragraph()


def test_a_trainer_that_writes_its_dataset_starts_without_it(write_preset, tmp_path):
    preset = load_preset_file(write_preset(OWN.replace("demo/so100_reach}", f"demo/x, root: {tmp_path}/made}}")))
    prepared = prepare_run(preset, check=False)
    assert not (tmp_path / "made").exists() and prepared.ctx.output_dir == "outputs/train/own/<run-id>"


def test_a_smoke_run_is_not_resumed(tmp_path):
    """A smoke run is a short repro in its own run folder: nothing goes on from it."""
    from gpuwizard.model.preset_files import load_preset
    from support.runs import copied_run

    run = copied_run(tmp_path, smoke=True)
    with pytest.raises(UserError) as refused:
        prepare_run(load_preset("demo-cpu"), resume=True, resume_run=run.run_id, check=False)
    assert refused.value.paragraph() == (
        f"demo-cpu: --resume = '{run.run_id}': run {run.run_id} is a smoke run (a short repro), which is not "
        "continued. Fix: resume a full run."
    )
