"""`gpuwizard doctor`: the environment failures that cost a day (a torch build without this GPU's kernels, a driver too
old for it, a video decoder that cannot load or cannot keep up, a dataset the trainer cannot read, /dev/shm, memory,
disk or open files too small, a tracker without its login, a pair of GPUs whose all-reduce hangs), found in seconds.

The facts come from scripts/doctor_env.py: its interpreter sections (torch, the trainer, the pairs) run in the
training interpreter and are remembered per environment stamp like the trainer check's answer; its host section
(stdlib only) runs in this interpreter on every call, so free space and logins are never stale. doctor_rules.py turns
the facts, the plan and NVML into findings.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError

from gpuwizard.core.errors import Problem, problem, warning
from gpuwizard.core.kinds import ProblemLevel
from gpuwizard.model.job import BuildContext, LaunchSpec, TrainerQuery
from gpuwizard.model.trainer_options import GrootOptions
from gpuwizard.model.trust import is_trusted
from gpuwizard.runs.records import Record
from gpuwizard.trainers.check import MARK, check_script, envcache, scripts_stamp
from gpuwizard.trainers.check.doctor_facts import DoctorAnswer, flag_value
from gpuwizard.trainers.check.doctor_rules import findings

if TYPE_CHECKING:
    from gpuwizard.gpus.inventory import Inventory

CACHE = "doctor"
SCRIPT = "doctor_env.py"
TIMEOUT_S = 180.0
"""The interpreter sections: a cold torch and LeRobot import on a loaded machine takes most of a minute."""
HOST_TIMEOUT_S = 30.0
PAIR_TIMEOUT_S = 30.0
"""One pair's all-reduce, process starts included; a pair past it reads as hung."""


class Finding(Record):
    """One paragraph: what was found, what it does to the run, the fix; `block` fails the run, `warn` slows it."""

    level: Literal["block", "warn"]
    field: str | None = None
    text: str


class DoctorReport(Record):
    """What `doctor` prints, the wizard's Preview shows and a launch refuses on."""

    status: Literal["ready", "warnings", "blocked", "not checked"]
    summary: str
    findings: list[Finding] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    facts: dict[str, Any] = Field(default_factory=dict)
    cached: bool = False
    seconds: float = 0.0

    @property
    def blocks(self) -> bool:
        return self.status == "blocked"

    def problems(self) -> list[Problem]:
        """The findings as problems, for the paths that print or refuse on those."""
        return [problem(None, f.text) if f.level == "block" else warning(None, f.text) for f in self.findings]


