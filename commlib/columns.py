"""Text tables whose column widths come from their values: no column ever runs into the next.

    lines = columns.fit([["op", "bytes"], ["all_reduce", "1048576"]], widths=[12, 9], align="<>")

Each column is as wide as its given width or as its widest cell plus one, whichever is more, so at least
one space parts every two cells (a group of 1000 ranks, a 100 GB message) and the usual values keep the
layout the widths give. Widths are display columns: a Chinese character takes two (width, the one measure of
display columns: ui.language fills lines by it, ui.wrap wraps them), so a table keeps its columns in the zh_CN
edition. Pure Python: imports nothing of commlib.
"""

from __future__ import annotations

import unicodedata


def width(text: str) -> int:
    """Columns the text takes in a monospaced font: a Chinese character or full-width mark takes two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def fit(rows: list[list[str]], widths: list[int], align: str, limit: int | None = None) -> list[str]:
    """rows of cells (strings; header rows included) as lines; align: one '<' or '>' per column. A cell wider
    than its column widens it; where that takes a line past `limit` display columns, the columns give back the
    room their cells leave unused, the roomiest first (a Chinese header, twice as wide as its English, in a table
    whose English fits the book's column)."""
    if len(widths) != len(align) or any(len(r) != len(widths) for r in rows):
        raise ValueError(f"every row needs {len(widths)} cells, one per width and alignment")
    last = len(widths) - 1
    # the space goes on the side of the padding: before a right-aligned cell, after a left-aligned one; the
    # table's outer edges need none
    gap = [0 if (a == ">" and i == 0) or (a == "<" and i == last) else 1 for i, a in enumerate(align)]
    needed = [max([1] + [width(r[i]) + gap[i] for r in rows]) for i in range(len(widths))]
    sized = [max(w, n) for w, n in zip(widths, needed)]
    while limit is not None and sum(sized) > limit:
        i = max(range(len(sized)), key=lambda j: sized[j] - needed[j])
        if sized[i] == needed[i]:
            break   # no room left to give: the line stays wider
        sized[i] -= 1
    return ["".join(_pad(cell, a, w) for cell, a, w in zip(r, align, sized)) for r in rows]


def _pad(cell: str, align: str, columns: int) -> str:
    """cell padded with spaces to `columns` display columns (f"{cell:<w}" where every character takes one)."""
    space = " " * max(0, columns - width(cell))
    return cell + space if align == "<" else space + cell
