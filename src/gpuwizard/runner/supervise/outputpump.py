"""The job's log into the monitor in bounded time slices, so that a job which prints faster than it can be parsed
never starves the supervisor's loop (progress writes, rank samples, hang detection, stop, the end of the job).

The job writes log.txt itself, so every line is kept there whatever happens here. When the unread part of it would
take more than MAX_LAG_S to parse, the oldest part is skipped and only the newest lines are parsed; the lines skipped
are estimated from the mean line length and said in an `output_sampled` event (once when it starts, once with the
total at the end), and counted in progress.lines.
"""

from __future__ import annotations

import time
from os import PathLike

from gpuwizard.core.kinds import EventKind, Severity
from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runner.supervise.jobhost import JobHost
from gpuwizard.runs.records import Event
from gpuwizard.runs.tail import LogTail

SLICE_S = 0.25
"""Reading and parsing per pass of the supervisor's loop, at most (plus one chunk)."""
MAX_LAG_S = 2.0
"""Parse work the unread log may hold before its oldest part is skipped: the most progress.json lags the job by."""
KEEP_S = 0.5
"""Parse work left after a skip: the newest lines, read whole."""
FINAL_S = 3.0
"""Once the job has ended, the end of its log (twice KEEP_S of it, where tracebacks are) is parsed for at most this
long."""
LEARN_BYTES = 1 << 20
"""Only reads at least this large measure the parse cost per byte (a small read is mostly fixed overhead)."""
SMOOTHING = 0.3


class OutputPump:
    """Feeds the run's log to the monitor; `pump` once per loop pass, `drain` once the job has ended."""

    def __init__(self, log: PathLike[str], max_lag_s: float = MAX_LAG_S, keep_s: float = KEEP_S):
        self.tail = LogTail(log, redrawn_bars=True)
        self.max_lag_s, self.keep_s = max_lag_s, keep_s
        self.cost_per_byte: float | None = None
        self.read_bytes = self.read_lines = 0
        self.skipped_bytes = self.skipped_lines = 0
        self.first_skip_said = False

    def pump(self, host: JobHost, monitor: JobMonitor) -> bool:
        """Read and parse for about SLICE_S; True when it has caught up with the job."""
        deadline = time.monotonic() + SLICE_S
        while True:
            self.skip_if_behind(host, monitor, self.max_lag_s, self.keep_s)
            if not self.step(host, monitor):
                return True
            if time.monotonic() >= deadline:
                return False

    def drain(self, host: JobHost, monitor: JobMonitor) -> None:
        """What the ended job left unread, within FINAL_S (a daemon of it may print on); then the sampling summary."""
        deadline = time.monotonic() + FINAL_S
        self.skip_if_behind(host, monitor, 2 * self.keep_s, 2 * self.keep_s)  # the end, where tracebacks are
        while self.step(host, monitor):
            if time.monotonic() >= deadline:
                self.skip(host, monitor, self.tail.offset + self.tail.backlog())
                break
        self.summarize(host)

    def close(self) -> None:
        self.tail.close()

    def step(self, host: JobHost, monitor: JobMonitor) -> bool:
        """One chunk read and parsed; False when there was nothing to read."""
        before, start = self.tail.offset, time.monotonic()
        chunk = self.tail.read()
        if not chunk:
            return False
        host.ingest(monitor, chunk)
        size = self.tail.offset - before
        self.read_bytes += size
        self.read_lines += chunk.line_count
        if size >= LEARN_BYTES and not chunk.skipped:  # a cut line's rest is dropped unread: no measure of parsing
            cost = (time.monotonic() - start) / size
            previous = self.cost_per_byte
            self.cost_per_byte = cost if previous is None else previous + SMOOTHING * (cost - previous)
        return True

    def skip_if_behind(self, host: JobHost, monitor: JobMonitor, limit_s: float, keep_s: float) -> None:
        """Skip the oldest unread part when the rest would take more than `limit_s` to parse, keeping `keep_s`."""
        if self.cost_per_byte is None:
            return  # not measured yet: the first big read measures it
        backlog = self.tail.backlog()
        if backlog * self.cost_per_byte > limit_s:
            keep = int(keep_s / self.cost_per_byte)
            self.skip(host, monitor, self.tail.offset + backlog - keep)

    def skip(self, host: JobHost, monitor: JobMonitor, offset: int) -> None:
        skipped = self.tail.skip_to(offset)
        if not skipped:
            return
        lines = max(1, round(skipped * self.read_lines / self.read_bytes)) if self.read_bytes else 1
        self.skipped_bytes += skipped
        self.skipped_lines += lines
        monitor.progress.lines += lines
        if not self.first_skip_said:
            self.first_skip_said = True
            host.record([self.event(lines, skipped, "so far")])

    def summarize(self, host: JobHost) -> None:
        """The total not parsed, once the job has ended (nothing when every line was)."""
        if self.skipped_bytes:
            host.record([self.event(self.skipped_lines, self.skipped_bytes, "in all")])

    def event(self, lines: int, skipped: int, when: str) -> Event:
        rate = f" (it parses about {1 / self.cost_per_byte / 1e6:.0f} MB/s here)" if self.cost_per_byte else ""
        return Event(
            kind=EventKind.OUTPUT_SAMPLED,
            severity=Severity.WARNING,
            title=f"about {lines:,} lines not parsed {when}: the job printed faster than gpuwizard can read",
            detail=f"Every line is in log.txt; gpuwizard skipped {skipped / 1e6:.0f} MB of it{rate} and parsed only "
            "the newest lines, so progress stays current. Losses, steps and errors printed in the skipped part are "
            "missing from the curves, metrics and events.",
            suggestion="Print less: raise the trainer's logging interval, lower its log level, or drop per-batch "
            "debug prints.",
            data={"lines": lines, "bytes": skipped, "estimated": True},
        )
