"""Each rank's clock against the first's, from the collectives they share: a matched call ends for every member
together (graph.py), so the difference of its ends on two ranks is the difference of their clocks.

    offsets, unplaced = clock_offsets(ranks, sets)   # sets: graph.build's matched sets [(rank position, call)]
"""

from __future__ import annotations

import numpy as np


def clock_offsets(ranks, sets) -> tuple[list[float], list[int]]:
    """Each rank's clock minus rank ranks[0]'s: medians of matched calls' end differences, along the groups ->
    (offsets, the positions of ranks in some matched call that no chain of groups links to ranks[0])."""
    diffs = {}
    for members in sets:
        p0, i0 = members[0]
        e0 = ranks[p0].calls[i0].end_us
        for p, i in members[1:]:
            diffs.setdefault((p0, p), []).append(ranks[p].calls[i].end_us - e0)
    off = {0: 0.0}
    todo = [0]
    while todo:
        a = todo.pop()
        for (x, y), d in diffs.items():
            for src, dst, sign in ((x, y, 1.0), (y, x, -1.0)):
                if src == a and dst not in off:
                    off[dst] = off[a] + sign * float(np.median(d))
                    todo.append(dst)
    matched_ranks = {p for members in sets for p, _ in members}
    return [off.get(p, 0.0) for p in range(len(ranks))], sorted(matched_ranks - set(off))
