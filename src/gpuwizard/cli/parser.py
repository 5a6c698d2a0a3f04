"""The command line's grammar: every command, flag and help line, and argparse's errors as one paragraph."""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Iterable
from typing import NoReturn, TypeVar, overload

from gpuwizard import __version__
from gpuwizard.core.codes import ExitCode
from gpuwizard.model.trainer_names import trainer_names


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
    """The grammar for the trainers registered now (a trainer registered later gets a grammar naming it)."""
    return grammar(trainer_names())


@functools.cache
def grammar(trainers: tuple[str, ...]) -> Parser:
    """Built once per set of trainers and only read after: argparse's translated help strings cost ~17 ms a build,
    paid once by the command line and once per in-process call by the tests."""
    parser = Parser(prog="gpuwizard", description="Plan, launch and watch multi-GPU fine-tunes of robot policies.")
    parser.add_argument("--preset", metavar="NAME_OR_FILE", help="start the wizard from a preset")
    parser.add_argument("--version", action="version", version=f"gpuwizard {__version__}", help="print the version")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")

    gpus = sub.add_parser("gpus", help="GPU inventory: devices, memory, utilization, topology, processes")
    gpus.add_argument("--json", action="store_true", help="the inventory (or the --bandwidth measurement) as JSON")
    gpus.add_argument(
        "--record", metavar="FILE", help="record this machine's NVML answers for replay (GPUWIZARD_NVML_REPLAY)"
    )
    gpus.add_argument(
        "--bandwidth",
        action="store_true",
        help="measure the all-reduce bus bandwidth over the visible GPUs (NCCL), or CPU processes (gloo); kept for "
        "the probe",
    )
    gpus.add_argument("--device", choices=["auto", "cuda", "cpu"], help="with --bandwidth: GPUs or CPU (default: auto)")
    gpus.add_argument(
        "--processes", type=positive_int, metavar="N", help="with --bandwidth: ranks (default: every GPU, or 2 on CPU)"
    )
    gpus.add_argument("--sizes", metavar="MIB,MIB", help="with --bandwidth: message sizes in MiB, e.g. 1,4,16,64")

    for name, text in (
        ("plan", "the resolved plan: batch meaning, scaling, strategy, checks"),
        ("preview", "the exact command run would execute"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("preset", metavar="PRESET", help=PRESET_HELP)
        p.add_argument("--gpus", type=positive_int, metavar="N", help="see the same preset on N GPUs")
        p.add_argument(
            "--trust",
            action="store_true",
            help="trust what this preset names, so its interpreter may be asked which trainer it has (remembered)",
        )
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

    doctor = sub.add_parser(
        "doctor",
        help="the environment the job will run in: torch against the GPUs and driver, the video decoder timed, the "
        "dataset, /dev/shm, memory, disk, open files, logins, the pairs of GPUs",
    )
    doctor.add_argument("preset", metavar="PRESET", nargs="?", help="the job to check (none: this machine alone)")
    doctor.add_argument("--gpus", type=positive_int, metavar="N", help="check the job on N GPUs")
    doctor.add_argument("--json", action="store_true", help="every fact and finding as one JSON document")
    doctor.add_argument(
        "--fresh", action="store_true", help="ask the training interpreter again, not its remembered answer"
    )

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
    probe.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        metavar="N",
        help="alternating rounds of the two compared configurations",
    )
    probe.add_argument(
        "--from-run",
        metavar="RUN_ID",
        help="start every configuration from the newest checkpoint of this run of the preset, so B_noise is "
        "measured at that stage of training (demo trainer only)",
    )
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
        help="skip asking the trainer's own parser and the environment before the launch (`gpuwizard check`, "
        "`gpuwizard doctor`)",
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
    runs.add_argument("--sweep", metavar="SWEEP_ID", help="only the runs of this sweep, with the values each ran")
    runs.add_argument(
        "--best", metavar="RUN", help="print the path of the run's best saved checkpoint by held-out loss"
    )
    envs = sub.add_parser("envs", help="the training environments on this machine and the trainers each one has")
    envs.add_argument("--trainer", choices=trainers, help="only those that have it")
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

    sweep = sub.add_parser(
        "sweep",
        help="several runs of a preset at once over a grid, each on free devices: sweep PRESET --set FIELD=V1,V2 "
        "[--seeds N] [--slurm] | sweep status|stop|resume|watch [ID] [--save-best NAME] | sweep schema",
    )
    sweep.add_argument(
        "words",
        nargs="*",
        metavar="PRESET|ACTION",
        help="the preset to sweep; or status, stop, resume or watch (the live screen) and a sweep id (default: the "
        "newest); or schema",
    )
    sweep.add_argument(
        "--set", action="append", default=[], dest="sets", metavar="FIELD=V1,V2", help="a preset field and its values"
    )
    sweep.add_argument("--seeds", type=positive_int, metavar="N", help="N runs per combination, seeded 0..N-1")
    sweep.add_argument("--file", metavar="SWEEP.yaml", help="the grid from a sweep file (`sweep schema`)")
    sweep.add_argument(
        "--metric",
        choices=["final_loss", "loss_at_equal_samples", "duration_s"],
        help="what names the best run, lowest first (default final_loss)",
    )
    sweep.add_argument("--json", action="store_true", help="with status: the sweep as JSON")
    sweep.add_argument("--slurm", action="store_true", help="submit each run to SLURM as a job of its own")
    sweep.add_argument(
        "--save-best", metavar="NAME", help="with status: save the best run's preset as your preset NAME"
    )

    for trusting in (check, doctor, probe, run, sweep):
        trusting.add_argument(
            "--trust",
            action="store_true",
            help="trust the interpreter, environment and files this preset names (remembered; see `presets trust`)",
        )

    presets = sub.add_parser("presets", help="saved presets: list, show NAME, copy NAME NEW, delete NAME, schema")
    presets.add_argument(
        "action",
        nargs="?",
        choices=["list", "show", "copy", "delete", "trust", "schema"],
        default="list",
        help="list (default) | show NAME: the file | copy NAME NEW: into your presets as NEW, to edit | delete NAME: "
        "one of yours | trust NAME: let it run the interpreter, environment and files it names | schema: the JSON "
        "Schema",
    )
    presets.add_argument("name", nargs="?", metavar="NAME", help="the preset to show, copy, delete or trust")
    presets.add_argument("new", nargs="?", metavar="NEW", help="with copy: the name of your copy")
    return parser
