"""What a failing job's log says: known error signatures, the exception chain and torchrun's failure table (no I/O)."""

from __future__ import annotations

import re
from typing import Any

from gpuwizard.core.kinds import EventKind, Severity
from gpuwizard.runs.records import Event
from gpuwizard.trainers.logparse import RANK_PREFIX, clean

MAX_PARSED_CHARS = 4096
"""Progress lines, error lines and banners are short; only this much of a longer line is parsed, which bounds the
cost of every regex on binary output or a runaway print."""


SIGNATURES: list[tuple[EventKind, re.Pattern[str], str, str]] = [
    (
        EventKind.COLLECTIVE_TIMEOUT,
        re.compile(
            r"(?:\[(?:PG [^\]]*? )?Rank (?P<rank>\d+)\] )?Watchdog caught collective operation timeout: "
            r"WorkNCCL\((?:SeqNum=(?P<seq>\d+), )?OpType=(?P<op>\w+).*?Timeout\(ms\)=(?P<tmo>\d+)\)"
        ),
        "NCCL collective timed out",
        "A rank stopped entering collectives or the interconnect is stuck. Compare ranks' SeqNum; try NCCL_DEBUG=INFO "
        "and, on PCIe machines, NCCL_P2P_DISABLE=1.",
    ),
    (
        EventKind.COLLECTIVE_TIMEOUT,
        re.compile(
            r"Timed out waiting (?P<tmo>\d+)ms for (?P<op>recv|send) operation|failed to pass monitoredBarrier"
            r"|Rank (?P<rank>\d+) failed to pass monitoredBarrier"
        ),
        "gloo collective timed out",
        "A rank stopped entering collectives. Look for work done on one rank only (save, eval, uneven data).",
    ),
    (
        EventKind.COLLECTIVE_TIMEOUT,
        re.compile(r"ProcessGroupNCCL's watchdog got stuck|Heartbeat monitor timed out"),
        "NCCL watchdog stuck",
        "A CUDA or NCCL call blocked the watchdog; check the GPU with nvidia-smi and dmesg for Xid errors.",
    ),
    (
        EventKind.NCCL_ERROR,
        re.compile(
            r"\bNCCL WARN\b|NCCL error|ncclUnhandledCudaError|ncclSystemError|ncclInternalError"
            r"|ncclInvalidUsage|ncclRemoteError|DistBackendError"
        ),
        "NCCL error",
        "Rerun with NCCL_DEBUG=INFO; on PCIe-only machines try NCCL_P2P_DISABLE=1; "
        "across nodes set NCCL_SOCKET_IFNAME.",
    ),
    (
        EventKind.GLOO_ERROR,
        re.compile(r"gloo::IoException|\[gloo/transport/tcp/[^\]]*\] Connection closed by peer"),
        "gloo connection lost",
        "A peer process died or the network dropped; the rank that failed first is in the failure table.",
    ),
    (
        EventKind.EXIT_ABORT,
        re.compile(r"terminate called without an active exception"),
        "a process aborted in C++ with no exception (std::terminate)",
        "Mid-run, a thread was ended while still running: read the log above it and reproduce with a smoke run. "
        "After the last step it is a crash in the interpreter's exit, not in training (see the failed rank).",
    ),
    (
        EventKind.OUT_OF_MEMORY,
        re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|CUDA error: out of memory"),
        "GPU out of memory",
        "Lower batch.size and raise batch.grad_accum to keep the effective batch, or shard with FSDP.",
    ),
    (
        EventKind.OUT_OF_MEMORY,
        re.compile(r"DefaultCPUAllocator: can't allocate memory"),
        "out of memory (CPU allocator)",
        "Lower batch.size and raise batch.grad_accum to keep the effective batch, or run fewer processes.",
    ),
    (
        EventKind.RENDEZVOUS_FAILED,
        re.compile(r"gpuwizard-loopback: (?:no port on \S+ is free|torchrun's rendezvous store cannot listen)"),
        "torchrun's rendezvous store could not start on this machine",
        "The line quoted says why (loopback/gwloopback.py): every local port taken, or the loopback interface down. "
        "Free ports (`ss -tanp` lists who holds them) or bring lo up, then run again.",
    ),
    (
        EventKind.DISK_FULL,
        re.compile(r"No space left on device|\[Errno 28\]|Disk quota exceeded|\[Errno 122\]"),
        "disk full",
        "Free space on the output folder's disk (df -h), or point output_dir at a larger one; a checkpoint cut short "
        "by the full disk is not resumed from.",
    ),
]


