"""Overfitting, from the trainer's own held-out loss: risen for a sustained stretch while the training loss fell."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuwizard.core.kinds import EventKind, Severity
from gpuwizard.runs.records import Event

WINDOW = 5
"""Held-out losses in each mean compared: one noisy point moves a mean of five by a fifth of its noise."""
MARGIN = 0.10
"""The least rise of the held-out mean over its best (and fall of the training loss since), as a fraction."""
NOISE_SIGMAS = 5.0
"""The rise must also pass this many standard errors of a difference of two means of WINDOW points, the points'
noise measured from successive differences (a slow trend barely moves them): the best mean is the lowest of many,
so it sits below the level by chance (about 2.5 standard errors over a hundred windows)."""


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def noise(values: list[float]) -> float:
    """The standard deviation of one point about its curve, from the median difference of successive points (a
    difference of two points of deviation s has median size 0.954 s): the first steep fall is a few outliers."""
    steps = sorted(abs(b - a) for a, b in zip(values, values[1:], strict=False))
    return steps[len(steps) // 2] / 0.954 if steps else 0.0


def lowest(held: list[tuple[int, float]]) -> tuple[int, float] | None:
    """The step and value of the lowest finite held-out loss."""
    finite = [(step, loss) for step, loss in held if math.isfinite(loss)]
    return min(finite, key=lambda point: point[1]) if finite else None


def nearest(saved: list[int], step: int) -> int | None:
    """The saved checkpoint's step nearest `step` (the earlier of two as near)."""
    return min(sorted(saved), key=lambda s: abs(s - step)) if saved else None


@dataclass
class HeldOutWatch:
    """Fed each held-out and training loss with its step; keeps the best held-out loss and raises OVERFITTING once,
    when the means of the last WINDOW held-out losses and of the WINDOW before them are both above the lowest mean of
    WINDOW by MARGIN and by NOISE_SIGMAS standard errors (the rise is sustained: one high point lifts one of the two),
    and the mean training loss fell by MARGIN since."""

    held: list[tuple[int, float]] = field(default_factory=list)
    train: list[float | None] = field(default_factory=list)
    """Beside each held-out loss, the mean training loss logged since the one before (None where none was)."""
    pending: list[float] = field(default_factory=list)
    saved: list[int] = field(default_factory=list)
    """Steps of the checkpoints saved so far."""
    fired: bool = False

    def best(self) -> tuple[int, float] | None:
        return lowest(self.held)

    def add_train(self, loss: float) -> None:
        self.pending.append(loss)

    def add_checkpoint(self, step: int) -> None:
        self.saved.append(step)

    def add_held_out(self, step: int, loss: float) -> list[Event]:
        self.held.append((step, loss))
        self.train.append(mean(self.pending) if self.pending else None)
        self.pending = []
        if self.fired or len(self.held) < 3 * WINDOW:
            return []
        means = [mean([loss for _, loss in self.held[i - WINDOW : i]]) for i in range(WINDOW, len(self.held) + 1)]
        lowest = min(range(len(means)), key=means.__getitem__)
        now, best = means[-1], means[lowest]
        margin = max(best * MARGIN, NOISE_SIGMAS * noise([loss for _, loss in self.held]) * math.sqrt(2 / WINDOW))
        if not best > 0 or min(now, means[-1 - WINDOW]) - best < margin:
            return []
        since = self.held[lowest + WINDOW - 1][0]  # the last step of the best window
        train_then = [loss for loss in self.train[lowest : lowest + WINDOW] if loss is not None]
        train_now = [loss for loss in self.train[-WINDOW:] if loss is not None]
        if not train_then or not train_now or mean(train_now) > mean(train_then) * (1 - MARGIN):
            return []
        self.fired = True
        return [self.event(since, now / best - 1, 1 - mean(train_now) / mean(train_then))]

    def event(self, since: int, rose: float, fell: float) -> Event:
        best = self.best()
        assert best is not None, "a rise is measured from a held-out loss"
        saved = nearest(self.saved, best[0])
        kept = (
            f"the best checkpoint is step {saved:,} (checkpoints/{saved:06d})"
            if saved is not None
            else "no checkpoint is saved yet"
        )
        return Event(
            kind=EventKind.OVERFITTING,
            severity=Severity.WARNING,
            title=f"held-out loss has risen {rose:.0%} since step {since:,} while training loss fell {fell:.0%}: "
            f"the policy is memorising; {kept}",
            detail=f"The rule: the mean of the last {WINDOW} held-out losses and that of the {WINDOW} before are both "
            f"above the lowest mean of {WINDOW} by more than {MARGIN:.0%} and more than {NOISE_SIGMAS:g} standard "
            f"errors of their noise, and the training loss fell by more than {MARGIN:.0%} since. The lowest held-out "
            f"loss was {best[1]:.4g} at step {best[0]:,}.",
            suggestion="Keep the best checkpoint (gpuwizard runs --best RUN prints its path); stop the run, or train "
            "the next one for fewer steps, on more episodes, or with a smaller batch.",
            data={"since": since, "best_step": best[0], "best_loss": best[1], "checkpoint_step": saved},
        )
