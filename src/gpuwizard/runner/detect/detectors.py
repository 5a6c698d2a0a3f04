"""Progress, plan-against-reality checks and hang detection for one job, raising the events its parts find (no I/O)."""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import replace

from gpuwizard.core.kinds import EventKind, Severity
from gpuwizard.runner.detect.failures import MAX_PARSED_CHARS, FailureReader, lines_containing
from gpuwizard.runner.detect.overfit import HeldOutWatch
from gpuwizard.runner.detect.stalls import InputBoundWatch, classify_ranks, ranks_working
from gpuwizard.runs.events import Hang, RankVerdict
from gpuwizard.runs.records import Event, Expectations, GpuSample, LrSchedule, Metric, Progress, RankState
from gpuwizard.trainers.base import Trainer
from gpuwizard.trainers.logparse import LineInfo, clean

LR_TOLERANCE = 0.25
FIRST_STEP_MIN_S = 600.0
EXIT_ABORT_ADVICE = (
    "Training had reached its last step ({step}) before this rank aborted with no exception, which is how a crash "
    "in Python's exit looks (torch 2.13 with gloo can free a collective's tensor from a worker thread after the "
    "interpreter began to shut down). If the last checkpoint is in the output folder, the weights are complete and "
    "nothing is left to train."
)
"""A rank that aborts with no exception after the run's last step (std::terminate in the interpreter's exit)."""


def unrounded_rate(logged: float, step_s: float | None, per_step: int | None) -> float:
    """LeRobot logs samples/s rounded to a whole number (smp/s:1 on a slow CPU run) but computes it as the samples of
    one step over its logged step time (lerobot_train.py: 0.6.1 effective_batch_size / (updt_s + data_s), main
    7427f31 samples_per_step / step_s): the same formula over the 3-decimal step time gives the digits back, used
    only where it agrees with the logged figure within both roundings."""
    if not step_s or not per_step or logged != round(logged):
        return logged
    derived = per_step / step_s
    slack = 0.5 + derived * 0.001 / step_s  # smp/s to the unit; 0.6.1's step time is two times to the millisecond
    return derived if abs(derived - logged) <= slack else logged


