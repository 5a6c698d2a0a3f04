"""The `gpuwizard` command line: its commands, flags and exit codes. Heavy modules are imported inside each
command."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar, overload

from gpuwizard import __version__
from gpuwizard.core.codes import ExitCode
from gpuwizard.core.errors import UserError, problem
from gpuwizard.core.safetext import safe_text

if TYPE_CHECKING:
    from gpuwizard.model.job import BuildContext, Plan
    from gpuwizard.model.preset import Preset


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


_N = TypeVar("_N")


class Parser(argparse.ArgumentParser):
    """argparse that reports bad flags as one paragraph and exit code 2, like every other input error."""

    given: list[str] = []

    @overload
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: None = None
    ) -> tuple[argparse.Namespace, list[str]]: ...
    @overload
    def parse_known_args(self, args: Iterable[str] | None, namespace: _N) -> tuple[_N, list[str]]: ...
    @overload
    def parse_known_args(self, *, namespace: _N) -> tuple[_N, list[str]]: ...
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: _N | None = None
    ) -> tuple[_N | argparse.Namespace, list[str]]:
        self.given = list(sys.argv[1:] if args is None else args)  # what error() names
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        missing = re.fullmatch(r"argument (?:\S+/)?(--\S+): expected one argument", message)
        after = next((b for a, b in zip(self.given, self.given[1:]) if missing and a == missing[1]), None)
        if missing and after is not None and after.startswith("-"):
            flag = missing[1]
            sys.stderr.write(
                f"{self.prog}: {flag} = {after!r}: reads as another flag, so {flag} has no value. Fix: give {flag} a "
                f"value (see `{self.prog} --help`); one that starts with '-' is written {flag}=VALUE.\n"
            )
        else:
            sys.stderr.write(f"{self.prog}: {message}. Fix: see `{self.prog} --help`.\n")
        raise SystemExit(ExitCode.INVALID)


PRESET_HELP = "a preset name (yours first, then the shipped ones) or a YAML file"
RUN_ID_HELP = "a run id from `gpuwizard runs`, or its unique start"


def build_parser() -> Parser:
    parser = Parser(prog="gpuwizard", description="Plan, launch and watch multi-GPU fine-tunes of robot policies.")
    parser.add_argument("--preset", metavar="NAME_OR_FILE", help="start the wizard from a preset")
    parser.add_argument("--version", action="version", version=f"gpuwizard {__version__}", help="print the version")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")

    gpus = sub.add_parser("gpus", help="GPU inventory: devices, memory, utilization, topology, processes")
    gpus.add_argument("--json", action="store_true", help="the inventory as JSON")
    gpus.add_argument(
        "--record", metavar="FILE", help="record this machine's NVML answers for replay (GPUWIZARD_NVML_REPLAY)"
    )

    for name, text in (
        ("plan", "the resolved plan: batch meaning, scaling, strategy, checks"),
        ("preview", "the exact command run would execute"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("preset", metavar="PRESET", help=PRESET_HELP)
        p.add_argument("--gpus", type=positive_int, metavar="N", help="see the same preset on N GPUs")
        if name == "plan":
            p.add_argument("--json", action="store_true", help="the plan as JSON (every key of the plan)")
        else:
            p.add_argument(
                "--format",
                choices=["shell", "json", "script", "sbatch"],
                default="shell",
                help="sbatch: the SLURM batch script `run --slurm` submits",
            )
            p.add_argument("--resume", action="store_true", help="the command that continues from the last checkpoint")

    check = sub.add_parser(
        "check",
        help="run the exact command through the installed trainer's own parser (no training) and compare with the plan",
    )
    check.add_argument("preset", metavar="PRESET")
    check.add_argument("--gpus", type=positive_int, metavar="N", help="check the command for N GPUs")
    check.add_argument("--resume", action="store_true", help="check the command that continues from the checkpoint")
    check.add_argument("--json", action="store_true", help="the trainer's values, the plan's and every difference")
    check.add_argument("--fresh", action="store_true", help="ask the trainer again instead of the remembered answer")

    probe = sub.add_parser(
        "probe", help="short real runs per GPU count and batch: does a second GPU pay, what batch fits?"
    )
    probe.add_argument("preset", metavar="PRESET")
    probe.add_argument(
        "--gpus", metavar="N,N", help="GPU (process) counts to measure, e.g. 1,2,4 (default: 1 and the preset's)"
    )
    probe.add_argument(
        "--batch",
        metavar="auto|N,N",
        help="per-device batches to measure; auto doubles until out of memory, then bisects (default: the plan's "
        "and twice it)",
    )
    probe.add_argument("--budget", metavar="TIME", help="stop starting configurations after this long, e.g. 10m")
    probe.add_argument(
        "--headroom", type=float, default=0.1, metavar="SHARE", help="device memory kept free (default 0.1)"
    )
    probe.add_argument("--steps", type=positive_int, metavar="N", help="updates per configuration (default: trainer's)")
    probe.add_argument("--slurm", action="store_true", help="submit each configuration to SLURM and follow it")
    probe.add_argument("--json", action="store_true", help="print probe.json instead of the table")

    run = sub.add_parser("run", help="run the job (TUI monitor, or --headless status lines)")
    run.add_argument("preset", metavar="PRESET", help=PRESET_HELP)
    run.add_argument("--gpus", type=positive_int, metavar="N", help="run the same preset on N GPUs per node")
    run.add_argument(
        "--headless",
        action="store_true",
        help="stream status lines to stdout instead of the TUI (the default without a terminal); SIGINT or SIGTERM "
        "stops the run, SIGHUP detaches",
    )
    run.add_argument(
        "--detach", action="store_true", help="start the run, print its id and return (`attach` follows it)"
    )
    run.add_argument("--smoke", action="store_true", help="short repro run: 50 steps, smallest batch")
    run.add_argument(
        "--slurm", action="store_true", help="submit with sbatch and follow the SLURM job (launch.scheduler: slurm)"
    )
    run.add_argument(
        "--node-rank",
        type=int,
        metavar="K",
        help="this node's rank in a multi-node preset (0 hosts the rendezvous); overrides hardware.node_rank",
    )
    run.add_argument(
        "--resume",
        nargs="?",
        const="",
        metavar="RUN_ID",
        help="continue from the last checkpoint in the trainer's own resume form, as a new run linked to RUN_ID "
        "(default: the newest run of this preset)",
    )
    run.add_argument("--log", action="store_true", help="with --headless, also stream the job's log")
    run.add_argument(
        "--no-check",
        action="store_true",
        help="skip asking the trainer's own parser before the launch (`gpuwizard check`)",
    )
    run.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment variable for this run only; a bare NAME takes its value from your environment (keeps a "
        "secret out of `ps`)",
    )

    attach = sub.add_parser("attach", help="open the live monitor on a run (default: the newest)")
    attach.add_argument("run_id", nargs="?", metavar="RUN_ID", help=RUN_ID_HELP + " (default: the newest)")
    attach.add_argument("--headless", action="store_true", help="stream status lines to stdout instead of the TUI")
    attach.add_argument("--log", action="store_true", help="with --headless, also stream the job's log")

    runs = sub.add_parser("runs", help="run history")
    runs.add_argument("--json", action="store_true", help="the history as JSON rows, newest first")
    runs.add_argument("--probes", action="store_true", help="also list the short measurement runs of gpuwizard probe")
    envs = sub.add_parser("envs", help="the training environments on this machine and the trainers each one has")
    envs.add_argument("--trainer", choices=["lerobot", "groot", "openpi", "hf", "demo"], help="only those that have it")
    envs.add_argument("--workdir", action="append", metavar="DIR", help="also look beside this checkout")
    envs.add_argument("--json", action="store_true", help="the environments as JSON")

    stop = sub.add_parser("stop", help="stop a run and every process of it (default: the newest active run)")
    stop.add_argument("run_id", nargs="?", metavar="RUN_ID", help=RUN_ID_HELP + " (default: the newest active run)")

    compare = sub.add_parser(
        "compare", help="did more GPUs pay? throughput, efficiency, loss per sample and per hour, GPU-hours, cost"
    )
    compare.add_argument("run_ids", nargs="+", metavar="RUN_ID", help=RUN_ID_HELP + "; two or more")
    compare.add_argument("--json", action="store_true", help="the comparison as JSON")
    compare.add_argument(
        "--gpu-hour", type=float, metavar="PRICE", help="price of a GPU-hour (default: each run's costs.gpu_hour)"
    )

    presets = sub.add_parser("presets", help="saved presets: list, show NAME, delete NAME, schema")
    presets.add_argument(
        "action",
        nargs="?",
        choices=["list", "show", "delete", "schema"],
        default="list",
        help="list (default) | show NAME: the file | delete NAME: one of yours | schema: the JSON Schema",
    )
    presets.add_argument("name", nargs="?", metavar="NAME", help="the preset to show or delete")
    return parser


class SafeStream:
    """stdout or stderr of a command: what it prints passes safe_text, so a job's error line, a log line or a run
    folder's name reaches the terminal without its escape sequences (the TUI writes to the terminal itself)."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(safe_text(text))

    def write_control(self, sequence: str) -> int:
        """gpuwizard's own terminal sequences (notify's bell and desktop notices, their text already cleaned)."""
        return self.stream.write(sequence)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main(argv: list[str] | None = None) -> int:
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(out), SafeStream(err)
    try:
        return run_command_line(argv)
    finally:
        sys.stdout, sys.stderr = out, err