def parse_answer(stdout: str) -> DoctorAnswer | None:
    """The last marked line of doctor_env.py's output."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                return DoctorAnswer.model_validate(json.loads(line[len(MARK) :]))
            except (ValueError, ValidationError, RecursionError):
                return None
    return None


def run_script(python: str, request: dict[str, Any], env: dict[str, str], cwd: str, timeout_s: float) -> DoctorAnswer:
    """doctor_env.py in `python`; an interpreter that cannot start or answer is an unavailable answer, not a raise."""
    try:
        out = subprocess.run(
            [python, check_script(SCRIPT), json.dumps(request)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return DoctorAnswer(
            status="unavailable", error=f"the training interpreter did not answer within {timeout_s:.0f} s"
        )
    except OSError as exc:
        return DoctorAnswer(status="unavailable", error=f"cannot start {python}: {exc.strerror or exc}")
    answer = parse_answer(out.stdout)
    if answer is None:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or [f"exit code {out.returncode}"]
        return DoctorAnswer(status="unavailable", error=f"the preflight script gave no answer: {tail[0][:300]}")
    return answer


def pairs_time(request: dict[str, Any]) -> float:
    """The longest the pairs section may take: each pair twice (again without P2P when it hangs), one at a time."""
    devices = len(request.get("pairs", {}).get("devices", []))
    return devices * (devices - 1) / 2 * 2 * PAIR_TIMEOUT_S


def machine_stamp(inventory: Inventory) -> list[Any]:
    """The driver and the devices: the pairs' answer and the build's fit depend on them, not on the interpreter."""
    return [inventory.driver_version, [(g.uuid, g.compute_capability) for g in inventory.visible()]]


def cache_key(python: str, request: dict[str, Any], env: dict[str, str], inventory: Inventory) -> str:
    """A hash of everything the interpreter sections depend on (nothing kept in clear: the env may hold a token)."""
    blob = json.dumps([python, request, sorted(env.items()), scripts_stamp(), machine_stamp(inventory)], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def ask(
    python: str,
    request: dict[str, Any],
    env: dict[str, str],
    cwd: str,
    inventory: Inventory,
    use_cache: bool = True,
) -> tuple[DoctorAnswer, bool]:
    """The interpreter sections (remembered per environment stamp) and the host section (asked every time, in this
    interpreter, beside them); returns the merged answer and whether the interpreter's part was remembered."""
    exe = envcache.interpreter(python)
    key = cache_key(exe, request, env, inventory)
    cache = envcache.EnvCache(CACHE)
    host_request = {"sections": ["host"], "output_dir": request.get("output_dir"), "ports": request.get("ports", [])}
    try:
        host: subprocess.Popen[str] | None = subprocess.Popen(
            [sys.executable, check_script(SCRIPT), json.dumps(host_request)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
    except OSError:  # this interpreter can no longer be executed (replaced under us): the host section goes unasked
        host = None
    remembered = cache.get(key, exe) if use_cache else None
    answer = None
    if remembered is not None:
        try:
            answer = DoctorAnswer.model_validate(remembered)
        except ValidationError:
            answer = None
    cached = answer is not None
    if answer is None:
        answer = run_script(python, request, env, cwd, TIMEOUT_S + pairs_time(request))
        if answer.status == "answered":
            cache.put(key, exe, answer.model_dump(), answer.watch)
    if host is None:
        return answer, cached
    try:
        out, _ = host.communicate(timeout=HOST_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        host.kill()
        out, _ = host.communicate()
    host_answer = parse_answer(out)
    if host_answer is not None and host_answer.host is not None:
        answer = answer.model_copy(update={"host": host_answer.host})
    return answer, cached


def request_for(ctx: BuildContext | None, query: TrainerQuery | None, inventory: Inventory) -> dict[str, Any]:
    """What doctor_env.py is asked about this job: the GPUs NVML sees, the trainer's dataset (and the arguments its
    check script takes, `query`), the job's pairs."""
    visible = inventory.visible()
    capabilities = [g.compute_capability.split(".") for g in visible if g.compute_capability]
    request: dict[str, Any] = {"sections": ["torch"], "capabilities": capabilities}
    if ctx is None or query is None:
        return request
    preset, plan, opts = ctx.preset, ctx.plan, ctx.preset.options
    request |= {
        "sections": ["torch", "trainer"] if plan.device == "cuda" else ["trainer"],  # torch's rules are a GPU job's
        "trainer": preset.trainer,
        "dataset": {"root": dataset_root(ctx), "repo_id": preset.dataset.repo_id},
        "output_dir": str(ctx.output_path),
        "video_backend": flag_value(preset.launch.extra_args, "--dataset.video_backend"),
        "embodiment_tag": opts.embodiment_tag if isinstance(opts, GrootOptions) else None,
        "check_argv": query.argv[2:],
    }
    if preset.hardware.nodes > 1 and preset.hardware.node_rank == 0 and preset.hardware.rdzv_endpoint:
        request["ports"] = [int(preset.hardware.rdzv_endpoint.rsplit(":", 1)[1])]
    gpus = plan.processes_per_node
    if plan.device == "cuda" and gpus >= 2 and len(visible) >= gpus:
        request["sections"].append("pairs")
        request["pairs"] = {"devices": list(range(gpus)), "backend": "nccl", "timeout_s": PAIR_TIMEOUT_S}
    return request


def dataset_root(ctx: BuildContext) -> str | None:
    """dataset.root as the job sees it (a relative one is under its working folder)."""
    root = ctx.preset.dataset.root
    return os.path.join(ctx.workdir, os.path.expanduser(root)) if root else None


def report(answer: DoctorAnswer, problems: list[Problem], cached: bool, seconds: float) -> DoctorReport:
    findings = [
        Finding(level="block" if p.level == ProblemLevel.ERROR else "warn", field=p.field, text=p.paragraph())
        for p in problems
        if p.level in (ProblemLevel.ERROR, ProblemLevel.WARNING)
    ]
    notes = [p.message for p in problems if p.level == ProblemLevel.NOTE]
    blocked = sum(f.level == "block" for f in findings)
    if blocked:
        status: Literal["ready", "warnings", "blocked"] = "blocked"
        summary = f"{blocked} finding(s) will fail the run" + (
            f", {len(findings) - blocked} will slow it" if len(findings) > blocked else ""
        )
    elif findings:
        status, summary = "warnings", f"ready, but {len(findings)} finding(s) will slow the run"
    else:
        status, summary = "ready", "ready"
    facts = answer.model_dump(exclude={"watch"}, exclude_none=True)
    return DoctorReport(
        status=status, summary=summary, findings=findings, notes=notes, facts=facts, cached=cached, seconds=seconds
    )


def doctor(
    ctx: BuildContext | None,
    spec: LaunchSpec | None,
    query: TrainerQuery | str | None,
    inventory: Inventory,
    python: str,
    use_cache: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> DoctorReport:
    """The preflight of one job (`ctx`, its command `spec`), asked in the interpreter, folder and environment its
    trainer check runs in (`query`: Trainer.trainer_query, or why there is none); or of this machine and `python`."""
    if ctx is not None and not is_trusted(ctx.preset):
        return DoctorReport(
            status="not checked",
            summary="not checked: this preset names an interpreter, environment or files you have not trusted, and "
            "nothing of it runs until you do (`gpuwizard presets trust PRESET`)",
        )
    if isinstance(query, str):
        return DoctorReport(status="not checked", summary=f"not checked: {query}")
    started = time.monotonic()
    env, cwd = dict(os.environ), "."
    if query is not None and spec is not None:
        env, cwd, python = spec.full_env() | query.env, query.cwd, query.argv[0]
    request = request_for(ctx, query, inventory)
    progress(f"asking {python} about torch" + (", the trainer and the dataset" if query else "") + " ...")
    answer, cached = ask(python, request, env, cwd, inventory, use_cache)
    if answer.status == "unavailable":
        return DoctorReport(
            status="not checked", summary=f"not checked: {answer.error}", seconds=time.monotonic() - started
        )
    return report(answer, findings(answer, ctx, inventory, python), cached, time.monotonic() - started)
