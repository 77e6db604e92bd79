"""The critical path of a replay (graph.replay): from the job's last end, back along the edges that bound each
task, to where the ending rank's step began.

    path = critical_path(ranks, g, set_end, last_in)   # graph.replay's state -> compute_us, comm_us, calls, ...
"""

from __future__ import annotations

import bisect

import numpy as np


def critical_path(rs, g, set_end, last_in) -> dict:
    """Walk back from the job's last end along the edges that bound each task -> the time on that path spent in
    compute (the lane, gaps included) and in transfers, and the calls on it. The path is cut where the ending
    rank's step began (on one clock): a rank that started earlier must not make it longer than the step. Every
    move goes back in time (a matched call is charged from its last arrival to this rank's end, at most its
    transfer), so the path is never longer than the step it explains."""
    p = max(range(len(rs)), key=lambda p: rs[p].finish - rs[p].g.start)
    stop = rs[p].g.start - rs[p].g.offset   # the ending rank's start, on the common clock
    reach = {id(x): np.maximum.accumulate(x.hist_to).tolist() if x.hist_to else [] for x in rs}   # monotone: bisect
    compute = comm = 0.0
    calls = []
    st = rs[p]
    # what ended the rank: its lane or a call
    ends = [(e, i) for i, e in enumerate(st.end) if e is not None]
    lane_end = st.lane_end
    point = ("lane", lane_end) if not ends or lane_end >= max(ends)[0] else ("call", max(ends)[1])
    now = max([lane_end] + [e for e, _ in ends]) - st.g.offset   # where the path is, on the common clock: it only
    # goes back (a regrouped bucket's wait may point at a lane position after it: clipped, the path cannot loop)
    truncated, below, cap = True, None, None   # below: from a wait's start, only the waits before it (one may take no time)
    seen, at = set(), now   # the points passed since the path last moved back: one seen again is a loop
    for _ in range(10 * sum(len(x.g.calls) + len(x.g.waits) for x in rs) + 10):
        if now < at:
            seen, at = set(), now
        if (st.g.rank, point) in seen:
            break   # truncated: the rest of the step is on no path this walk can follow
        seen.add((st.g.rank, point))
        floor = stop + st.g.offset   # the cut, on this rank's clock
        if point[0] == "lane":   # back along the rigid lane to the wait that set its shift, or the start
            t = min(point[1], now + st.g.offset)
            k = bisect.bisect_right(reach[id(st)], t) - 1
            if below is not None:
                k, below = min(k, below), None
            lower = st.hist_to[k] if k >= 0 else st.g.start
            compute += max(0.0, t - max(lower, floor))
            now = min(now, max(lower, floor) - st.g.offset)
            if k < 0 or lower <= floor:
                truncated = False
                break
            wk = st.hist_w[k]
            w = st.g.waits[wk]
            if st.wait_bound[wk] == "call":   # the call, up to where the lane went on (a Gloo worker may stamp
                point, cap = ("call", w.call), lower   # its end after the waiting thread resumed: waits.EARLY_US)
            else:
                point, below = ("lane", w.t_from + (st.hist_shift[k - 1] if k else 0.0)), k - 1
        else:
            i = point[1]
            calls.append((st.g.rank, i))
            s = st.g.member[i]
            end_i = st.end[i] if cap is None else min(st.end[i], cap)
            cap = None
            here = min(end_i - st.g.offset, now)   # this rank's end of the call, on the common clock
            arrive = set_end[s] - g.transfer[s] if s >= 0 and last_in[s] is not None else None
            if arrive is not None and arrive <= here:   # from the last arrival, on that rank, to this rank's end
                full = min(g.transfer[s], here - arrive)   # a rank that ended before set_end (its residual < 0)
                took = min(full, max(0.0, here - stop))
                lp, li = last_in[s]
                st = rs[lp]
                i = li
            else:   # unmatched, or the clocks put the last arrival after this rank's end: this rank's own call
                full = max(0.0, end_i - st.arrival[i])
                took = min(full, max(0.0, end_i - floor))
            comm += took
            now = here - took
            if st.bound[i] is None or took < full:
                truncated = False   # a member the replay forced, or the cut: the path ends here
                break
            kind, ref = st.bound[i]
            point = ("call", ref) if kind == "pred" else ("lane", ref)   # ref: the queue point as replayed
    total = compute + comm
    return {"compute_us": compute, "comm_us": comm, "calls": len(calls),
            "comm_share": comm / total if total > 0 else 0.0, "truncated": truncated}
