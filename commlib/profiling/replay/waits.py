"""Where a rank's compute lane waited for a collective (the replay's waits: graph.py's docstring, "waits").

    spans, waits = rank_waits(r, spans, queue)   # r: a RankTrace; spans: its merged compute lane; queue: per call

A wait stops the compute lane at t_from and lets it go on at t_to once its call has ended. Stated ones are
commlib's `commlib:wait` marks (traces.py's RankTrace.waits). Inferred ones are gaps: of the compute lane, or,
where the trace has them, between the rank's innermost ops (RankTrace.leaves: a rank blocked inside an op, as in
FSDP2's hooks, runs none; one that starts or ends an op is running), that end within the slack of a call's end
(the latest such call: the thread woke when it ended); a gap inside an op is taken out of the compute lane.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from commlib.cost.intervals import bridged, union_array

SLACK_US, SLACK_SHARE, STATED_SHARE = 100.0, 0.25, 0.02   # a gap ending within SLACK_US + a share of it after
# a call's end waited for it (a loaded host wakes late: 3-7 ms after a 20-ms all-gather); beside a stated wait, 2%
MIN_GAP_US = 5.0                      # shorter gaps are launch gaps, never waits
# A gap that ends a little before a call's end waited for it too: Gloo's worker stamps its range's end after it
# has marked the work done, and the waiting thread may resume first (measured: torch DDP's one bucket, 6.7 ms before
# the end of a 69-ms all-reduce): up to EARLY_SHARE of the call, at most EARLY_US, if the gap began after the call
EARLY_SHARE, EARLY_US = 0.12, 10_000.0
SYNC_SHARE = 0.5   # a gap begun with its call (async_op=False: FSDP2's) waits for it up to half its length late


@dataclass
class Wait:
    t_from: float      # the lane stops here (rank's clock, us)
    t_to: float        # and goes on here
    call: int          # once this call (index in the rank's calls) has ended
    lag_lane: float    # lags (graph.py's docstring): the binding edge carries the measured gap
    lag_call: float
    stated: bool       # a commlib:wait mark (else inferred from a gap)


def rank_waits(r, spans: np.ndarray, queue) -> tuple[np.ndarray, list[Wait]]:
    """A rank's compute spans (less its waits inside an op, where its trace has innermost ops) and its waits,
    stated and inferred, in the order its lane meets them (where it goes on, or its call's start if later).
    queue: per call, when it was queued."""
    calls = r.calls
    leaves = getattr(r, "leaves", None)
    if leaves is not None and len(leaves):   # waits inside an op: gaps between the innermost ops (traces.py)
        inner = bridged(union_array(np.asarray(leaves, dtype=float).reshape(-1, 2)), MIN_GAP_US)
        inferred = _inferred(inner, calls, getattr(r, "waits", None) or {}, queue)
        spans = _cut(spans, [(w.t_from, w.t_to) for w in inferred])
    else:
        inferred = _inferred(spans, calls, getattr(r, "waits", None) or {}, queue)
    waits = _stated(r) + inferred
    waits.sort(key=lambda w: max(w.t_to, calls[w.call].start_us))
    return spans, waits


def _stated(r) -> list[Wait]:
    out = []
    for i, (w0, w1) in sorted((getattr(r, "waits", None) or {}).items(), key=lambda kv: kv[1]):
        e = r.calls[i].end_us
        # the binding edge carries the gap: the call (it ended after the wait began) or the lane
        out.append(Wait(w0, w1, i, 0.0, max(0.0, w1 - e), True) if e >= w0 else Wait(w0, w1, i, w1 - w0, 0.0, True))
    return out


def _inferred(spans, calls, stated: dict, queued=None) -> list[Wait]:
    """Gaps of the compute lane that end within the slack after a call's end (or, for a gap that began after the
    call was queued, a little before it: EARLY_SHARE): the latest such call, per gap. queued: per call, when it
    was queued (default: its start)."""
    if len(spans) < 2 or not calls:
        return []
    ends = np.array([c.end_us for c in calls])
    starts = np.array([c.start_us for c in calls])
    queued = starts if queued is None else np.minimum(np.asarray(queued, dtype=float), starts)
    early = np.minimum(EARLY_SHARE * (ends - starts), EARLY_US)   # a worker's range may end after the waiter resumed
    # a call the rank stated a wait for was not needed before that wait began: no gap ending earlier waited for it
    asked = np.array([stated[i][0] if i in stated else -np.inf for i in range(len(calls))])
    found = []
    for k, late in ((np.searchsorted(spans[:, 0], ends, side="right"), True),   # the first span after its end
                    (np.searchsorted(spans[:, 0], ends - early, side="right"), False)):   # or a little before
        ok = (k > 0) & (k < len(spans))
        k = np.where(ok, k, 1)
        began, gap, slack = spans[k - 1, 1], spans[k, 0] - spans[k - 1, 1], spans[k, 0] - ends
        ok &= (began <= ends) & (gap >= MIN_GAP_US) & (spans[k, 0] >= asked)
        own = np.array([i not in stated for i in range(len(calls))])   # the rank stated no wait for it
        if late:
            synchronous = own & (began <= starts + SLACK_US)   # the gap began as the call did: the rank blocked
            ok &= ((slack <= SLACK_US + STATED_SHARE * gap) | (own & (slack <= SLACK_US + SLACK_SHARE * gap))
                   | (synchronous & (slack <= SYNC_SHARE * gap)))
        else:   # resumed before the end: only a gap that began once the call was queued, and not a stated one's
            ok &= own & (slack < 0) & (began >= queued - SLACK_US)
        found += [(int(k[i]), i) for i in np.flatnonzero(ok).tolist()]
    taken = sorted(stated.values())
    starts = [w0 for w0, _ in taken]
    reach = np.maximum.accumulate([w1 for _, w1 in taken]).tolist() if taken else []   # the latest end so far
    best = {}
    for kk, i in found:
        if ends[i] > best.get(kk, (-np.inf, -1))[0]:
            best[kk] = (ends[i], i)
    out = []
    for kk, (_, i) in best.items():
        t0, t1 = float(spans[kk - 1, 1]), float(spans[kk, 0])
        j = bisect.bisect_left(starts, t1) - 1   # the stated waits starting before the gap ends
        if j >= 0 and reach[j] > t0:   # one of them covers this gap already
            continue
        out.append(Wait(t0, t1, i, 0.0, t1 - float(ends[i]), False))
    return out


def _cut(spans: np.ndarray, cuts) -> np.ndarray:
    """Merged spans less the (sorted, disjoint) cuts: a rank blocked inside an op computes nothing there."""
    if not cuts or not len(spans):
        return spans
    out, j = [], 0
    cuts = sorted(cuts)
    for a, b in spans.tolist():
        while j < len(cuts) and cuts[j][1] <= a:
            j += 1
        k = j
        while k < len(cuts) and cuts[k][0] < b:
            c0, c1 = cuts[k]
            if c0 > a:
                out.append((a, c0))
            a = max(a, c1)
            k += 1
        if a < b:
            out.append((a, b))
    return np.asarray(out, dtype=float).reshape(-1, 2)
