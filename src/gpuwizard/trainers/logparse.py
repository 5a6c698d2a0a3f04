"""Parsers for the lines trainers print: step lines, tqdm bars, HF dicts, banners, checkpoints."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from gpuwizard.core.safetext import safe_line

RANK_PREFIX = re.compile(r"^\[(?:default|rank)\d+\]:")
NUMBER = r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
BIG_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12, "Q": 10**15}


@dataclass
class LineInfo:
    """Facts read from one log line; None means the line did not say."""

    step: int | None = None
    step_is_exact: bool = True
    total: int | None = None
    bar_total: int | None = None
    """A progress bar's own total where the bar counts from the step a run resumed at (LeRobot's bar is
    tqdm(total=cfg.steps - step)): `step` is then relative, and total - bar_total is the offset."""
    loss: float | None = None
    eval_loss: float | None = None
    """The loss on held-out episodes (LeRobot main's `step N: eval_loss=X`, the demo's in the same form)."""
    lr: float | None = None
    samples_per_s: float | None = None
    data_s: float | None = None
    """Seconds of each step spent waiting for the batch (LeRobot's data_s), against step_s."""
    step_s: float | None = None
    samples: int | None = None
    """Samples trained on so far, as the trainer counts them (LeRobot's smpl:, rounded to K/M when large)."""
    steps_per_s: float | None = None
    """The trainer's own step rate where its bar shows one (tqdm's it/s, measured inside the process)."""
    bar: bool = False
    """`step` and `total` come from a progress bar: it counts the run's steps only where its total is the run's (a
    datasets 'Map' bar or an eval bar counts something else)."""
    effective_batch: int | None = None
    checkpoint: bool = False
    finished: bool = False


def clean(line: str) -> str:
    """Strip escape sequences (colour, and any a job prints to reach the terminal: events quote these lines) and
    torchrun's rank prefix, show other control characters; keep the last carriage-return segment."""
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    return RANK_PREFIX.sub("", safe_line(line)).rstrip()


def to_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def big_number(text: str) -> tuple[int, bool] | None:
    """LeRobot's format_big_number: '12K' -> (12000, False); '999' -> (999, True)."""
    match = re.fullmatch(r"([\d.]+)([KMBTQ]?)", text)
    if not match:
        return None
    value = float(match[1]) * BIG_SUFFIX[match[2]]
    return int(value), match[2] == ""


TQDM = re.compile(
    r"^(?P<desc>[^|]*?):?\s*(?P<pct>\d+)%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[[^\],]*"
    r"(?:,\s*(?:(?P<rate>\d+(?:\.\d+)?)(?P<unit>it/s|s/it|step/s|s/step)|\?\w+/s))?"
)
"""tqdm's default format, `{desc}: {percentage}%|{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}]`; the rate is
`N it/s`, or `N s/it` below one step a second (tqdm.format_meter), with the trainer's unit in place of `it`."""


def parse_tqdm(line: str, descs: tuple[str, ...] = ("",)) -> LineInfo | None:
    """A bar whose description is one of the trainer's own bars' (`descs`; "" for none, as HF's training bar):
    another library's bar on the same output (datasets' "Map", a download) says nothing of this run."""
    match = TQDM.search(line.strip())
    if not match or match["desc"].strip() not in descs:
        return None
    rate = steps_per_second(match["rate"], match["unit"])
    return LineInfo(step=int(match["n"]), total=int(match["total"]), steps_per_s=rate, bar=True)


def steps_per_second(rate: str | None, unit: str | None) -> float | None:
    """A bar's rate as steps a second: `12.5it/s` as it is, `4.06s/step` (tqdm below one a second) inverted."""
    value = to_float(rate.replace(",", "")) if rate else None
    if not value or value <= 0 or unit is None:
        return None
    return 1 / value if unit.startswith("s/") else value


KEY_VALUE = re.compile(r"(?P<k>[A-Za-z0-9_/]+):(?P<v>" + NUMBER + r")(?=\s|$)")
LEROBOT_STEP = re.compile(
    r"\bstep:(?P<step>[\d.]+[KMBTQ]?) smpl:(?P<samples>[\d.]+[KMBTQ]?) ep:\S+ epch:[\d.]+ (?P<rest>.*)$"
)
EVAL_LOSS = re.compile(r"\bstep (?P<step>\d+): eval_loss=(?P<loss>\S+)$")
"""LeRobot main's held-out loss (lerobot_train.py at 7427f31, line ~800: `step {step}: eval_loss={eval_loss:.4f}`)."""
LEROBOT_BANNER = re.compile(r"Effective batch size: .*?= (?P<eff>\d+)")
LEROBOT_TOTAL = re.compile(r"cfg\.steps=(?P<steps>\d+)")


def parse_lerobot(line: str) -> LineInfo | None:
    """LeRobot 0.6.1 and main: step lines, the effective-batch banner, checkpoints, the end."""
    match = LEROBOT_STEP.search(line)
    if match:
        values = {m["k"]: float(m["v"]) for m in KEY_VALUE.finditer(match["rest"])}  # NUMBER: what float() reads
        step, samples = big_number(match["step"]), big_number(match["samples"])
        return LineInfo(
            step=step[0] if step else None,
            step_is_exact=step[1] if step else True,
            samples=samples[0] if samples and samples[1] else None,
            loss=values.get("loss"),
            lr=values.get("lr"),
            samples_per_s=values.get("smp/s"),
            data_s=values.get("data_s"),
            step_s=values.get("step_s") or (values.get("updt_s", 0.0) + values.get("data_s", 0.0) or None),
        )
    if held_out := EVAL_LOSS.search(line):
        return LineInfo(step=int(held_out["step"]), eval_loss=to_float(held_out["loss"]))
    if (banner := LEROBOT_BANNER.search(line)) and "smpl:" not in line:
        return LineInfo(effective_batch=int(banner["eff"]))
    if total := LEROBOT_TOTAL.search(line):
        return LineInfo(total=int(total["steps"]))
    if "Checkpoint policy after step" in line:
        return LineInfo(checkpoint=True)
    if line.endswith("End of training"):
        return LineInfo(finished=True)
    bar = parse_tqdm(line, ("Training",))  # lerobot_train.py: tqdm(total=cfg.steps - step, desc="Training")
    if bar is None:
        return None
    return LineInfo(step=bar.step, bar_total=bar.total)  # counts from the resume; its step lines log smp/s


HF_DICT = re.compile(r"^\s*\{'(?:loss|train_runtime|eval_loss)'.*\}\s*$")
HF_BARE_NUMBER = re.compile(r"(?<=: )(-?nan|-?inf)(?=[,}])")
"""transformers v4 prints float('nan') in a dict as a bare nan, which is no Python literal."""
HF_BANNER = re.compile(r"Total train batch size \(w\. parallel, distributed & accumulation\) = (?P<eff>[\d,]+)")
HF_TOTAL = re.compile(r"Total optimization steps = (?P<steps>[\d,]+)")


def parse_hf(line: str) -> LineInfo | None:
    """HF Trainer (and GR00T) metric dicts, numbers as themselves (transformers v4: {'loss': 0.04, 'learning_rate':
    9.9e-05}) or as strings (v5, ProgressCallback.on_log's f"{v:.4g}": {'loss': '0.9536', 'learning_rate': '0'});
    the training banner's total batch and optimization steps; checkpoints; the tqdm bar."""
    if HF_DICT.match(line):
        try:
            values = ast.literal_eval(HF_BARE_NUMBER.sub(r"'\1'", line.strip()))
        except (ValueError, SyntaxError):
            return None
        if not isinstance(values, dict):
            return None
        if "eval_loss" in values:  # Trainer.evaluate's dict under eval_strategy: the step is the run's latest
            return LineInfo(eval_loss=_maybe_float(values.get("eval_loss")))
        if "train_runtime" in values:
            return LineInfo(finished=True, samples_per_s=_maybe_float(values.get("train_samples_per_second")))
        return LineInfo(loss=_maybe_float(values.get("loss")), lr=_maybe_float(values.get("learning_rate")))
    if match := HF_BANNER.search(line):
        return LineInfo(effective_batch=int(match["eff"].replace(",", "")))
    if match := HF_TOTAL.search(line):
        return LineInfo(total=int(match["steps"].replace(",", "")))
    if "Saving model checkpoint to" in line:
        return LineInfo(checkpoint=True)
    return parse_tqdm(line)  # trainer_callback.py ProgressCallback: tqdm(total=state.max_steps), no description


def _maybe_float(value: object) -> float | None:
    """A number, or a number written as a string (v5); anything else says nothing."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return to_float(value) if isinstance(value, str) else None


OPENPI_JAX = re.compile(r"Step (?P<step>\d+): (?P<rest>.*)")
OPENPI_TORCH = re.compile(r"\bstep=(?P<step>\d+) loss=(?P<loss>\S+) lr=(?P<lr>\S+)")
OPENPI_BANNER = re.compile(r"total batch size across \d+ GPUs: (?P<eff>\d+)")
OPENPI_TORCH_CONFIG = re.compile(r"Training config: batch_size=(?P<batch>\d+), .*num_train_steps=(?P<steps>\d+)")
"""scripts/train_pytorch.py (openpi 15a9616): batch_size is the global batch; its effective_batch_size is per GPU."""
OPENPI_PROGRESS = re.compile(
    r"Progress on:.* (?P<n>[\d.]+[kMGTP]?)it/(?P<total>[\d.]+[kMGTP]?)it (?:rate:(?P<rate>[\d,.]+)(?P<unit>it/s|s/it))?"
)
"""tqdm_loggable (openpi's non-TTY bar): `Progress on: 2.00it/4.00it rate:...`, counts through tqdm's format_sizeof
(3 significant digits, k/M/G... past 999); `-/4` before the first step. Its rate is f"{rate:,.1f}it/s", or
f"{1/rate:,.1f}s/it" below one step a second (tqdm_loggable/tqdm_logging.py)."""
OPENPI_SAVED = "CheckpointManager Save Finalize is done"
"""orbax-checkpoint (0.11.13 in openpi's lock) once a step's checkpoint is written: openpi's JAX save logs nothing."""
OPENPI_DONE = "Waiting for checkpoint manager to finish"
"""scripts/train.py's line after its last step."""
SIZEOF = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}


def sizeof(text: str) -> tuple[int, bool]:
    """tqdm's format_sizeof back to a count, and whether it is exact (no k/M/G... rounding)."""
    suffix = text[-1] if text[-1] in SIZEOF else ""
    return round(float(text.removesuffix(suffix)) * SIZEOF[suffix]), suffix == ""


def parse_openpi(line: str) -> LineInfo | None:
    """openpi JAX `Step N: loss=...`, PyTorch `step=N loss=... lr=...`, banners and progress.

    Both number a line by the index of the update it follows (scripts/train.py writes `Step {step}` in `for step in
    pbar` after that update; train_pytorch.py logs `step={global_step}` before `global_step += 1`): N + 1 are done."""
    if match := OPENPI_JAX.search(line):
        values = dict(re.findall(r"(\w+)=(" + NUMBER + ")", match["rest"]))
        return LineInfo(step=int(match["step"]) + 1, loss=to_float(values.get("loss", "x")))
    if match := OPENPI_TORCH.search(line):
        return LineInfo(step=int(match["step"]) + 1, loss=to_float(match["loss"]), lr=to_float(match["lr"]))
    if match := OPENPI_BANNER.search(line):
        return LineInfo(effective_batch=int(match["eff"]))
    if match := OPENPI_TORCH_CONFIG.search(line):
        return LineInfo(effective_batch=int(match["batch"]), total=int(match["steps"]))
    if match := OPENPI_PROGRESS.search(line):
        (step, exact), (total, _) = sizeof(match["n"]), sizeof(match["total"])
        rate = steps_per_second(match["rate"], match["unit"])
        return LineInfo(step=step, step_is_exact=exact, total=total if exact else None, steps_per_s=rate)
    if "Saved checkpoint at step" in line or OPENPI_SAVED in line:
        return LineInfo(checkpoint=True)
    if OPENPI_DONE in line:
        return LineInfo(finished=True)
    return parse_tqdm(line, ("", "Training"))  # scripts/train.py: no description; train_pytorch.py: "Training"
