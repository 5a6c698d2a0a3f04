"""The probe screen: `gpuwizard probe` from the wizard's Scaling step, a live table and progress, cancellable."""

from __future__ import annotations

import signal
import threading
import time
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, ProgressBar, Static

from gpuwizard.core.kinds import ProbeState
from gpuwizard.core.safetext import safe_text
from gpuwizard.tui.widgets.fields import KeyBar

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from gpuwizard.analysis.probe.results import ProbeResult, ProbeRow
    from gpuwizard.model.preset import Preset
    from gpuwizard.runner.probe.grid import Probe

    SignalHandler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None

COLUMNS = ("GPUs", "batch", "smp/s", "spread", "speed", "eff", "mem/dev", "t-loss", "fits")
"""spread: the slowest-fastest of the sub-windows the samples/s (their median) comes from (a predicted row's: the
throughput model's range); t-loss: time to the same loss against the fastest one-GPU configuration."""
STOP_WAIT_S = 120.0
"""How long a hang-up or kill waits for the probe to stop its running configuration (each stop waits at most 60 s)."""
ENDING_SIGNALS = (signal.SIGHUP, signal.SIGTERM)


class ProbeProgress(Message):
    """The probe's result so far (a copy) and what it is doing now."""

    def __init__(self, result: ProbeResult, text: str):
        super().__init__()
        self.result, self.text = result, text


class ProbeDone(Message):
    """The probe ended: its result, or the paragraph saying why it could not start."""

    def __init__(self, result: ProbeResult | None, error: str | None):
        super().__init__()
        self.result, self.error = result, error


