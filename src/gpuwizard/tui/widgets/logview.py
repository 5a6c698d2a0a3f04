"""The log pane: the run's own log file shown through a sparse line index, lines rendered on demand.

Scrollback and search cover the whole log at flat memory (the way Toolong reads files); the pane
holds no copy of the lines, only the index and a few decoded blocks.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.cache import LRUCache
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gpuwizard.runs.logindex import LogIndex

WINDOW_LINES = 256
STRIPS_KEPT = 512
"""Rendered lines kept (a few screenfuls at any size)."""


class LogView(ScrollView, can_focus=True):
    """A scrollable view over a LogIndex that follows the tail until the user scrolls away.

    Following is Textual's anchor: every layout (the first one, a scrollbar appearing, a banner above) puts the
    newest line at the bottom, and any scroll by the user releases it; scrolling back to the end follows again.
    """

    help_name = "log"
    """What the keys screen calls it (tui/base/keys.py)."""

    DEFAULT_CSS = """
    LogView { background: $surface; color: $foreground; }
    """

    def __init__(self, index: LogIndex, *, id: str | None = None):
        super().__init__(id=id)
        self.index = index
        self.line_count = 0
        self.widest = 0
        self.highlight: int | None = None
        self.scrolled_away = False
        self._window_start = -1
        self._window: list[str] = []
        self._strips: LRUCache[tuple[int, Style], Strip] = LRUCache(STRIPS_KEPT)

    def on_mount(self) -> None:
        self.anchor()
        self.show_state()

    def show_state(self) -> None:
        """The pane's top border says whether it follows the tail, and how to get back to it."""
        title = "following the tail" if self.following else "paused: f or End follows the tail"
        if self.border_title != title:
            self.border_title = title

    @property
    def following(self) -> bool:
        """The pane keeps the newest line in view."""
        return self.is_anchored and not self.scrolled_away

    def release_anchor(self) -> None:
        """Every scroll by the user comes through here: keys, wheel, scrollbar, a search match."""
        super().release_anchor()
        self.scrolled_away = True
        self.show_state()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self.scrolled_away and new_value >= self.max_scroll_y:  # back at the end: Textual anchors it again
            self.scrolled_away = False
            self.show_state()

    def grow(self, line_count: int) -> None:
        """The index now holds `line_count` lines: extend the scroll range, keep the tail in view while following.

        A scroll that left the pane at its end (`down` on the last line, a sideways scroll, `up` with nothing
        above) did not scroll away: new lines are followed."""
        if line_count == self.line_count:
            return
        at_end = self.scroll_y >= self.max_scroll_y and self.scroll_target_y >= self.max_scroll_y
        if self.scrolled_away and at_end:
            self.scrolled_away = False
            self.show_state()
        first_new = self.line_count
        self.line_count = line_count
        if line_count < first_new:
            self._window_start = -1  # the file was replaced
            self._strips.clear()
        self.virtual_size = Size(max(self.widest, self.size.width), line_count)
        if self.following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)  # also takes the anchor back from Textual
        self.refresh()

    def on_resize(self) -> None:
        self.virtual_size = Size(max(self.widest, self.size.width), self.line_count)

    def line(self, number: int) -> str:
        """One display line, read through a window of neighbouring lines (one index look-up per screenful)."""
        start = self._window_start
        if not (start <= number < start + len(self._window)):
            start = max(0, number - WINDOW_LINES // 4)
            self._window = self.index.lines(start, WINDOW_LINES)
            self._window_start = start
            width = max(map(len, self._window), default=0)
            if width > self.widest:
                self.widest = width
                self.virtual_size = Size(max(width, self.size.width), self.line_count)
        offset = number - start
        return self._window[offset] if 0 <= offset < len(self._window) else ""

    def render_line(self, y: int) -> Strip:
        number = self.scroll_offset.y + y
        if number >= self.line_count:
            return Strip.blank(self.size.width, self.rich_style)
        style = self.rich_style + Style(reverse=True) if number == self.highlight else self.rich_style
        key = (number, style)
        strip = self._strips.get(key)
        if strip is None:  # a line scrolled up by one is not rebuilt: each poll of a growing log redraws the pane
            strip = self._strips[key] = Strip([Segment(self.line(number), style)])
        scroll_x = self.scroll_offset.x
        return strip.crop_extend(scroll_x, scroll_x + self.size.width, style)

    def show_line(self, number: int) -> None:
        """Scroll so a line (a search match) is near the top, and mark it; following stops until `f` or End."""
        self.anchor(False)
        self.show_state()
        self.highlight = number
        self.scroll_to(y=max(0, number - 2), animate=False, immediate=True)
        self.refresh()

    def follow(self, on: bool) -> None:
        """Follow the tail again (`f`, End) or stop following it."""
        self.scrolled_away = False
        if on:
            self.highlight = None
            self.anchor()
            self.refresh()
        else:
            self.anchor(False)
        self.show_state()

    def action_scroll_end(self) -> None:
        self.follow(True)