def run_command_line(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return dispatch(args)
    except UserError as exc:
        sys.stderr.write(exc.paragraph() + "\n")
        return ExitCode.INVALID
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return ExitCode.OK


def dispatch(args: argparse.Namespace) -> int:
    if args.command is None:
        from gpuwizard.tui.entry import run_wizard

        return run_wizard(args.preset)
    handler = {
        "gpus": cmd_gpus,
        "plan": cmd_plan,
        "preview": cmd_preview,
        "check": cmd_check,
        "probe": cmd_probe,
        "run": cmd_run,
        "attach": cmd_attach,
        "runs": cmd_runs,
        "envs": cmd_envs,
        "stop": cmd_stop,
        "compare": cmd_compare,
        "presets": cmd_presets,
    }[args.command]
    return handler(args)


def resolve(
    preset_arg: str, gpus: int | None, resume: bool = False, slurm: bool = False
) -> tuple[Preset, Plan, BuildContext]:
    """Load a preset and plan it against the GPUs detected here."""
    from gpuwizard.gpus.inventory import read_inventory
    from gpuwizard.model.preset import with_field
    from gpuwizard.model.preset_files import load_preset
    from gpuwizard.planning.plan import plan_here, with_gpus

    preset = with_gpus(load_preset(preset_arg), gpus)
    if slurm:
        preset = with_field(preset, "launch.scheduler", "slurm")
    plan, ctx = plan_here(preset, read_inventory(), resume=resume)
    return preset, plan, ctx


def report_problems(plan: Plan, source: str) -> int:
    """Errors on stderr, one paragraph each; exit 2 when there are any."""
    for p in plan.errors:
        sys.stderr.write(p.paragraph(source) + "\n")
    return ExitCode.INVALID if plan.errors else ExitCode.OK


def cmd_plan(args: argparse.Namespace) -> int:
    from gpuwizard.planning.report import plan_text

    preset, plan, _ = resolve(args.preset, args.gpus)
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    else:
        print(plan_text(plan, preset.name))
    return report_problems(plan, preset.name)


def cmd_preview(args: argparse.Namespace) -> int:
    from gpuwizard.core.errors import warning
    from gpuwizard.planning.plan import build_command
    from gpuwizard.trainers.registry import get_trainer

    preset, plan, ctx = resolve(args.preset, args.gpus, resume=args.resume, slurm=args.format == "sbatch")
    if plan.errors:
        return report_problems(plan, preset.name)
    if args.resume and get_trainer(preset.trainer).last_checkpoint(ctx) is None:
        plan.problems.append(
            warning(
                "--resume",
                f"there is no {preset.trainer} checkpoint in {ctx.output_path} yet; run will refuse to resume",
                "run it without --resume first",
            )
        )
    spec = build_command(ctx)
    if args.format == "json":
        print(json.dumps(spec.to_json() | {"warnings": [p.paragraph() for p in plan.warnings]}, indent=2))
    elif args.format == "script":
        print(spec.script(), end="")
    elif args.format == "sbatch":
        from gpuwizard.runner.slurm import batch_script

        for p in plan.warnings:
            sys.stderr.write("warning: " + p.paragraph() + "\n")
        print(batch_script(ctx, spec), end="")
    else:
        for p in plan.warnings:
            sys.stderr.write("warning: " + p.paragraph() + "\n")
        print(spec.shell())
    return ExitCode.OK


def cmd_check(args: argparse.Namespace) -> int:
    from gpuwizard.planning.plan import build_command
    from gpuwizard.trainers.registry import check_command

    preset, plan, ctx = resolve(args.preset, args.gpus, resume=args.resume)
    if plan.errors:
        return report_problems(plan, preset.name)
    result = check_command(ctx, build_command(ctx), use_cache=not args.fresh)
    if args.json:
        print(json.dumps(result.model_dump(), indent=2))
    else:
        print(f"{preset.name}: {result.summary}")
        for text in result.notes:
            print(f"  note: {text}")
    if result.blocks:
        for p in result.problems():
            sys.stderr.write(p.paragraph(preset.name) + "\n")
        return ExitCode.INVALID
    return ExitCode.OK


def cmd_probe(args: argparse.Namespace) -> int:
    from gpuwizard.cli.probe import probe_command

    return probe_command(args)


def cmd_gpus(args: argparse.Namespace) -> int:
    from gpuwizard.gpus.inventory import read_inventory

    if args.record:
        return record_gpus(args.record)
    inventory = read_inventory()
    if args.json:
        print(json.dumps(inventory.to_json(), indent=2))
        if inventory.message:
            sys.stderr.write(inventory.message + "\n")
    else:
        from gpuwizard.planning.report import inventory_text

        print(inventory_text(inventory))
    return ExitCode.OK


def record_gpus(path: str) -> int:
    from pathlib import Path

    from gpuwizard.core.yamlio import atomic_write
    from gpuwizard.gpus.nvml import NvmlUnavailable, open_nvml
    from gpuwizard.gpus.replay import record_machine, replay_module_from_env

    try:
        nv = open_nvml(replay_module_from_env())  # a replay records too: the round trip is how the recorder is tested
    except NvmlUnavailable as exc:
        raise UserError(
            problem("--record", f"cannot record: {exc}", "run it on a machine with an NVIDIA driver", value=path)
        ) from None
    try:
        recording = record_machine(nv)
    finally:
        nv.nvmlShutdown()
    atomic_write(Path(path), json.dumps(recording, indent=2))
    print(f"recorded {len(recording['devices'])} GPU(s) to {path}; replay with GPUWIZARD_NVML_REPLAY={path}")
    return ExitCode.OK


def cmd_presets(args: argparse.Namespace) -> int:
    from gpuwizard.model.preset_files import delete_user_preset, listed_presets, load_preset_file, preset_text

    if args.action in ("show", "delete") and not args.name:
        raise UserError(problem("NAME", f"`presets {args.action}` needs a preset name", "see `gpuwizard presets list`"))
    if args.action == "schema":
        from gpuwizard.model.preset import preset_schema

        print(json.dumps(preset_schema(), indent=2))
        return ExitCode.OK
    if args.action == "show":
        path, text = preset_text(args.name)
        print(f"# {path}")
        print(text, end="")
        return ExitCode.OK
    if args.action == "delete":
        path = delete_user_preset(args.name)
        print(f"deleted {path}")
        return ExitCode.OK
    rows = []
    for name, source, path in listed_presets():
        try:
            preset = load_preset_file(path)
            rows.append((name, source, preset.trainer, preset.policy, str(preset.world_size), preset.description))
        except UserError as exc:
            rows.append((name, source, "-", "-", "-", f"INVALID: {exc.paragraph()}"))
    width = max((len(r[0]) for r in rows), default=4)
    print(f"{'name':<{width}}  source   trainer  policy    gpus  description")
    for r in rows:
        print(f"{r[0]:<{width}}  {r[1]:<7}  {r[2]:<7}  {r[3]:<8}  {r[4]:>4}  {r[5]}")
    return ExitCode.OK


def cmd_run(args: argparse.Namespace) -> int:
    from gpuwizard.cli.signals import RunSignals
    from gpuwizard.runner.interrupt import StartCancelled

    signals = RunSignals()
    signals.install()  # before the heavy modules load: a stop signal may land while they do
    try:
        from gpuwizard.cli.headless import run_command

        return run_command(args, signals)
    except StartCancelled as exc:
        return signals.cut_short(exc)
    finally:
        signals.restore()


def cmd_attach(args: argparse.Namespace) -> int:
    from gpuwizard.cli.headless import attach_command

    return attach_command(args)


def cmd_runs(args: argparse.Namespace) -> int:
    from gpuwizard.cli.runs import runs_command

    return runs_command(args)


def cmd_envs(args: argparse.Namespace) -> int:
    from gpuwizard.cli.envs import envs_command

    return envs_command(args)


def cmd_stop(args: argparse.Namespace) -> int:
    from gpuwizard.cli.runs import stop_command

    return stop_command(args)


def cmd_compare(args: argparse.Namespace) -> int:
    from gpuwizard.cli.runs import compare_command

    return compare_command(args)
