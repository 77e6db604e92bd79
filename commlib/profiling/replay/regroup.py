"""A job's gradient all-reduces regrouped into other buckets, in its replay graph (graph.py): the what-if's
`bucket_mb`.

    g2, buckets, origin = regroup(g, dp_group, cap_bytes)   # origin: new set -> the traced calls it replaces

DDP's rule, as chapter 6 built it (overlap.make_buckets): gradients fill a bucket in the order they become
ready, and a bucket is all-reduced once it holds its cap (an explicit bucket_cap_mb applies to every bucket,
the first included); the buckets go out in order. The trace says when each traced bucket was queued, not when
each parameter's gradient was ready, so the gradients of a traced bucket are taken as ready at an even rate
between its queue point and the previous one's (the first bucket's all at once), and a parameter may be split
between buckets: a step of B bytes gets ceil(B / cap) buckets. A step's all-reduces are those queued within one
ProfilerStep#N (torch.profiler's schedule marks every step), or, in a trace without the marks, between two
waits of the program (waits.Wait). A wait for a traced bucket waits for the new bucket holding its last byte, or,
if that one is queued only after the wait (bytes of later traced buckets fill it), for the last one queued
before the wait ends; with none, the wait stays a gap of the lane, as measured.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import replace

import numpy as np

from commlib.profiling.replay.graph import Graph, RankGraph
from commlib.profiling.replay.waits import Wait
from commlib.profiling.traces import Call

LANE = ("regrouped",)   # the comm lane of the new buckets: one, in order, as DDP issues them


def dp_calls(r: RankGraph, dp) -> list[list[int]]:
    """A rank's data-parallel all-reduces, in queue order, cut into steps: at its ProfilerStep#N marks where the
    trace has them (each call in the step it was queued in), else where the program waited between two."""
    idx = sorted((i for i, c in enumerate(r.calls) if c.op == "all_reduce" and c.group in dp and c.bytes),
                 key=lambda i: r.queue[i])
    if r.steps:
        starts = [s for s, _ in r.steps]
        by = {}
        for i in idx:
            by.setdefault(max(0, bisect.bisect_right(starts, r.queue[i]) - 1), []).append(i)
        return [by[k] for k in sorted(by)]
    stops = sorted(w.t_from for w in r.waits)
    runs = []
    for i in idx:
        if runs:
            q0, q1 = r.queue[runs[-1][-1]], r.queue[i]
            k = bisect.bisect_right(stops, q0)
            if k < len(stops) and stops[k] < q1:
                runs.append([])
        else:
            runs.append([])
        runs[-1].append(i)
    return runs


def regroup(g: Graph, dp, cap_bytes: float, max_buckets: int | None = None) -> tuple[Graph, int, dict]:
    """-> (the graph with each step's data-parallel all-reduces replaced by buckets of cap_bytes, the buckets per
    step, {new set: [(rank position, call index) of the traced calls it replaces]}). The new sets' transfers are
    None: the caller prices them. More than max_buckets new buckets in all is a ValueError (bounded work)."""
    runs = [dp_calls(r, dp) for r in g.ranks]
    if not dp or not any(runs):
        raise ValueError("bucket_mb: these traces have no data-parallel all-reduce to regroup")
    shape = [tuple(round(sum(r.calls[i].bytes for i in run)) for run in rr) for r, rr in zip(g.ranks, runs)]
    if not runs or not runs[0] or len(set(shape)) != 1:
        where = next((f"rank {g.ranks[p].rank} has {len(s)} step(s) of {', '.join(map(str, s[:4]))} bytes, rank "
                      f"{g.ranks[0].rank} {len(shape[0])} of {', '.join(map(str, shape[0][:4]))}"
                      for p, s in enumerate(shape) if s != shape[0]), "there are none")
        raise ValueError(f"bucket_mb: the ranks' data-parallel all-reduces (groups {', '.join(sorted(dp))}) differ "
                         f"from rank to rank ({where}): they cannot be regrouped as one DDP would")
    total = sum(math.ceil(b / cap_bytes - 1e-9) for s in shape for b in s)
    if max_buckets is not None and total > max_buckets:
        raise ValueError(f"bucket_mb: buckets of {cap_bytes / 2**20:g} MiB make {total} all-reduces over these "
                         f"traces' steps and ranks, more than the {max_buckets} the replay takes: choose larger buckets")
    new_sets: dict[tuple, list] = {}
    origin_calls: dict[tuple, set] = {}
    ranks = []
    for p, (r, rr) in enumerate(zip(g.ranks, runs)):
        ranks.append(_rank(p, r, rr, cap_bytes, new_sets, origin_calls))
    sets, transfer, origin = [], [], {}
    removed = {(p, i) for p, rr in enumerate(runs) for run in rr for i in run}
    remap = [rg.remap for rg in ranks]
    for s, members in enumerate(g.sets):
        if any(m in removed for m in members):
            continue
        sets.append([(p, remap[p][i]) for p, i in members])
        transfer.append(g.transfer[s])
    for key, members in sorted(new_sets.items()):
        origin[len(sets)] = sorted(origin_calls[key])
        sets.append(members)
        transfer.append(None)
    member = [[-1] * len(rg.graph.calls) for rg in ranks]
    for s, members in enumerate(sets):
        for p, i in members:
            member[p][i] = s
    out = [replace(rg.graph, member=member[p]) for p, rg in enumerate(ranks)]
    per_step = max(k for _, k in new_sets) + 1 if new_sets else 0
    return Graph(out, sets, transfer, list(g.notes)), per_step, origin


class _Regrouped:
    def __init__(self, graph: RankGraph, remap: dict):
        self.graph, self.remap = graph, remap


def _rank(p: int, r: RankGraph, runs, cap: float, new_sets: dict, origin_calls: dict) -> _Regrouped:
    gone = {i for run in runs for i in run}
    keep = [i for i in range(len(r.calls)) if i not in gone]
    remap = {i: k for k, i in enumerate(keep)}
    calls = [r.calls[i] for i in keep]
    lane = [r.lane[i] for i in keep]
    queue = [r.queue[i] for i in keep]
    lag_pred, lag_queue = [r.lag_pred[i] for i in keep], [r.lag_queue[i] for i in keep]
    resid, solo = [r.resid[i] for i in keep], [r.solo[i] for i in keep]
    pred = []
    for k, i in enumerate(keep):   # the nearest kept call before it on its lane
        j = r.pred[i]
        while j >= 0 and j in gone:
            j = r.pred[j]
        pred.append(remap[j] if j >= 0 else -1)
        if j != r.pred[i]:
            lag_pred[k] = 0.0
    keep_n = len(calls)   # the new buckets follow the kept calls
    into = {}   # old call -> the new call holding its last byte
    prev = -1
    for s, run in enumerate(runs):
        c0 = r.calls[run[0]]
        sizes = np.array([r.calls[i].bytes for i in run], dtype=float)
        cum = np.concatenate(([0.0], np.cumsum(sizes)))
        ready = np.array([r.queue[run[0]]] + [r.queue[i] for i in run])
        nb = max(1, math.ceil(cum[-1] / cap - 1e-9))
        ends = np.minimum(cap * np.arange(1, nb + 1), cum[-1])
        at = np.interp(ends, cum, ready)
        for k in range(nb):
            nbytes = int(round(ends[k] - (ends[k - 1] if k else 0.0)))
            calls.append(Call(r.rank, "all_reduce", c0.group, c0.group_size, nbytes, c0.dtype, float(at[k]), 0.0,
                              c0.algorithm, c0.protocol, c0.kernel))
            lane.append(LANE)
            queue.append(float(at[k]))
            pred.append(prev)
            lag_pred.append(0.0)
            lag_queue.append(0.0)
            resid.append(0.0)
            solo.append(0.0)
            prev = len(calls) - 1
            new_sets.setdefault((s, k), []).append((p, prev))
        for j, i in enumerate(run):
            k = min(nb - 1, max(0, math.ceil(cum[j + 1] / cap - 1e-9) - 1))
            into[i] = len(calls) - nb + k
            lo, hi = cum[j], cum[j + 1]
            for kk in range(nb):   # the traced buckets whose bytes each new one holds
                if min(hi, ends[kk]) > max(lo, ends[kk - 1] if kk else 0.0):
                    origin_calls.setdefault((s, kk), set()).add((p, i))
    waits = []
    for w in r.waits:
        i = into.get(w.call, remap.get(w.call))
        if w.call in into:   # not a bucket the program queues after this wait: a cycle no replay can follow
            while i is not None and queue[i] >= w.t_to:
                i = pred[i] if pred[i] >= keep_n else None
        if i is not None:
            waits.append(Wait(w.t_from, w.t_to, i, w.lag_lane, w.lag_call, w.stated))
    waits.sort(key=lambda w: w.t_to)
    graph = replace(r, calls=calls, lane=lane, pred=pred, queue=queue, lag_pred=lag_pred, lag_queue=lag_queue,
                    waits=waits, member=[-1] * len(calls), resid=resid, solo=solo)
    return _Regrouped(graph, remap)