class ProbeScreen(Screen[bool]):
    """Runs the default probe of a preset in a worker; dismisses with True when a result was kept."""

    HELP = (
        "Each row is a short real run of the preset's own command at one GPU count and per-device batch, output in "
        "the probe's scratch folder. c cancels (the running configuration is stopped, nothing is left running); "
        "escape goes back once the probe has ended, and a finished probe feeds the Scaling step's estimates. Rows "
        "marked predicted are the throughput model's, not runs; t-loss is the time to the same loss. tab moves to "
        "the verdict below the table, which scrolls."
    )
    DEFAULT_CSS = """
    #probe-table { height: auto; max-height: 12; }
    #probe-verdict-box { height: 1fr; }
    """

    BINDINGS = [
        Binding("c", "cancel", "Cancel probe"),
        Binding("escape", "close", "Back"),
    ]

    def __init__(self, preset: Preset):
        super().__init__()
        self.preset = preset
        self.probe: Probe | None = None
        self.done = False
        self.kept = False
        self.doing = "starting..."
        self.started = 0.0
        self.ended = threading.Event()
        """Set by the worker once the probe has stopped what it ran and kept its result."""
        self.ending = False
        self.previous: dict[int, SignalHandler] = {}

    def compose(self) -> ComposeResult:
        yield Static(f"Probe · {self.preset.name} · short real runs per GPU count and batch", id="probe-title")
        yield ProgressBar(id="probe-progress", show_eta=False)
        yield Static("starting...", id="probe-status", markup=False)
        yield DataTable(id="probe-table", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="probe-verdict-box"):  # focusable: a verdict longer than the screen scrolls
            yield Static("", id="probe-verdict", markup=False)
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#probe-table", DataTable).add_columns(*COLUMNS)
        self.started = time.monotonic()
        self.set_interval(1.0, self.tick)
        if threading.current_thread() is threading.main_thread():
            for signum in ENDING_SIGNALS:
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self.previous[signum] = signal.signal(signum, self.stop_then_end)
        self.start()

    def stop_then_end(self, signum: int, frame: FrameType | None) -> None:
        """A hang-up (the SSH session dropped) or a kill mid-probe: the running configuration is stopped and the
        result kept first, then the signal ends the app as it would have (a probe's job never outlives it)."""
        self.ending = True
        if self.probe is not None:
            self.probe.cancel()
        self.ended.wait(STOP_WAIT_S)
        self.restore_signals()
        signal.raise_signal(signum)

    def restore_signals(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    def tick(self) -> None:
        """What the probe is doing and for how long, while it runs."""
        if self.done:
            return
        seconds = int(time.monotonic() - self.started)
        budget = self.probe.request.budget_s if self.probe else None
        expected = self.probe.result.expected_s if self.probe else None
        limit = (
            f" of a {int(budget) // 60}:{int(budget) % 60:02d} budget"
            if budget
            else f" of about {int(expected) // 60}:{int(expected) % 60:02d}"
            if expected and expected > seconds
            else " elapsed"
        )
        clock = f"{seconds // 60}:{seconds % 60:02d}{limit}"
        if self.cancelling:
            said = f"cancelling: stopping the running configuration · {clock}"
        else:
            said = f"{self.doing} · {clock} · c cancels"
        self.query_one("#probe-status", Static).update(safe_text(said))

    @work(thread=True, exclusive=True, group="probe", exit_on_error=False)
    def start(self) -> None:
        from gpuwizard.core.errors import UserError
        from gpuwizard.runner.probe.grid import Probe
        from gpuwizard.runner.probe.request import default_request

        try:
            self.probe = Probe(
                default_request(self.preset),
                on_update=lambda result, text: self.post_message(ProbeProgress(result.model_copy(deep=True), text)),
            )
            if self.ending:
                self.probe.cancel()  # a hang-up came while it was being set up
            result = self.probe.run()
        except UserError as exc:
            self.post_message(ProbeDone(None, exc.paragraph()))
            return
        except Exception as exc:  # kept in probe.json by Probe.run; the screen must still end
            self.post_message(ProbeDone(self.probe.result if self.probe else None, f"the probe failed: {exc}"))
            return
        finally:
            self.ended.set()
        self.post_message(ProbeDone(result, None))

    def on_unmount(self) -> None:
        """Quitting mid-probe stops it: the worker stops its running configuration before the app can exit."""
        self.restore_signals()
        if self.probe is not None and not self.done:
            self.probe.cancel()

    @property
    def cancelling(self) -> bool:
        return self.probe is not None and self.probe.cancelled.is_set() and not self.done

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Cancel is offered only while there is something to cancel: hidden once asked for and once ended."""
        if action == "cancel":
            return not self.done and not self.cancelling
        return True

    def action_cancel(self) -> None:
        if self.probe is not None and not self.done:
            self.probe.cancel()
            self.refresh_bindings()
            self.tick()

    def action_close(self) -> None:
        if not self.done:
            self.action_cancel()
            self.notify("Cancelling the probe first; nothing is left running once it says so.")
            return
        self.dismiss(self.kept)

    @on(ProbeProgress)
    def _progress(self, message: ProbeProgress) -> None:
        self.doing = message.text
        self.tick()
        self.fill(message.result)

    @on(ProbeDone)
    def _done(self, message: ProbeDone) -> None:
        self.done = True
        self.refresh_bindings()
        status = self.query_one("#probe-status", Static)
        if message.result is None:
            status.update(safe_text(message.error or "the probe could not start"))
            return
        result = message.result
        self.kept = result.state == ProbeState.FINISHED and any(r.fits for r in result.rows)
        self.fill(result)
        where = f"kept in {self.probe.path}" if self.probe else ""
        if message.error:
            said = f"{message.error}; {where}"
        elif result.state == ProbeState.STOPPED:
            said = f"stopped; nothing of it is left running; the partial result is {where}"
        elif not self.kept:
            said = f"{result.state}; nothing was measured, so the estimates do not use it; {where}"
        else:
            said = f"{result.state}; {where}; the estimates now use it"
        status.update(safe_text(said))
        self.query_one("#probe-verdict", Static).update(safe_text(verdict_text(result)))
        self.query_one("#probe-verdict-box", VerticalScroll).focus()  # its scrollbar shows, keys scroll it

    def fill(self, result: ProbeResult) -> None:
        table = self.query_one("#probe-table", DataTable)
        table.clear()
        to_loss = {(t.gpus, t.per_device_batch, t.predicted): t.time_ratio for t in result.time_to_loss}
        for row in [*result.rows, *result.predicted]:
            table.add_row(*cells(row, to_loss.get((row.gpus, row.per_device_batch, row.outcome == "predicted"))))
        bar = self.query_one("#probe-progress", ProgressBar)
        total = self.probe.planned_runs() if self.probe and result.batches else None
        ran = [*result.rows, *result.repeats]
        bar.update(total=total, progress=sum(r.outcome != "stopped" for r in ran))  # a stop is no progress


def verdict_text(result: ProbeResult) -> str:
    """Under the table: the decision's one paragraph first (what to use, how sure, why: at 80x24 it is above the
    fold), then the evidence and the notes `gpuwizard probe` prints (B_noise, the memory line, the models)."""
    from gpuwizard.analysis.probe.verdict import models_text

    head, *evidence = result.verdict or [""]
    return "\n\n".join(part for part in (head, "\n".join([*evidence, *models_text(result)])) if part).strip()


def cells(row: ProbeRow, time_ratio: float | None = None) -> tuple[str, ...]:
    from gpuwizard.analysis.probe.verdict import predicted_range, rate_range

    def f(value: float | None, spec: str, unit: str = "") -> str:
        return "-" if value is None else f"{value:{spec}}{unit}"

    fits = {"measured": "yes", "does not fit": "no"}.get(row.outcome, row.outcome)
    return (
        str(row.gpus),
        str(row.per_device_batch),
        f(row.samples_per_s, ".1f"),
        predicted_range(row) if row.outcome == "predicted" else rate_range(row),
        f(row.speedup, ".2f", "x"),
        f(row.efficiency and 100 * row.efficiency, ".0f", "%"),
        f(row.memory_mb and row.memory_mb / 1024, ".2f", " GB"),
        f(time_ratio, ".2f", "x"),
        fits,
    )
