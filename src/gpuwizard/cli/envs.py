"""`gpuwizard envs`: the training environments on this machine and the trainers each one has."""

from __future__ import annotations

import argparse
import json

from gpuwizard.core.safetext import safe_text


def envs_command(args: argparse.Namespace) -> int:
    from gpuwizard.trainers.envs import envs_for, find_envs

    found = find_envs(workdirs=args.workdir or [])
    shown = envs_for(args.trainer, found) if args.trainer else found
    if args.json:
        print(json.dumps([env.to_json() for env in shown], indent=2))
        return 0
    if not shown:
        wanted = f" with {args.trainer}" if args.trainer else ""
        print(f"no Python environment{wanted} found (looked on PATH, in virtual and conda environments, beside")
        print("checkouts and in ~/.venvs); give the interpreter's path as launch.python")
        return 0
    for env in shown:
        has = ", ".join(f"{name} {version}" for name, version in sorted(env.trainers.items())) or "no trainer"
        torch = f", torch {env.torch}" if env.torch else ""
        print(safe_text(env.python))
        print(safe_text(f"    {env.error or has + torch} · {env.where}"))
    print("\nuse one as launch.python in a preset, or pick it with F6 on the wizard's Trainer step")
    return 0
