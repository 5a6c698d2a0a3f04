"""gpuwizard's demo trainer: its own argparse parser (gpuwizard.demo.train.parse_args) on the command."""

from __future__ import annotations

import sys
from typing import Any

import gwcheck


def parse(argv: list[str]) -> dict[str, Any]:
    try:
        import gpuwizard.demo.train as train
    except ImportError as exc:
        raise gwcheck.NoEnvironment(f"gpuwizard is not installed in this interpreter ({exc})") from None
    gwcheck.answering("gpuwizard.demo.train")
    sys.argv[0] = train.__file__  # argparse names itself as in the real run: "train.py: error: ..."
    args = train.parse_args(argv)
    return {
        "parser": "gpuwizard.demo.train",
        "values": {
            "per_device_batch": args.batch_size,
            "grad_accum": args.grad_accum,
            "lr": args.lr,
            "steps": args.steps,
            "warmup_steps": args.warmup_steps,
        },
        "watch": [train.__file__],
    }


if __name__ == "__main__":
    gwcheck.main(parse)
