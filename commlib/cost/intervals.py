"""Interval arithmetic on (start, end) spans in seconds: union, intersection, length, and how much of each span
another set of spans covers; the one home of it, on the ground floor beside the timeline model. Live profiling
(profiling/jobs/live.py), diagnose, the replay (profiling/replay) and the figures (ui/plots.py) all use these;
numpy is imported only where an (n, 2) array is merged."""

from __future__ import annotations


def union(spans) -> list[tuple[float, float]]:
    """Merge (start, end) spans into disjoint, sorted spans (an (n, 2) array is merged with numpy: same result)."""
    if hasattr(spans, "shape"):
        return _union_array(spans)
    merged: list[list[float]] = []
    for s, e in sorted(spans):
        if e <= s:
            continue
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def _union_array(a) -> list[tuple[float, float]]:
    return list(map(tuple, union_array(a).tolist()))


def bridged(spans, gap: float):
    """Merged (m, 2) spans with the gaps shorter than `gap` closed. The replay's wait inference (replay/graph.py)
    uses it: a launch gap is never a wait, and the search for the gap after a call's end must not stop at one
    (an op's end, a point in RankTrace.leaves, 2 us after the last leaf: DDP's copy_bucket_to_grad before the
    optimizer's step)."""
    import numpy as np

    if len(spans) < 2:
        return spans
    keep = np.r_[True, spans[1:, 0] - spans[:-1, 1] >= gap]   # a span that starts a new run
    first = np.flatnonzero(keep)
    return np.stack([spans[first, 0], spans[np.r_[first[1:] - 1, len(spans) - 1], 1]], axis=1)


def union_array(a):
    """union() of an (n, 2) array, as an (m, 2) array (no list of tuples to build for 200k spans): sorted by
    start, a new span begins where a start passes every earlier end."""
    import numpy as np

    a = np.asarray(a, dtype=float).reshape(-1, 2)
    a = a[a[:, 1] > a[:, 0]]
    if not len(a):
        return a
    order = np.argsort(a[:, 0], kind="stable")
    s, run = a[order, 0], np.maximum.accumulate(a[order, 1])
    new = np.empty(len(s), dtype=bool)
    new[0], new[1:] = True, s[1:] > run[:-1]
    first = np.flatnonzero(new)
    return np.stack([s[first], run[np.append(first[1:] - 1, len(s) - 1)]], axis=1)


def length(spans) -> float:
    if hasattr(spans, "shape"):
        return float((spans[:, 1] - spans[:, 0]).sum()) if len(spans) else 0.0
    return sum(e - s for s, e in spans)


def overlap_length(a, b) -> float:
    """length(intersect(a, b)) of two lists of disjoint sorted spans (overlap_lengths, summed)."""
    return float(overlap_lengths(a, b).sum())


def overlap_lengths(a, b):
    """Per span of a (any spans), how much of it the disjoint sorted spans b cover, in O(len(a) log len(b)) with
    numpy: each span takes the spans of b it meets (by bisect) and their summed lengths (a prefix sum), less what
    the first and the last reach past its ends. -> a float array of len(a)."""
    import numpy as np

    a = np.asarray(a, dtype=float).reshape(-1, 2)
    out = np.zeros(len(a))
    if not len(a) or not len(b):
        return out
    b = np.asarray(b, dtype=float)
    done = np.concatenate(([0.0], np.cumsum(b[:, 1] - b[:, 0])))
    lo = np.searchsorted(b[:, 1], a[:, 0], side="right")
    hi = np.searchsorted(b[:, 0], a[:, 1], side="left")
    meets = lo < hi
    lo, hi, m = lo[meets], hi[meets], a[meets]
    out[meets] = done[hi] - done[lo] - np.maximum(0.0, m[:, 0] - b[lo, 0]) - np.maximum(0.0, b[hi - 1, 1] - m[:, 1])
    return out


def intersect(a, b) -> list[tuple[float, float]]:
    """Intersection of two lists of disjoint sorted spans."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out