OWN_LINE = re.compile(
    r"(?:[A-Za-z_][\w.]*(?:Error|Exception)\b"  # an exception the job raised: a traceback's last line
    r"|what\(\):|terminate called (?:after throwing|without an active exception)"  # C++ ended a process
    r"|\[[EF][\d :.]*(?:\S+/)?\w+\.(?:cpp|hpp|cc|h):\d+\]"  # c10d's error log: [E1218 ... ProcessGroupNCCL.cpp:629]
    r"|\S+:\d+:\d+ \[\d+\] NCCL WARN"  # NCCL's own warning: host:pid:tid [device] NCCL WARN
    r"|[\w.-]+: .*: (?:No space left on device|Disk quota exceeded)$)"  # a tool the job ran, in perror's form
)
"""Where an error signature counts: as torch, NCCL, Python or a failing tool prints it, at the start of the line
(after the rank prefix). The same words inside a message the job logs (a retry notice, a dataset's text, a
library's progress note) are no error of this run."""


SIGNAL_WORDS = (
    "rror",
    "xception",
    "Traceback",
    "NCCL",
    "atchdog",
    "imed out",
    "monitoredBarrier",
    "Heartbeat",
    "gloo",
    "ut of memory",
    "Interrupt",
    "space left",
    "quota",
)
"""Every failure signature and exception line holds one of these fragments (a few scans per chunk)."""


def lines_containing(text: str, words: tuple[str, ...]) -> list[str]:
    """The lines of `text` holding any of `words`, in order, found with C-level str.find."""
    starts: set[int] = set()
    for word in words:
        pos = text.find(word)
        while pos >= 0:
            start = text.rfind("\n", 0, pos) + 1
            starts.add(start)
            end = text.find("\n", pos)
            if end < 0:
                break
            pos = text.find(word, end)
    found = []
    for start in sorted(starts):
        end = text.find("\n", start)
        found.append(text[start:] if end < 0 else text[start:end])
    return found


EXCEPTION_LINE = re.compile(r"^[A-Za-z_.]*(Error|Exception|Interrupt)\b.*")


class ExceptionChain:
    """The exceptions of the newest traceback chain (`raise ... from`), so a wrapper's failure names its cause:
    lerobot-train main fails with draccus' ParsingError while the ValueError that says why sits above it. A rank's
    own traceback, which torch prefixes with `[rankN]:` once its process group is up
    (distributed_c10d._distributed_excepthook), is kept apart, so the exception that ended it is not confused with a
    warning printed before (LeRobot's torchcodec fallback prints `OSError: libavutil.so.56...` chains at import)."""

    CAUSE = "The above exception was the direct cause of the following exception"

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.linked = False
        self.fresh = False
        self.ranks: dict[int, ExceptionChain] = {}

    def of_rank(self, rank: int | None) -> ExceptionChain:
        """The chain the rank printed as its own, else the unprefixed one."""
        own = self.ranks.get(rank) if rank is not None else None
        return own if own is not None and own.lines else self

    def feed(self, raw: str) -> None:
        """One log line as printed: its rank prefix says whose traceback it belongs to."""
        if match := RANK_PREFIX.match(raw):
            rank = int(re.sub(r"\D", "", match[0]))
            self.ranks.setdefault(rank, ExceptionChain()).feed(clean(raw).removeprefix(" "))
            return
        line = clean(raw)
        if line.startswith("Traceback (most recent call last)"):
            self.fresh, self.linked = not self.linked, False
        elif line.startswith(self.CAUSE):
            self.linked = True
        elif EXCEPTION_LINE.match(line) and not line.startswith("torch.distributed.elastic"):
            self.lines = [line] if self.fresh or not self.lines else [*self.lines, line]
            self.fresh = False

    @property
    def cause(self) -> str | None:
        """The first exception of the chain: the one that says what went wrong."""
        return self.lines[0] if self.lines else None

    @property
    def raised_as(self) -> str | None:
        """The exception the chain surfaced as, when it differs from its cause."""
        return self.lines[-1] if len(self.lines) > 1 else None


