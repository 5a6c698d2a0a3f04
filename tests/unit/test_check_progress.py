"""`gpuwizard check` says on a terminal that it is asking the trainer's parser (issue 39 item 3: 20-27 s of silence),
and nothing where the answer is remembered or the output is not a terminal (logs, pipes, the golden outputs)."""

from __future__ import annotations

import io
import threading

from gpuwizard.cli.commands import ASKING, saying_asked
from support.cli import poll_until


class Terminal(io.StringIO):
    """A stderr that is a terminal, read from the test's thread while the ticker writes."""

    def __init__(self, tty: bool = True):
        super().__init__()
        self.tty = tty
        self.lock = threading.Lock()

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        with self.lock:
            return super().write(text)

    def text(self) -> str:
        with self.lock:
            return self.getvalue()


def test_a_real_ask_counts_its_seconds_then_says_how_long_it_took():
    stream = Terminal()
    with saying_asked(stream):
        poll_until(lambda: f"{ASKING} 1 s" in stream.text(), 30, stream.text)
    last = stream.text().split("\r\x1b[K")[-1]
    assert last.startswith("the installed trainer's own parser answered in ") and last.endswith(" s\n")


def test_a_remembered_answer_and_a_pipe_say_nothing():
    quick = Terminal()
    with saying_asked(quick):
        pass
    assert quick.text() == ""
    piped = Terminal(tty=False)
    with saying_asked(piped):  # its ticker ends at once, while the ask goes on
        poll_until(lambda: all(t.name != "check-ticker" for t in threading.enumerate()), 30, "the ticker ended")
    assert piped.text() == ""


def test_an_interrupted_ask_leaves_no_counting_line():
    stream = Terminal()
    try:
        with saying_asked(stream):
            poll_until(lambda: ASKING in stream.text(), 30, stream.text)
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert stream.text().endswith("\r\x1b[K")
