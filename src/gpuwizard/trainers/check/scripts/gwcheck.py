"""The trainer's side of `gpuwizard check`: run a trainer's parser on argv, print one marked JSON answer line.

The scripts in this folder run in a training interpreter, which has no gpuwizard: each (check_<trainer>.py)
imports only this module and its trainer, and is shipped as package data, never imported by gpuwizard. The
trainer's own output (warnings, banners) may surround the answer, the last line starting with MARK. This folder
is first on the script's sys.path, so no file here may share a name with a module a trainer imports.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

MARK = "GPUWIZARD-CHECK "


ANSWERING: dict[str, str] = {}


def answering(parser: str) -> None:
    """Name the parser (e.g. "lerobot-train 0.6.1") before running it, so that a refusal names it too."""
    ANSWERING["parser"] = parser


class Unavailable(Exception):
    """The command cannot be checked here (e.g. its policy is on a Hub this machine cannot reach)."""


class NoEnvironment(Unavailable):
    """The trainer is not installed in this interpreter: planning away from the training machine."""


def emit(answer: dict[str, Any]) -> None:
    sys.stdout.write("\n" + MARK + json.dumps(answer, default=str) + "\n")
    sys.stdout.flush()


def last_error_line(text: str) -> str:
    """The line that says what went wrong in a parser's output (argparse, tyro and draccus end with it)."""
    frame = set("─│╭╮╰╯ ")
    rows = [row.strip() for row in text.strip().splitlines()]
    tops = [i for i, row in enumerate(rows) if row.startswith("╭")]
    if tops:  # tyro's box: the message is its first section (wrapped over lines), under the box's title
        block = []
        for row in rows[tops[-1] + 1 :]:
            line = row.strip("│").strip()
            if row.startswith("╰") or (line and set(line) <= frame):
                break
            block.append(line)
        return " ".join(line for line in block if line)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip() and not set(line.strip()) <= frame]
    return lines[-1].strip("│ ").strip() if lines else ""


def main(parse: Callable[[list[str]], dict[str, Any]]) -> None:
    """Call parse(argv) -> {"parser": ..., "values": {...}, "notes": [...], "watch": [...]} and emit the answer.

    A parser that exits (argparse, tyro) or raises has refused the command: its own message is the error."""
    watch = [p for p in sys.path if p and os.path.isdir(p)]
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            found = parse(sys.argv[1:])
    except NoEnvironment as exc:
        emit({"status": "unavailable", "error": f"no training environment here ({exc})", "watch": watch})
        return
    except Unavailable as exc:
        emit({"status": "unavailable", "error": str(exc), "watch": watch})
        return
    except SystemExit as exc:
        text = captured.getvalue()
        emit(
            {
                "status": "refused",
                **ANSWERING,
                "error": last_error_line(text) or f"the parser exited with {exc.code}",
                "detail": text[-4000:],
                "watch": watch,
            }
        )
        return
    except Exception as exc:  # the trainer's own validation: its message is the answer
        root: BaseException = exc
        while root.__cause__ is not None:
            root = root.__cause__
        emit(
            {
                "status": "refused",
                **ANSWERING,
                "error": f"{type(root).__name__}: {root}",
                "detail": (captured.getvalue() + traceback.format_exc())[-4000:],
                "watch": watch,
            }
        )
        return
    sys.stderr.write(captured.getvalue())
    emit({"status": "parsed", **found, "watch": watch + [str(p) for p in found.get("watch", [])]})
