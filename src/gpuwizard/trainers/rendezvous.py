"""torchrun's rendezvous inside a SLURM allocation: every trainer's launcher takes these arguments, and the batch
script (runner/slurm.py) fills in the head node's address and the job id that they name."""

from __future__ import annotations

from gpuwizard.model.job import BuildContext

DEFAULT_PORT = 29500
HEAD = "$head_addr"
NNODES = "$SLURM_NNODES"
JOB_ID = "$SLURM_JOB_ID"


def rdzv_port(ctx: BuildContext) -> int:
    from gpuwizard.core.network import Endpoint

    endpoint = ctx.preset.hardware.rdzv_endpoint
    return Endpoint.parse(endpoint).port if endpoint else DEFAULT_PORT


def rendezvous_args(ctx: BuildContext) -> list[str]:
    """torchrun's multi-node arguments inside a SLURM allocation: node count, job id and head from SLURM."""
    return [
        f"--nnodes={NNODES}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={HEAD}:{rdzv_port(ctx)}",
        f"--rdzv-id={JOB_ID}",
    ]
