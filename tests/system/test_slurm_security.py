"""The batch script and its secrets (issue 19, items 1 and 13): every word reaches srun as written, and a secret
reaches the job through sbatch's environment, never the run folder (the fields refused up front:
tests/unit/test_slurm_fields.py).

Tests marked `slurm` submit to the local two-node cluster (scripts/slurm-local.sh) and are skipped without one."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwizard.runs.rundir import list_runs
from support.cli import gw_subprocess
from support.slurm import lerobot_preset

FAKE_SRUN = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["SRUN_RECORD"], "w") as out:
    json.dump({"argv": sys.argv[1:], "env": os.environ.get("PAYLOAD"), "cwd": os.getcwd()}, out)
"""
FAKE_SCONTROL = """#!/bin/sh
case "$2" in hostnames) echo n1 ;; *) echo "NodeName=n1 NodeAddr=127.0.0.1 State=IDLE" ;; esac
"""


def hostile(tmp_path: Path, n: int) -> str:
    """One value per field, each trying a command substitution, backticks and breaking out of either quote."""
    marker = tmp_path / f"INJECTED-{n}"
    return f"x $(touch {marker}) `touch {marker}` ' ; touch {marker} ; ' \" ; touch {marker} ; \" $HOME"


def test_every_word_of_every_field_reaches_srun_as_written(tmp_path):
    """The batch script gpuwizard submits, run by bash with srun and scontrol standing in: srun gets exactly the
    launch argv and the environment value, and none of the hostile values ran."""
    from gpuwizard.model.preset import parse_preset
    from gpuwizard.planning.plan import build_command, make_plan
    from gpuwizard.runner.host.slurm import batch_script

    workdir = tmp_path / "work $(touch INJECTED-w) `touch INJECTED-w`"
    workdir.mkdir()
    data = lerobot_preset(
        **{
            "dataset.repo_id": hostile(tmp_path, 1),
            "dataset.root": hostile(tmp_path, 2),
            "output_dir": hostile(tmp_path, 3),
            "launch.extra_args": [hostile(tmp_path, 4), "--x=" + hostile(tmp_path, 5)],
            "launch.env": {"PAYLOAD": hostile(tmp_path, 6)},
            "launch.workdir": str(workdir),
            "launch.scheduler": "slurm",
            "trainer_options.policy_path": hostile(tmp_path, 7),
            "trainer_options.repo_id": hostile(tmp_path, 8),
            "slurm.sbatch_args": [f"--comment=`touch${{IFS}}{tmp_path}/INJECTED-9`", "--qos=$(touch${IFS}INJECTED-10)"],
            "slurm.setup": [],
        }
    )
    _, ctx = make_plan(parse_preset(data, "hostile"))
    spec = build_command(ctx)
    run_dir = tmp_path / "runs $(touch INJECTED-11) `touch INJECTED-11` #x" / "r1"
    script = batch_script(ctx, spec, run_dir=run_dir)
    assert '#SBATCH --qos="$(touch${IFS}INJECTED-10)"' in script.splitlines()
    assert f'#SBATCH --output="{run_dir}/log.txt"' in script.splitlines(), "a path with spaces and # is quoted"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "srun.json"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SRUN_RECORD": str(record)}
    env |= {"SLURM_JOB_NODELIST": "n1", "SLURM_NNODES": "1", "SLURM_JOB_ID": "7"}
    ran = subprocess.run(["bash", "-s"], input=script, text=True, capture_output=True, env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(record.read_text())
    assert seen["argv"] == ["--kill-on-bad-exit=1", *spec.argv], "every word as written, none split or expanded"
    assert seen["env"] == hostile(tmp_path, 6) and seen["cwd"] == str(workdir)
    assert any(hostile(tmp_path, 1) in word for word in seen["argv"]), "the dataset id went through unchanged"
    assert sorted(p.name for p in tmp_path.rglob("INJECTED*")) == [], "no injected command ran"


ECHO_SCRIPT = """\
import hashlib, json, os, sys
token = os.environ.get("HF_TOKEN")
seen = {"argv": sys.argv[1:], "payload": os.environ.get("PAYLOAD"), "rank": os.environ.get("RANK"),
        "token_sha256": hashlib.sha256(token.encode()).hexdigest() if token else None}
with open(f"echo-rank{seen['rank']}.json", "w") as out:  # in the working directory, one file per rank
    json.dump(seen, out)
"""

ECHO_PRESET = {
    "version": 1,
    "name": "echo",
    "trainer": "hf",
    "policy": "act",
    "dataset": {"repo_id": "me/data"},
    "hardware": {"gpus": 1, "device": "cpu", "nodes": 2},
    "batch": {"size": 2},
    "optim": {"lr": 1.0e-4, "steps": 10},
    "mixed_precision": "no",
    "trainer_options": {"script": "echo.py"},
    "monitor": {"hang_timeout_s": 120},
}


def echo_job(tmp_path: Path, workdir: Path, **changes) -> Path:
    """A real torchrun job on both nodes whose ranks print what they were given: argv, PAYLOAD, HF_TOKEN's hash."""
    workdir.mkdir(exist_ok=True)
    (workdir / "echo.py").write_text(ECHO_SCRIPT)
    data = json.loads(json.dumps(ECHO_PRESET))
    data["launch"] = {"python": sys.executable, "workdir": str(workdir), **changes.pop("launch", {})}
    data.update(changes)
    path = tmp_path / "echo.yaml"
    path.write_text(json.dumps(data))
    return path


def echoed(workdir: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(workdir.glob("echo-rank*.json"))]


@pytest.mark.slurm
def test_injection_through_every_field_runs_nothing_on_the_cluster(cluster, tmp_path, monkeypatch):
    """Submitted for real: the hostile values reach the ranks on both nodes as data, and none of them ran."""
    data_dir = tmp_path / "data $(touch INJECTED-d) `touch INJECTED-d`"
    monkeypatch.setenv("GPUWIZARD_DATA_DIR", str(data_dir))
    args = [hostile(tmp_path, 1), "--x=" + hostile(tmp_path, 2)]
    workdir = tmp_path / "work $(touch INJECTED-w) `touch INJECTED-w`"
    preset = echo_job(
        tmp_path,
        workdir,
        launch={"env": {"PAYLOAD": hostile(tmp_path, 3)}, "extra_args": args},
        output_dir=hostile(tmp_path, 4),
        trainer_options={"script": "echo.py", "script_args": [hostile(tmp_path, 5)]},
        slurm={
            "partition": "debug",
            "time": "10",
            "sbatch_args": [f"--comment=`touch${{IFS}}{tmp_path}/INJECTED-6`$(touch${{IFS}}INJECTED-7)"],
        },
    )
    result = gw_subprocess("run", "--trust", preset, "--slurm", "--headless", timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    seen = echoed(workdir)
    assert [s["rank"] for s in seen] == ["0", "1"], "both nodes ran"
    for rank in seen:
        assert rank["payload"] == hostile(tmp_path, 3)
        assert hostile(tmp_path, 5) in rank["argv"] and rank["argv"][-2:] == args
        assert hostile(tmp_path, 4) in rank["argv"]
    assert sorted(p.name for p in tmp_path.rglob("INJECTED*")) == [], "no injected command ran"


@pytest.mark.slurm
@pytest.mark.parametrize("field", ["partition", "account"])
def test_a_line_break_in_a_slurm_field_never_reaches_the_cluster(cluster, tmp_path, field):
    marker = tmp_path / "INJECTED"
    preset = echo_job(tmp_path, tmp_path / "work", slurm={field: f"debug\ntouch {marker}"})
    result = gw_subprocess(
        "run", "--trust", preset, "--slurm", "--headless", timeout=600, cwd=tmp_path
    )  # sbatch's default out
    assert result.returncode == 2 and f"slurm.{field} = 'debug\\ntouch" in result.stderr, result.stdout + result.stderr
    assert not marker.exists() and list_runs() == [], "nothing was submitted, nothing ran"


SECRET = "hf_SeCrEt_value_4242"


def files_holding(folder: Path, text: str) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


@pytest.mark.slurm
@pytest.mark.parametrize("given", ["value", "from the environment"])
def test_a_secret_reaches_the_slurm_job_and_no_file_of_the_run_folder(cluster, tmp_path, monkeypatch, given):
    preset = echo_job(tmp_path, tmp_path / "work")
    if given == "value":
        env_arg = f"HF_TOKEN={SECRET}"  # the form the issue reports; `ps` shows it, as --help says
    else:
        monkeypatch.setenv("HF_TOKEN", SECRET)
        env_arg = "HF_TOKEN"
    result = gw_subprocess("run", "--trust", preset, "--slurm", "--headless", "--env", env_arg, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    run = list_runs()[0].run
    seen = echoed(tmp_path / "work")
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    assert [s["token_sha256"] for s in seen] == [digest, digest], "both nodes' ranks see the value"
    assert files_holding(run.path, SECRET) == [], "no file of the run folder holds the secret"
    assert "HF_TOKEN" in (run.path / "job.sbatch").read_text(), "the script reads it from the job's environment"


@pytest.mark.slurm
def test_an_export_that_would_drop_the_secret_is_refused_at_submit(cluster, tmp_path):
    preset = echo_job(tmp_path, tmp_path / "work", slurm={"sbatch_args": ["--export=NONE"]})
    result = gw_subprocess("run", "--trust", preset, "--slurm", "--headless", "--env", f"HF_TOKEN={SECRET}")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "slurm.sbatch_args.0 = 'NONE': --export=NONE keeps HF_TOKEN from the job" in result.stderr
    assert list_runs() == [], "nothing was submitted"
    overridden = gw_subprocess(
        "run", "--trust", preset, "--slurm", "--headless", "--env", f"HF_TOKEN={SECRET}", env={"SBATCH_EXPORT": "ALL"}
    )
    assert overridden.returncode == 0, "SBATCH_EXPORT beats the #SBATCH line, as in sbatch itself"
