"""What starts the gauge in a job whose preset turns it on (monitor.gauge): the gauge's folder first on PYTHONPATH
(its sitecustomize then chains the environment's own), the file it writes in the run folder, and the batch sizes
its gradient norms stand for, from the plan."""

from __future__ import annotations

from pathlib import Path

from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE
from gpuwizard.gauge import gwgauge
from gpuwizard.model.job import Plan, first_on_pythonpath

GAUGE_DIR = Path(gwgauge.__file__).parent


def gauge_env(run_path: Path, plan: Plan, grad_accum: int, env: dict[str, str]) -> dict[str, str]:
    """The job's environment with the gauge; a PYTHONPATH the preset (or this shell) sets follows the gauge's folder."""
    added = {
        gwgauge.FILE_VAR: str(run_path / GAUGE_FILE),
        gwgauge.ACCUM_VAR: str(grad_accum),
    }
    if plan.effective_batch:  # per rank: its batch x accumulation
        added[gwgauge.RANK_BATCH_VAR] = str(plan.effective_batch // plan.world_size)
        added[gwgauge.GLOBAL_BATCH_VAR] = str(plan.effective_batch)
    return first_on_pythonpath(GAUGE_DIR, env) | added