class FailureTable:
    """Reads torchrun's ChildFailedError table: which rank failed first, its exit code and error."""

    ROOT = "Root Cause (first observed failure):"

    def __init__(self) -> None:
        self.active = False
        self.fields: dict[str, str] = {}
        self.traceback: list[str] = []

    def feed(self, line: str) -> dict[str, Any] | None:
        if self.ROOT in line:
            self.active, self.fields, self.traceback = True, {}, []
            return None
        if not self.active:
            return None
        if line.startswith("====="):
            self.active = False
            return self.result()
        match = re.match(r"\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*)", line)
        if match:
            self.fields[match[1]] = match[2]
            if match[1] == "traceback":
                self.traceback.append(match[2])
        elif "traceback" in self.fields:
            self.traceback.append(line.strip())
        return None

    def result(self) -> dict[str, Any]:
        rank = re.match(r"(\d+)", self.fields.get("rank", ""))
        code = re.match(r"(-?\d+)", self.fields.get("exitcode", ""))
        lines = [t for t in self.traceback if t and not t.startswith("To enable traceback")]
        error = lines[-1] if lines else None
        return {"rank": int(rank[1]) if rank else None, "exitcode": int(code[1]) if code else None, "error": error}


ADVICE: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"rendezvous backend 'gpuwizard-loopback' is not registered"),
        "torchrun did not find gpuwizard's loopback rendezvous: it needs torch 2.5 or later in launch.python's "
        "environment (gpuwizard envs shows its torch), and the PYTHONPATH the command sets must reach torchrun "
        "(a wrapper or `uv run` that clears the environment drops it).",
    ),
    (
        re.compile(r"^(?:\w+\.)*(?:FileNotFoundError|NotADirectoryError)\b|No such file or directory"),
        "A file or folder the job needs is not there: check the path the error names (the dataset root, a "
        "checkpoint to resume, the script, a config) and that it exists on every node; rerunning cannot help.",
    ),
    (
        re.compile(r"^(?:\w+\.)*PermissionError\b|Permission denied"),
        "The job may not read or write the path the error names: fix its permissions, or point the preset at a "
        "folder this user owns.",
    ),
    (
        re.compile(r"^(?:\w+\.)*(?:ModuleNotFoundError|ImportError)\b"),
        "The training environment lacks a package the job imports: install it into launch.python's environment "
        "(gpuwizard envs shows which one runs).",
    ),
]
"""Advice by what the failing rank's error says; anything else is a case for a quick reproduction."""


def failure_advice(error: str) -> str:
    """What to do about a rank's error, by its kind: a missing file needs its path fixed, not a smoke run."""
    for pattern, advice in ADVICE:
        if pattern.search(error.strip()):
            return advice
    return "Read the rank's traceback in the log; reproduce quickly with a smoke run (50 steps, batch 2)."


DOWNLOADING = re.compile(r'^Downloading: "(?P<url>[a-z]+://[^"]+)" to (?P<path>\S+)')
"""torch.hub's line before it fetches a file (torch 2.11 hub.py:889 load_state_dict_from_url, which torchvision's
pretrained weights go through): the URL a failed download names nowhere else."""
TORCHVISION_WEIGHTS = "download.pytorch.org/models/"


NO_NETWORK = re.compile(
    r"Name or service not known|Temporary failure in name resolution|Network is unreachable"
    r"|No address associated with hostname|nodename nor servname provided, or not known"
)
"""What a connection says where this machine reaches no network: the resolver's and the kernel's own words (glibc's
and macOS's gai_strerror, ENETUNREACH), inside urllib's URLError, socket.gaierror or urllib3's NameResolutionError."""


