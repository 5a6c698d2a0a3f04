"""Text tables whose columns are as wide as what they show: the `runs` listing, `sweep status` and the Runs screen
size their columns here, so a short table fits an 80-column terminal and a header never shifts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def column_width(header: str, values: Iterable[str], most: int | None = None) -> int:
    """As wide as the header and the longest value; at most `most` where a longer value would push a row past 80
    columns (the caller cuts such a value)."""
    widest = max([len(header), *map(len, values)])
    return widest if most is None else min(most, widest)


def column_widths(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[int]:
    """Each column as wide as its header and its longest cell."""
    rows = list(rows)
    return [column_width(header, (row[i] for row in rows)) for i, header in enumerate(headers)]
