"""The modules gpuwizard starts as processes (`python -m ...`): one name each, so a move changes one line."""

from __future__ import annotations

SUPERVISOR = "gpuwizard.runner.supervise.supervisor"
SWEEP_SCHEDULER = "gpuwizard.runner.sweep.scheduler"
ALLREDUCE = "gpuwizard.runner.bandwidth.allreduce"
NODE_SAMPLER = "gpuwizard.gpus.node_sampler"

FORMER = {
    "gpuwizard.runner.supervisor": SUPERVISOR,
    "gpuwizard.runner.sweep_scheduler": SWEEP_SCHEDULER,
    "gpuwizard.runner.allreduce": ALLREDUCE,
}
"""Their paths before the runner's sub-rooms (0.1): a shim at each keeps processes started by the older gpuwizard,
and their `ps` lines, working for one release."""
