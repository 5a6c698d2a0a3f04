"""The monitor's telemetry rows: one per GPU (per node on SLURM), or one per rank on CPU runs."""

from __future__ import annotations

import time
from collections import deque

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, Sparkline

from gpuwizard.core.safetext import safe_line
from gpuwizard.runner.control.follow import RunUpdate
from gpuwizard.runs.records import Status

HISTORY = 60
ENDED = ("exited", "zombie", "dead")
"""psutil's states of a process that no longer runs (procs.py writes `exited` once it is gone)."""
NODE_TELEMETRY_GRACE_S = 30.0
"""How long a running SLURM job may go without GPU samples from its nodes before the monitor says why."""
LOCAL_ONLY_NOTE = (
    "No GPU samples from the nodes: the run folder is not on a filesystem they share, so telemetry is local only."
)


class TelemetryRow(Horizontal):
    """One GPU (or one rank on CPU runs): a sparkline and its latest figures."""

    def __init__(self, key: str, title: str):
        super().__init__(classes="telemetry-row")
        self.key = key
        self.history: deque[float] = deque(maxlen=HISTORY)
        self.title_label = Label(safe_line(title), classes="telemetry-title", markup=False)  # a node's name, as written
        self.spark = Sparkline([], summary_function=max, classes="telemetry-spark")
        self.value = Label("", classes="telemetry-value")
        self.value_text = ""
        self.pid: int | None = None
        """A rank's process, as last sampled."""

    def compose(self) -> ComposeResult:
        yield self.title_label
        yield self.spark
        yield self.value

    def push(self, value: float, text: str) -> None:
        self.history.append(value)
        self.spark.data = list(self.history)
        self.value_text = text
        self.value.update(text)


class Telemetry(Vertical):
    """The rows, created as devices and ranks first report."""

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self.node_samples_seen = False

    def apply(self, update: RunUpdate, status: Status | None) -> None:
        for sample in update.gpu:
            if sample.node:
                self.node_samples_seen = True
                row = self.row(f"gpu-{sample.node}-{sample.index}", f"{sample.node} GPU{sample.index}")
            else:
                row = self.row(f"gpu{sample.index}", f"GPU{sample.index}")
            if sample.lost:
                row.push(0, "LOST")
                continue
            util = sample.utilization or 0.0
            mem = f"{(sample.memory_used_mb or 0) / 1024:.1f}/{(sample.memory_total_mb or 0) / 1024:.0f}G"
            row.push(util, f"{util:3.0f}% {mem} {sample.temperature_c or 0:.0f}C {sample.power_w or 0:.0f}W")
        if status is not None and status.device == "cpu":
            for ranks_sample in update.ranks[-HISTORY:]:
                for rank in ranks_sample.ranks:
                    row = self.row(f"rank{rank.rank}", f"rank {rank.rank}")
                    row.pid = rank.pid
                    if not rank.alive or rank.status in ENDED:
                        row.push(0.0, f"ended    pid {rank.pid}")
                    else:
                        cpu = f"{rank.cpu:4.0f}%" if rank.cpu is not None else "    -"
                        row.push(rank.cpu or 0.0, f"CPU {cpu} pid {rank.pid}")
        if status is not None and status.final:  # no sample after the last may come: no process is left
            for row in self.query(TelemetryRow):
                if row.key.startswith("rank") and not row.value_text.startswith("ended"):
                    row.push(0.0, f"ended    pid {row.pid}")

    def local_only(self, status: Status | None) -> bool:
        """A SLURM job's GPUs are sampled on its nodes into the run folder; none arriving means the folder is not on
        a filesystem the nodes share, and then the monitor has only what this machine sees."""
        s = status
        return (
            s is not None
            and s.slurm_job_id is not None
            and s.device == "cuda"
            and s.started is not None
            and not self.node_samples_seen
            and time.time() - s.started > NODE_TELEMETRY_GRACE_S
        )

    def row(self, key: str, title: str) -> TelemetryRow:
        for row in self.query(TelemetryRow):
            if row.key == key:
                return row
        row = TelemetryRow(key, title)
        self.mount(row)
        return row