class JobMonitor:
    """Feed it log lines in batches and a per-rank sample every second; it keeps progress and raises events.

    `now` is the monotonic clock (time.monotonic()) for every duration, so a wall-clock jump is never a hang; the
    records it fills (progress, metrics) carry wall time, for display only.
    """

    def __init__(self, expect: Expectations, trainer: Trainer, now: float | None = None):
        self.expect = expect
        self.parse_line = trainer.parse_line
        self.markers = trainer.progress_markers
        start = now if now is not None else time.monotonic()
        self.started_at = start
        self.last_progress_at: float | None = None
        self.progress = Progress(total=expect.steps, started_t=time.time())
        self.events: list[Event] = []
        self.intervals: deque[float] = deque(maxlen=64)
        self.checkpoint_started: float | None = None
        self.checkpoint_durations: list[float] = []
        self.last_output_t = start
        self.rate_window: deque[tuple[float, int]] = deque(maxlen=32)
        self.failures = FailureReader()
        self.lr_checked = False
        self.lr_reported = False
        self.schedule = expect.schedule or LrSchedule(peak=expect.lr, warmup_steps=expect.warmup_steps)
        self.waiting: list[tuple[Metric, float | None]] = []
        """Losses, with the lr of the same line, logged without their step (HF's metric dicts) since step
        waiting_after: the next step the log names (HF redraws its bar right after a dict) places them."""
        self.waiting_after = 0
        self.batch_checked = False
        self.hang_reported = False
        self.diverged = False
        self.slow_extension_until: float | None = None
        self.last_ranks: list[RankState] = []
        self.exact_steps_seen = False
        self.last_alive_t: float | None = None
        self.metrics: list[Metric] = []
        self.input_bound = InputBoundWatch()
        self.held_out = HeldOutWatch()
        self.rate_sum, self.rate_count = 0.0, 0  # a running mean: week-long runs keep no per-line state
        self.own_rate = False
        """The trainer logs its own samples/s on its step lines: no rate is derived from its steps then."""
        self.logged_batch: int | None = None
        self.bar_rate: float | None = None

    def restart_clock(self, now: float) -> None:
        """The job starts only now (a SLURM job leaving the queue): its start-up allowance counts from here."""
        self.started_at = self.last_output_t = now
        self.progress.started_t = time.time()

    # -- log lines -------------------------------------------------------------------------
    def feed(self, raw: str, now: float | None = None) -> list[Event]:
        """One line (tests, small logs)."""
        return self.feed_text(raw, 1, now)

    def feed_text(self, text: str | None, count: int, now: float | None = None, bar: str | None = None) -> list[Event]:
        """`count` complete lines joined by newlines, and the newest bar state; only matching lines are parsed."""
        now = now if now is not None else time.monotonic()
        new: list[Event] = []
        if text is not None:
            self.progress.lines += count
            self.last_output_t = now
            for line in lines_containing(text, self.markers):
                info = self.parse_line(clean(line[:MAX_PARSED_CHARS]))
                if info:
                    new += self._apply(info, now)
            new += [self._event(event) for event in self.failures.feed_text(text)]
        if bar:
            info = self.parse_line(clean(bar[-MAX_PARSED_CHARS:]))
            if info:
                new += self._apply(info, now)
        return new

    def take_metrics(self) -> list[Metric]:
        """The losses read since the last call (the supervisor appends them to metrics.jsonl)."""
        taken, self.metrics = self.metrics, []
        return taken

    def _apply(self, info: LineInfo, now: float) -> list[Event]:
        p, new = self.progress, []
        if self._foreign_bar(info):
            return []
        if info.bar_total is not None and info.step is not None and p.total is not None:
            info = replace(info, step=info.step + max(0, p.total - info.bar_total))
        if info.total and info.total != p.total and info.step is not None:
            p.total = info.total
        if info.step is not None and info.step_is_exact:
            self.exact_steps_seen = True
        usable = info.step is not None and (info.step_is_exact or not self.exact_steps_seen)
        stepped = usable and info.step is not None and (p.step is None or info.step > p.step)
        if stepped and info.step is not None:
            if self.checkpoint_started is not None:
                self.checkpoint_durations.append(now - self.checkpoint_started)
                self.checkpoint_started = None
            elif self.last_progress_at is not None:
                self.intervals.append(now - self.last_progress_at)
            p.step, p.last_progress_t, self.last_progress_at = info.step, time.time(), now
            self.hang_reported = False
            self.slow_extension_until = None
            self.rate_window.append((now, info.step))
            self._update_rate()
        if usable and info.step is not None and self.waiting:
            new += self._place_waiting(info.step)
        rate = info.samples_per_s
        if rate is not None and not info.finished:
            self.own_rate = True
            rate = unrounded_rate(rate, info.step_s, self.expect.samples_per_step)
        elif rate is None and stepped and not self.own_rate and (info.bar or info.steps_per_s):
            rate = self._rate_from_steps(info.steps_per_s)  # LeRobot's bar (bar_total) counts micro-batches on main
        if rate is not None:
            if p.samples_per_s is not None:  # the first window includes start-up; leave it out of the mean
                self.rate_sum += rate
                self.rate_count += 1
                p.samples_per_s_mean = self.rate_sum / self.rate_count
            p.samples_per_s = rate
        if info.loss is not None:
            p.loss = info.loss
            metric = Metric(
                t=time.time(),  # a record: wall time (durations use the monotonic clock)
                step=p.step,
                loss=info.loss,
                lr=info.lr if info.lr is not None else p.lr,
                samples_per_s=p.samples_per_s,
            )
            if info.step is not None or p.finished:
                self.metrics.append(metric)
                self.held_out.add_train(info.loss)
            else:
                self.waiting_after = self.waiting_after if self.waiting else p.step or 0
                self.waiting.append((metric, info.lr))
            if not math.isfinite(info.loss) and not self.diverged:
                self.diverged = True
                new.append(
                    self._event(
                        Event(
                            kind=EventKind.LOSS_NONFINITE,
                            severity=Severity.ERROR,
                            title=f"loss became {info.loss} at step {p.step if p.step is not None else '?'}",
                            detail="Once the loss is NaN or infinite every later update is lost; the run is stopped "
                            "and marked failed.",
                            suggestion="Lower the lr (a scaling rule may have raised it too far) or add a warmup; "
                            "check the data for NaN or inf values; with fp16, try bf16. Reproduce with a smoke run.",
                            data={"loss": str(info.loss), "step": p.step},
                        )
                    )
                )
        if info.eval_loss is not None:
            new += self._held_out(info.eval_loss, info.step if info.step is not None else p.step)
        if info.samples is not None:
            p.samples = info.samples
        if info.data_s is not None and info.step_s:
            new += [self._event(event) for event in self.input_bound.by_log(info.data_s, info.step_s)]
        if info.lr is not None:
            p.lr = info.lr
            if info.step is not None:
                new += self._check_lr(info.lr, info.step, info.step)
        if info.effective_batch is not None:
            self.logged_batch = info.effective_batch
            new += self._check_batch(info.effective_batch)
        if info.checkpoint:
            p.checkpoints += 1
            if p.step is not None:
                self.held_out.add_checkpoint(p.step)
            self.checkpoint_started = now
        if info.finished:
            p.finished = True
            new += self._place_waiting(p.step or 0)  # nothing will name their step now
        return new

    def _held_out(self, loss: float, step: int | None) -> list[Event]:
        """A held-out loss: its own kind of metric, and the overfitting rule (runner/detect/overfit.py)."""
        self.metrics.append(Metric(t=time.time(), step=step, loss=loss, kind="held_out"))
        self.progress.held_out_loss = loss
        if step is None:
            return []
        events = [self._event(event) for event in self.held_out.add_held_out(step, loss)]
        if best := self.held_out.best():
            self.progress.best_held_out_step, self.progress.best_held_out_loss = best
        return events

    def _foreign_bar(self, info: LineInfo) -> bool:
        """A bar that counts something other than this run's steps (a datasets 'Map' bar, an eval bar): its total
        is not the run's; LeRobot's, which counts from the step it resumed at, never passes the run's total."""
        total = self.progress.total
        if total is None or not (info.bar or info.bar_total is not None):
            return False
        return info.total != total if info.bar else (info.bar_total or 0) > total

    def _rate_from_steps(self, bar_rate: float | None) -> float | None:
        """Samples/s where the trainer logs none per step (HF Trainer and GR00T log it only in the final dict,
        openpi never): its bar's own step rate (measured in the process), else the steps the log showed over the
        time they took, times the samples of one step (the trainer's banner, else the plan's; one logged step is one
        update for these)."""
        self.bar_rate = bar_rate or self.bar_rate  # a bar redraws now and then: its rate holds until the next
        steps_per_s = self.bar_rate or self.progress.steps_per_s
        batch = self.logged_batch or self.expect.effective_batch
        return steps_per_s * batch if steps_per_s and batch else None

    def _place_waiting(self, step: int) -> list[Event]:
        """Give the losses logged without a step the steps up to `step`, the next one the log named: the last
        multiples of the trainer's log interval (HF logs at multiples of logging_steps), or, without one, evenly
        spaced from waiting_after; then check the lr their lines logged."""
        waiting, self.waiting = self.waiting, []
        if not waiting:
            return []
        every, count = self.expect.log_interval, len(waiting)
        if every:
            last = step - step % every
            places = [(s, s) for s in (max(1, last - every * (count - 1 - i)) for i in range(count))]
        else:
            gap = max(0, step - self.waiting_after) / count
            places = [(self.waiting_after, self.waiting_after + round(gap * (i + 1))) for i in range(count)]
        new = []
        for (metric, lr), (low, high) in zip(waiting, places, strict=True):
            self.metrics.append(metric.model_copy(update={"step": high}))
            if lr is not None:
                new += self._check_lr(lr, low, high)
        return new

    def _update_rate(self) -> None:
        if len(self.rate_window) < 2:
            return
        (t0, s0), (t1, s1) = self.rate_window[0], self.rate_window[-1]
        if t1 > t0 and s1 > s0:
            rate = (s1 - s0) / (t1 - t0)
            self.progress.steps_per_s = rate
            total = self.progress.total or self.expect.steps
            self.progress.eta_s = max(0.0, (total - s1) / rate)

    def _check_lr(self, logged: float, low: int, high: int) -> list[Event]:
        """Compare the first lr logged after warmup with the schedule's value at its step (low..high where the
        line did not name it); an lr above the schedule's highest, or not a number at all, is wrong whenever it
        shows (a run that reads right at first and then logs 1e308 is no green run). Said once."""
        schedule = self.schedule
        wild = not logged <= schedule.highest() * (1 + LR_TOLERANCE)  # NaN compares False
        warming = low < schedule.warmup_steps + schedule.lag
        if self.lr_reported or ((self.lr_checked or warming) and not wild):
            return []
        self.lr_checked = True
        lowest, highest = schedule.between(low, high)
        if lowest * (1 - LR_TOLERANCE) <= logged <= highest * (1 + LR_TOLERANCE):
            return []
        self.lr_reported = True
        expected = schedule.logged_at(high)
        step = high if low == high else f"{low}-{high}"
        times = logged / expected if expected > 0 and math.isfinite(logged) else math.inf
        ratio = f"{times:.2f}x the planned one" if math.isfinite(times) else f"{logged:.3g}, planned {expected:.3g}"
        return [
            self._event(
                Event(
                    kind=EventKind.LR_MISMATCH,
                    severity=Severity.ERROR,
                    title=f"lr mismatch: the trainer logs {logged:.3g}, the plan's schedule says {expected:.3g}",
                    detail=f"At step {step} the logged learning rate is {ratio}.",
                    suggestion="The trainer ignored or overrode the lr flag (LeRobot's policy preset overwrites "
                    "--optimizer.lr). Stop and check the command; gpuwizard passes the lr flag each "
                    "trainer honours.",
                    data={"logged": logged, "expected": expected, "step": high},
                )
            )
        ]

    def _check_batch(self, logged: int) -> list[Event]:
        if self.batch_checked or self.expect.effective_batch is None:
            return []
        self.batch_checked = True
        if logged != self.expect.effective_batch:
            return [
                self._event(
                    Event(
                        kind=EventKind.BATCH_MISMATCH,
                        severity=Severity.ERROR,
                        title=f"effective batch mismatch: trainer says {logged}, plan says "
                        f"{self.expect.effective_batch}",
                        detail="The trainer's own banner disagrees with the planned samples per update.",
                        suggestion="Check the process count against the trainer's GPU count and the batch flag's "
                        "meaning for this trainer.",
                        data={"logged": logged, "expected": self.expect.effective_batch},
                    )
                )
            ]
        return []

    # -- time and processes --------------------------------------------------------------
    def first_step_limit(self) -> float:
        e = self.expect
        return e.first_step_timeout_s or max(3 * e.hang_timeout_s, FIRST_STEP_MIN_S)

    def checkpoint_allowance(self) -> float:
        """How long a checkpoint write may take before it counts as a hang (and a stop waits for one): the first gets
        the start-up allowance, later ones 3x the slowest seen."""
        return 3 * max(self.checkpoint_durations) if self.checkpoint_durations else self.first_step_limit()

    def threshold(self, now: float) -> tuple[float, str]:
        """Seconds without progress that count as a hang here, and why."""
        if self.progress.step is None:
            return self.first_step_limit(), "before the first step (model load, compile, communicator init)"
        base, why = self.expect.hang_timeout_s, "monitor.hang_timeout_s"
        if len(self.intervals) >= 3:
            ordered = sorted(self.intervals)
            p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
            if 5 * p90 > base:
                base, why = 5 * p90, f"5x the 90th-percentile step interval ({p90:.1f} s)"
        if self.checkpoint_started is not None:
            allowance = self.checkpoint_allowance()
            if allowance > base:
                base, why = allowance, "a checkpoint is being written"
        return base, why

    def progressing(self, now: float) -> bool:
        """Steps come within the hang limit: a stack dump taken now is a snapshot of work, not of a stall."""
        last = self.last_progress_at
        return last is not None and not self.hang_reported and now - last < self.threshold(now)[0]

    def tick(self, now: float, ranks: list[RankState], gpus: list[GpuSample] | None = None) -> list[Event]:
        """Called about once a second; returns a hang event when progress has stopped for too long, and says when
        the job is input bound."""
        self.last_ranks = ranks
        if self.progress.finished or self.hang_reported:
            return []
        stepped = self.progress.step is not None
        starved = [self._event(event) for event in self.input_bound.by_devices(now, ranks, gpus, stepped)]
        if starved:
            return starved
        if self.expect.multi_node and self.progress.step is None and ranks_working(ranks, gpus):
            # rank 0 logs the steps, and it may live on another node: here the ranks' own activity is the progress
            self.last_alive_t = now
        since = max(self.last_progress_at or self.started_at, self.last_alive_t or self.started_at)
        stale = now - since
        limit, why = self.threshold(now)
        if self.slow_extension_until is not None:
            if now < self.slow_extension_until:
                return []
        if stale < limit:
            return []
        verdict = classify_ranks(ranks, gpus)
        if verdict.busy and self.slow_extension_until is None:
            self.slow_extension_until = now + limit
            return [
                self._event(
                    Event(
                        kind=EventKind.SLOW_PROGRESS,
                        severity=Severity.WARNING,
                        title=f"no progress for {stale:.0f} s, but every rank is busy",
                        detail=f"All ranks are using CPU{' and the GPUs draw power' if gpus else ''}: likely a very "
                        f"slow step, not a hang. Waiting another {limit:.0f} s.",
                        suggestion="If this repeats, raise monitor.hang_timeout_s or check for a data-loading stall.",
                        data=verdict.data(),
                    )
                )
            ]
        self.hang_reported = True
        return [self._event(self.hang_event(stale, limit, why, verdict))]

    def hang_event(self, stale: float, limit: float, why: str, verdict: RankVerdict) -> Event:
        hang = Hang(stale_s=stale, limit_s=limit, **verdict.data())
        detail = (
            f"No new step for {stale:.0f} s (limit {limit:.0f} s: {why}). Last step: "
            f"{self.progress.step if self.progress.step is not None else 'none yet'}. " + verdict.summary
        )
        return Event(
            kind=EventKind.HANG_SUSPECTED,
            severity=Severity.ERROR,
            title=f"hang suspected: no progress for {stale:.0f} s",
            detail=detail,
            suggestion=self.suggestion(verdict.differing_rank, verdict),
            rank=verdict.differing_rank,
            data=hang.data(),
        )

    def suggestion(self, differing: int | None, verdict: RankVerdict | None) -> str:
        e, steps = self.expect, []
        if differing is not None:
            steps.append(
                f"rank {differing} behaves unlike the others: look at code that runs on some ranks only (rank-0 saves "
                "or eval, uneven data shards)"
            )
        if self.progress.step is None and e.world_size > 1:
            steps.append(
                "it never reached the first step: rerun with NCCL_DEBUG=INFO; on a PCIe machine retry with "
                "NCCL_P2P_DISABLE=1"
            )
        elif verdict is not None and verdict.spinning:
            steps.append(
                "GPUs spin at full utilization on low power (NCCL waiting): retry with NCCL_P2P_DISABLE=1 to rule out "
                "broken peer-to-peer"
            )
        if e.multi_node:
            steps.append(
                "across nodes set NCCL_SOCKET_IFNAME to the right interface, and NCCL_IB_DISABLE=1 where there is no "
                "InfiniBand"
            )
        if not e.baseline_green:
            steps.append("this preset never finished green on one GPU: run the single-GPU baseline first (--gpus 1)")
        steps.append("reproduce fast with a smoke run (50 steps, batch 2), and take a stack dump of every rank")
        return "; ".join(steps) + "."

    def _event(self, event: Event) -> Event:
        if event.kind == EventKind.RANK_FAILED and self.failures.seen(EventKind.EXIT_ABORT) and self._reached_the_end():
            event = event.model_copy(update={"suggestion": EXIT_ABORT_ADVICE.format(step=self.progress.step)})
        self.events.append(event)
        return event

    def _reached_the_end(self) -> bool:
        p = self.progress
        return p.step is not None and p.total is not None and p.step >= p.total
