"""`gpuwizard probe`: the grid of short real runs, a line per configuration as it goes, then the table."""

from __future__ import annotations

import argparse
import json
import sys

from gpuwizard.codes import ExitCode
from gpuwizard.errors import UserError, problem


def probe_request(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from gpuwizard.preset_files import load_preset
    from gpuwizard.probe_run import ProbeRequest, default_batches, default_gpus, parse_budget, parse_counts

    preset = load_preset(args.preset)
    if not 0 <= args.headroom < 1:
        raise UserError(
            problem("--headroom", "must be at least 0 and below 1", "e.g. 0.1 keeps 10% free", value=args.headroom)
        )
    gpus = parse_counts(args.gpus, "--gpus") if args.gpus else default_gpus(preset)
    if args.batch in (None, ""):
        batches: list[int] | None = default_batches(preset)
    elif args.batch == "auto":
        batches = None
    else:
        batches = parse_counts(args.batch, "--batch")
    budget = parse_budget(args.budget) if args.budget else None
    return ProbeRequest(preset, gpus, batches, budget, args.headroom, args.slurm, args.steps)


def probe_command(args: argparse.Namespace) -> int:
    from gpuwizard.probe import result_text
    from gpuwizard.probe_run import Probe

    request = probe_request(args)
    shown = "auto (double, then bisect)" if request.batches is None else ",".join(map(str, request.batches))
    print(
        f"probe {request.preset.name}: GPUs {','.join(map(str, request.gpus))} x batch per device {shown}"
        + (f", budget {request.budget_s:.0f} s" if request.budget_s else ""),
        file=sys.stderr if args.json else sys.stdout,
        flush=True,
    )

    def progress(result, message):  # type: ignore[no-untyped-def]
        print(f"  [{len(result.rows)} done] {message}", file=sys.stderr, flush=True)

    probe = Probe(request, on_update=progress)
    try:
        result = probe.run()
    except KeyboardInterrupt:
        print(f"probe stopped; nothing of it is left running. Partial result: {probe.path / 'probe.json'}")
        return ExitCode.STOPPED
    if args.json:
        print(json.dumps(result.model_dump(mode="json"), indent=2))
    else:
        print(result_text(result))
        print(f"\nkept in {probe.path / 'probe.json'}; `gpuwizard plan {request.preset.name}` now uses it")
    return ExitCode.OK
