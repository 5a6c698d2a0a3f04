"""Terminal control sequences are removed from every text shown (gpuwizard.core.safetext): OSC, DCS, CSI, 8-bit
controls and unterminated strings; other controls are made visible (issue 19, item 2)."""

from __future__ import annotations

import pytest

from gpuwizard.core.safetext import safe_line, safe_text
from support.hostile import DCS, OSC_CLIPBOARD, OSC_TITLE


@pytest.mark.parametrize(
    "sequence, left",
    [
        (OSC_TITLE, ""),
        ("\x1b]0;PWNED-TITLE\x1b\\", ""),  # OSC ended by ST
        (OSC_CLIPBOARD, ""),
        ("\x1b]8;;http://x/\x1b\\link\x1b]8;;\x1b\\", "link"),  # a hyperlink: its text stays
        (DCS, ""),
        ("\x1b_apc\x1b\\", ""),
        ("\x1b^pm\x1b\\", ""),
        ("\x1bXsos\x1b\\", ""),
        ("\x9d0;PWNED-TITLE\x9c", ""),  # 8-bit OSC
        ("\x90+q544e\x9c", ""),  # 8-bit DCS
        ("\x1b[2J\x1b[H\x1b[?25l\x1b[31m", ""),  # CSI: clear, home, hide the cursor, colour
        ("\x9b2J", ""),
        ("\x1bc\x1b(0\x1b7", ""),  # reset, line drawing, save cursor
        ("\x1b", ""),  # a lone ESC
    ],
)
def test_every_control_sequence_is_removed(sequence, left):
    assert safe_line(f"before {sequence}· after") == f"before {left}· after"  # · is not a final byte


def test_an_unterminated_control_string_takes_the_rest_of_the_line_as_a_terminal_would():
    assert safe_line("before \x1b]0;PWNED-TITLE and more") == "before "
    assert safe_text("a \x1bP+q544e\nnext line") == "a \nnext line"


def test_other_controls_are_made_visible_and_tabs_and_newlines_kept_where_they_belong():
    assert safe_line("a\tb\x07c\x08d\re\x7ff\x85g\nh") == "a\tb\u2407c\u2408d\u240de\u2421f\ufffdg\u240ah"
    assert safe_text("first\x1b[1m line\nsecond\x07") == "first line\nsecond\u2407"
    assert safe_line("plain text, unchanged: 5% |###| 3/10") == "plain text, unchanged: 5% |###| 3/10"
