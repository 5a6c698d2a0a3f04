"""`gpuwizard gpus --bandwidth`: the flags read into a measurement, its progress on stderr, the table (80 columns)
or JSON, and the record saved for the probe (gpus/bandwidth.py)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import textwrap
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from gpuwizard.core.codes import ExitCode
from gpuwizard.core.errors import UserError, problem

if TYPE_CHECKING:
    from gpuwizard.gpus.bandwidth import BandwidthRecord, SizeResult
    from gpuwizard.runner.bandwidth.measure import Measurement

MAX_SIZE_MIB = 4096


def parse_sizes(text: str | None, default: tuple[int, ...]) -> tuple[int, ...]:
    """--sizes 1,4,16 (MiB) as bytes, each a whole number of float32 values; the default sweep without it."""
    from gpuwizard.gpus.bandwidth import MIB

    if text is None:
        return tuple(s * MIB for s in default)
    sizes = []
    for part in text.split(","):
        try:
            mib = float(part)
        except ValueError:
            mib = -1.0
        size = int(mib * MIB) // 4 * 4 if 0 < mib <= MAX_SIZE_MIB else 0
        if size < 4:
            raise UserError(
                problem(
                    "--sizes",
                    f"{part.strip()!r} is not a message size in MiB between 4 bytes and {MAX_SIZE_MIB} MiB",
                    "give sizes in MiB separated by commas, e.g. --sizes 1,4,16,64 (0.25 is 256 KiB)",
                    value=text,
                )
            )
        sizes.append(size)
    return tuple(sorted(set(sizes)))


def measurement_from(args: argparse.Namespace) -> Measurement:
    """The measurement the flags ask for, on the devices found here; UserError naming the flag otherwise."""
    from gpuwizard.gpus.bandwidth import CPU_SIZES_MIB, GPU_SIZES_MIB
    from gpuwizard.runner.bandwidth.measure import Measurement

    if not args.bandwidth:
        given = "--device" if args.device else "--processes" if args.processes else "--sizes"
        raise UserError(problem(given, "only applies to --bandwidth", f"add --bandwidth, or leave out {given}"))
    if args.record:
        raise UserError(problem("--record", "records NVML, --bandwidth measures", "run them one at a time"))
    device = args.device or "auto"
    visible = []
    if device != "cpu":
        from gpuwizard.gpus.inventory import read_inventory

        visible = read_inventory().visible()
        if device == "auto":
            device = "cuda" if visible else "cpu"
    if device == "cuda":
        if len(visible) < 2:
            raise UserError(
                problem(
                    "--device",
                    f"{len(visible)} GPU visible here, and an all-reduce needs two or more",
                    "make two or more visible (CUDA_VISIBLE_DEVICES, `gpuwizard gpus` lists them), or measure gloo "
                    "between CPU processes with --device cpu",
                    value="cuda",
                )
            )
        ranks = args.processes or len(visible)
        if not 2 <= ranks <= len(visible):
            raise UserError(
                problem(
                    "--processes",
                    f"one rank per GPU, and {len(visible)} are visible",
                    f"give 2 to {len(visible)}, or leave it out for all of them",
                    value=ranks,
                )
            )
        used = visible[:ranks]
        names = sorted({g.name or "GPU" for g in used})
        return Measurement(
            device="cuda",
            ranks=ranks,
            sizes=parse_sizes(args.sizes, GPU_SIZES_MIB),
            devices=tuple(g.uuid or f"cuda:{g.cuda_index}" for g in used),
            hardware=f"{ranks} x {', '.join(names)}",
        )
    cores = os.cpu_count() or 1
    ranks = args.processes or 2
    if not 2 <= ranks <= max(2, cores):
        raise UserError(
            problem(
                "--processes",
                f"an all-reduce on the CPU needs 2 or more processes, at most one per core ({cores} here)",
                f"give 2 to {max(2, cores)}",
                value=ranks,
            )
        )
    return Measurement(
        device="cpu",
        ranks=ranks,
        sizes=parse_sizes(args.sizes, CPU_SIZES_MIB),
        devices=("cpu",),
        hardware=f"CPU, {cores} cores",
    )


def bandwidth_command(args: argparse.Namespace) -> int:
    from gpuwizard.gpus.bandwidth import save, size_text
    from gpuwizard.runner.bandwidth.measure import FIELD, MeasurementFailed, measure

    m = measurement_from(args)
    sizes = ", ".join(size_text(s) for s in m.sizes)
    say(f"starting {m.ranks} {m.backend} processes on {m.hardware}; all-reduce of {sizes}, {m.iterations} timed each")
    done: list[SizeResult] = []

    def progress(result: SizeResult) -> None:
        from gpuwizard.gpus.bandwidth import gbps

        done.append(result)
        say(
            f"{size_text(result.size_bytes)}: busbw {gbps(result.busbw)} GB/s "
            f"({gbps(result.busbw_low)}-{gbps(result.busbw_high)}), {len(done)} of {len(m.sizes)} sizes"
        )

    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        record = measure(m, progress)
    except KeyboardInterrupt:
        say("interrupted: every rank stopped, nothing saved")
        return ExitCode.INTERRUPTED
    except MeasurementFailed as exc:
        sys.stderr.write(exc.problem.paragraph() + "\n")
        return ExitCode.FAILED
    finally:
        signal.signal(signal.SIGTERM, previous)
    try:
        path = save(record)
    except OSError as exc:  # a full or read-only data folder: the figures are measured, the record is not kept
        raise UserError(
            problem(
                FIELD,
                f"measured ({record.figure_text()}), but the record cannot be saved for `gpuwizard probe`: "
                f"{exc.strerror or exc}",
                "free disk space or set GPUWIZARD_DATA_DIR, then run it again",
            )
        ) from None
    if args.json:
        top = record.largest
        figure = {"busbw": top.busbw, "busbw_low": top.busbw_low, "busbw_high": top.busbw_high}
        print(json.dumps(record.model_dump() | {"figure": figure, "saved": str(path)}, indent=2))
    else:
        print(table_text(record, path))
    return ExitCode.OK


def interrupted(signum: int, frame: FrameType | None) -> None:
    """SIGTERM stops the measurement as Ctrl-C does: every rank stopped before gpuwizard exits."""
    raise KeyboardInterrupt


def say(text: str) -> None:
    sys.stderr.write(f"bandwidth: {text}\n")
    sys.stderr.flush()


def time_text(seconds: float) -> str:
    """ "0.845 ms", "50.6 ms", "1.46 s": three significant figures."""
    if seconds < 0.9995:
        return f"{seconds * 1000:#.3g}".rstrip(".") + " ms"  # '#' keeps 1.00's zeros, and 119's point: "119. ms"
    return f"{seconds:#.3g}".rstrip(".") + " s"


def table_text(record: BandwidthRecord, path: Path) -> str:
    """The table per size (80 columns), what its columns mean and the figure the probe uses."""
    from gpuwizard.gpus.bandwidth import gbps, size_text

    unit = "GPUs" if record.device == "cuda" else "processes"
    lines = [
        f"all-reduce over {record.ranks} {unit} ({record.backend}, {record.hardware}), {record.dtype} sum",
        f"{'size':>9} {'time (median)':>14} {'algbw GB/s':>11} {'busbw GB/s':>11} {'busbw min-max':>15}",
    ]
    for s in record.sizes:
        lines.append(
            f"{size_text(s.size_bytes):>9} {time_text(s.time_s):>14} {gbps(s.algbw):>11} {gbps(s.busbw):>11} "
            f"{gbps(s.busbw_low) + '-' + gbps(s.busbw_high):>15}"
        )
    top = record.largest
    notes = [
        f"time: the median of {top.iterations} timed iterations after {record.warmup} warm-up, each the slowest "
        f"rank's; algbw = size / time; busbw = algbw x 2(n-1)/n (NCCL-tests); min-max: at the slowest and fastest "
        "iteration",
        f"figure used: {record.figure_text()}; saved to {path} for `gpuwizard probe` on this host and device set",
    ]
    lines += [part for note in notes for part in textwrap.wrap(note, 80, subsequent_indent="  ")]
    return "\n".join(lines)