def offline_advice(error: str, download: re.Match[str] | None) -> tuple[str, str, str]:
    """What a download that failed for want of a network is called, why it failed and what to do: short enough that
    the monitor's banner at 80x24 shows the start of each (the URL whole in the fix)."""
    words = NO_NETWORK.search(error)
    cause = f"This machine reaches no network ({words[0] if words else error})."
    if download is None:
        fix = (
            "Give the job network access, or have what it downloads in place first (for the Hugging Face Hub: "
            "launch.env HF_HUB_OFFLINE: 1 with the files already in its cache); rerunning cannot help."
        )
        return "no network", cause, fix
    url, path = download["url"], download["path"]
    put = f"put the file at {path} (download {url} where there is network)"
    fix = f"Give the job network access, or {put}; rerunning cannot help."
    if TORCHVISION_WEIGHTS in url:  # LeRobot's ACT, Diffusion and VQ-BeT start their ResNet from these weights
        fix = (
            'Set launch.extra_args: ["--policy.pretrained_backbone_weights=null"] (the ResNet starts untrained). '
            f"Or {put}; rerunning cannot help."
        )
    return f"no network to download {url.rsplit('/', 1)[-1]}", cause, fix


class FailureReader:
    """Reads log text for what failed: each known error signature once, and torchrun's failure table."""

    def __init__(self) -> None:
        self.failure_table = FailureTable()
        self.exceptions = ExceptionChain()
        self._seen_signatures: set[str] = set()
        self.download: re.Match[str] | None = None

    def seen(self, kind: EventKind) -> bool:
        """A signature of this kind was in the log."""
        return any(key.startswith(f"{kind}:") for key in self._seen_signatures)

    def feed_text(self, text: str) -> list[Event]:
        """Complete lines joined by newlines; only lines holding a signal word, or in the failure table, are parsed."""
        new: list[Event] = []
        for line in lines_containing(text, ("Downloading: ",)):
            self.download = DOWNLOADING.match(clean(line[:MAX_PARSED_CHARS]).lstrip()) or self.download
        for line in lines_containing(text, SIGNAL_WORDS):
            self.exceptions.feed(line[:MAX_PARSED_CHARS])
            new += self._signatures(clean(line[:MAX_PARSED_CHARS]))
        if self.failure_table.active or FailureTable.ROOT in text:
            new += self._failure(text)
        return new

    def _failure(self, text: str) -> list[Event]:
        """torchrun's failure table, read line by line from its "Root Cause" header."""
        start = 0 if self.failure_table.active else text.rfind("\n", 0, text.find(FailureTable.ROOT)) + 1
        for line in text[start:].split("\n"):
            failure = self.failure_table.feed(clean(line[:MAX_PARSED_CHARS]))
            if failure is not None:
                return [self._rank_failed(failure)]
        return []

    def _rank_failed(self, failure: dict[str, Any]) -> Event:
        """The rank torchrun names first, its error (the cause of a wrapped one) and what to do about it."""
        rank = failure["rank"]
        chain = self.exceptions.of_rank(rank)
        error = failure["error"] or chain.cause or "no error message (see the log)"
        said, suggestion = error, failure_advice(error)
        detail = "torchrun's failure table names this rank as the first to fail; the others were stopped after it."
        if chain.raised_as:
            detail += f" It surfaced as {chain.raised_as}."
        if NO_NETWORK.search(error):
            said, cause, suggestion = offline_advice(error, self.download)
            detail = f"{cause} {detail} Its error: {error}"
        return Event(
            kind=EventKind.RANK_FAILED,
            severity=Severity.ERROR,
            title=f"rank {rank} failed (exit code {failure['exitcode']}): {said}",
            detail=detail,
            suggestion=suggestion,
            rank=rank,
            data=failure,
        )

    def _signatures(self, line: str) -> list[Event]:
        if not OWN_LINE.match(line.lstrip()):
            return []
        for kind, pattern, title, suggestion in SIGNATURES:
            match = pattern.search(line)
            if not match:
                continue
            key = f"{kind}:{title}"
            if key in self._seen_signatures:
                return []
            self._seen_signatures.add(key)
            groups = {k: v for k, v in match.groupdict().items() if v is not None}
            rank = int(groups["rank"]) if "rank" in groups else None
            return [
                Event(
                    kind=kind,
                    severity=Severity.ERROR,
                    title=title,
                    detail=line[:300],
                    suggestion=suggestion,
                    rank=rank,
                    data=groups,
                )
            ]
        return []
