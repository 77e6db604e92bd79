"""The replay's compute, changed on purpose: stretched or shrunk (graph.py keeps it as measured), and what a
job's groups do.

    g2 = stretch(g, [0.8, 0.8])             # each rank's compute spans x0.8, the gaps between them as measured
    f, got = calibrate(g, 60_000.0, 4)      # the factor whose replay gives 60 ms per step (4 steps traced)
    floor(g)                                # the least such factor: the profiler's most per recorded op taken off
    share(4, 2, 2)                          # 2.0: 4 ranks on 2 cores compute at half the speed of 2 ranks
    roles(g, {"0", "1"})                    # {"0": "gradients", "1": "activations"}: what the traces show

Why stretch: (1) the profiler's overhead. A traced step runs slower than an untraced one (on many small CPU ops,
20-37% under load, issue 64): the recording's own untraced steps say how much, and `calibrate` finds the factor
on the compute that makes the identity replay give them, taking out at most what the profiler adds to the ops it
recorded (`floor`); every scenario is replayed with it. (2) this machine.
Ranks that share fewer cores than they are compute at (ranks / usable cores) of one core's speed each: a
what-if for the emulated cluster a learner can run stretches the compute by the new share over the traced one.
Its stretch leaves out commlib's emulated accelerator (RankTrace.offcore: ops that sleep, taking no core); other
compute that takes no core (GPU kernels) would not slow down either but is stretched, and the CPU work inside
Gloo's calls (copies, sums), which would slow down, is not.
A stretch is a warp of each rank's own clock: a point t moves by (factor - 1) x the compute before it, so every
compute span grows by the factor and every gap (a wait, Python between ops) keeps its length; queue points,
waits and calls move with the compute before them, and no call's duration changes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from commlib.cost.intervals import union_array
from commlib.profiling.replay import graph

MIN_FACTOR = 0.5       # calibrate's bracket: the profiler is taken to add at most as much as the compute itself
                       # (a step whose untraced time its compute cannot explain differs by its calls or noise)
PER_OP_US = 4.0        # the most the profiler adds to each CPU op it records (nested ones each count), us: where the
                       # trace counts its ops (RankTrace.ops), calibrate takes out at most this much a recorded op
                       # (floor). benchmarks/profiler_overhead.py (torch 2.13, this course's 2-core VM, one thread):
                       # 0.7 us an op with record_shapes, 1.5 with with_stack too, quiet; 1.3 and 1.9 beside 2 busy
                       # loops; twice that here. Jobs of ops of 70-100 us (benchmarks/whatif_accuracy.py's) can then
                       # lose 4-6% of their compute to it at most: a traced step further over its untraced one was
                       # slowed by something else (a host busy while it recorded), which no compute factor undoes
ITERATIONS = 30        # bisection steps (2^-30 of the bracket: far below a microsecond on any step)
TOLERANCE = 1e-4       # calibrate stops once the replayed step is this close to the target (relative)
NOISE = 0.05           # a traced step at most this much above the untraced one is left as it is: the noise of a few
                       # steps (benchmarks/whatif_accuracy.py --network kernel, two untraced runs of each scenario:
                       # median 1.8%, up to 11% apart). Corrected, torch DDP's 2.7% there took x0.83 of its compute,
                       # and its step at x4 the bandwidth was predicted 8% under the run (2.5% under, left alone).
                       # 2% was tried (issue 64): it brought the committed run's identity replay within 1.4% (the CNN's
                       # 2.7% corrected), but chapter 9's DDP example, recorded 3% over its untraced step, then took
                       # x0.54 of its compute (a few large ops: the profiler's cost is per op), and its prediction
                       # went 9% under the run. floor now bounds that; the noise of a few steps stays: in a later run
                       # of the same benchmark (2026-12-07, load 0.8 -> 1.4) the traced steps ran from 8.9% under
                       # to 3.3% over their own untraced ones (whatif compares their medians over the steps), where
                       # the ops' 4-6% of the compute is 2-3% of the step


def _warp(spans: np.ndarray, factor: float):
    """t (array, rank's clock) -> t + (factor - 1) * the compute before t."""
    if not len(spans) or factor == 1.0:
        return lambda t: np.asarray(t, dtype=float)
    starts, lengths = spans[:, 0], spans[:, 1] - spans[:, 0]
    before = np.concatenate(([0.0], np.cumsum(lengths)))

    def w(t):
        t = np.asarray(t, dtype=float)
        k = np.searchsorted(starts, t, side="right") - 1
        inside = np.clip(t - starts[np.maximum(k, 0)], 0.0, lengths[np.maximum(k, 0)])
        return t + (factor - 1.0) * np.where(k >= 0, before[np.maximum(k, 0)] + inside, 0.0)
    return w


def _minus(a: np.ndarray, b) -> np.ndarray:
    """The merged spans a less the merged spans b, (m, 2)."""
    if b is None or not len(b) or not len(a):
        return a
    points = np.unique(np.concatenate((a.reshape(-1), b.reshape(-1))))
    mids = (points[:-1] + points[1:]) / 2

    def covered(spans):
        k = np.searchsorted(spans[:, 0], mids, side="right") - 1
        return (k >= 0) & (mids < spans[np.maximum(k, 0), 1])
    keep = covered(a) & ~covered(b)
    return union_array(np.stack([points[:-1][keep], points[1:][keep]], axis=1))


def stretch(g: graph.Graph, factors, oncore: bool = False) -> graph.Graph:
    """The graph with rank position p's compute x factors[p] (a number: every rank's); the gaps between compute,
    every call's duration and the transfers as they were. oncore: only the compute that takes a core grows (the
    spans of RankGraph.offcore keep their lengths)."""
    factors = [float(factors)] * len(g.ranks) if np.isscalar(factors) else [float(f) for f in factors]
    if len(factors) != len(g.ranks) or not all(f > 0 and np.isfinite(f) for f in factors):
        raise ValueError(f"factors must be one positive number per rank ({len(g.ranks)}), got {factors!r}")
    out = []
    for r, f in zip(g.ranks, factors):
        if f == 1.0 or not len(r.spans):
            out.append(r)
            continue
        w = _warp(_minus(r.spans, r.offcore) if oncore else r.spans, f)
        one = lambda t: float(w([t])[0])  # noqa: E731
        calls = [replace(c, start_us=s) for c, s in zip(r.calls, w([c.start_us for c in r.calls]).tolist())]
        waits = [replace(x, t_from=one(x.t_from), t_to=one(x.t_to)) for x in r.waits]
        steps = [(one(a), one(b)) for a, b in r.steps]
        out.append(replace(r, spans=w(r.spans.reshape(-1)).reshape(-1, 2), calls=calls, waits=waits, steps=steps,
                           queue=w(r.queue).tolist() if r.queue else [], end=one(r.end),
                           offcore=None if r.offcore is None else w(r.offcore.reshape(-1)).reshape(-1, 2)))
    return replace(g, ranks=out)


def floor(g: graph.Graph) -> float:
    """The least factor calibrate may put on the compute: the profiler's most (PER_OP_US a recorded op, RankGraph.ops)
    taken off all the ranks' compute, and never below MIN_FACTOR; MIN_FACTOR where a rank's trace does not count
    its ops."""
    if any(r.ops is None for r in g.ranks):
        return MIN_FACTOR
    busy = sum(float((r.spans[:, 1] - r.spans[:, 0]).sum()) for r in g.ranks if len(r.spans))
    return max(MIN_FACTOR, 1.0 - PER_OP_US * sum(r.ops for r in g.ranks) / busy) if busy > 0 else 1.0


def calibrate(g: graph.Graph, target_us: float, steps: int = 1) -> tuple[float, float]:
    """The factor on every rank's compute whose replay (the traced transfers kept) gives target_us per step ->
    (factor, that replay's step per step). Only ever shrinks, and by floor(g) at most: a replay already at or below
    the target, or within NOISE of it, keeps its compute (1.0), and so does one that even floor(g) cannot bring
    down to it (the difference is then not the profiler's: the calls, the gaps between ops, or a host busy while
    it recorded; taking it out of the compute would skew every scenario). The replay's step grows with the
    compute (every task waits for the max of its inputs), so a bisection finds it."""
    def step(f):
        return graph.replay(stretch(g, f))["step_us"] / steps
    top = step(1.0)
    lo = floor(g)
    if top <= target_us * (1 + NOISE) or lo >= 1.0:
        return 1.0, top
    hi, got = 1.0, top
    if step(lo) > target_us:   # more than the profiler can explain: nothing corrected
        return 1.0, top
    for _ in range(ITERATIONS):
        mid = (lo + hi) / 2
        got = step(mid)
        if abs(got / target_us - 1) <= TOLERANCE:
            return mid, got
        lo, hi = (mid, hi) if got < target_us else (lo, mid)
    return mid, got


def share(ranks: int, traced_ranks: int, cores: int) -> float:
    """How much slower each of `ranks` computes than each of the traced ones, all on `cores` usable cores: the
    ranks per core beyond one, new over traced (4 ranks on 2 cores against 2 traced: 2.0)."""
    return max(1.0, ranks / cores) / max(1.0, traced_ranks / cores)


# ----------------------------------------------------------------------------------- what a group does
def roles(g: graph.Graph, groups) -> dict:
    """Each group in `groups` (those that all-reduce or reduce-scatter) -> what the traces show it doing, step by
    step, on every rank that calls it:
    "activations": at least two calls in the step, all of one size (an activation's), three in four of them
    needed at once (the program waits for the call with next to no compute since it queued it: under AT_ONCE of
    the call's time, or AT_ONCE_US: a fast call's 5% is a loaded host's stray statement; a call with no wait in
    the trace, the compute begun between its queue point and its end), the first in the forward (before FORWARD of
    the step's compute): a tensor-parallel group, which all-reduces activations through every layer, forward and
    backward;
    "gradients": otherwise, where its first call in the step comes after the forward (FORWARD of the step's
    compute): a data-parallel group's gradients, once a step (FSDP's reduce-scatters too: one size, waited at once,
    but all in the backward);
    "unknown": neither. Each rank's steps vote (a loaded machine's stray op can move one step's compute): a kind
    that has two in three of all the votes, else "unknown"."""
    out = {}
    for name in groups:
        votes = [v for r in g.ranks if any(c.group == name for c in r.calls) for v in _votes(r, name)]
        best = max(set(votes), key=votes.count) if votes else "unknown"
        out[name] = best if votes.count(best) >= VOTE * len(votes) else "unknown"
    return out


AT_ONCE = 0.05   # compute between a call's queue point and the wait for it, against the call's time: "at once"
AT_ONCE_US = 500.0  # ... or at most this much: the host's own statements between a call and its wait, which a
#                    loaded host stretches (a Megatron step's 8 KiB all-reduces on loopback, 0.2 ms each, beside a busy
#                    loop: up to 270 us between queue and wait); a data-parallel bucket waits for milliseconds of
#                    backward
VOTE = 2 / 3     # the share of the steps' votes a kind needs
FORWARD = 0.25   # the share of a step's compute before which a call is in the forward (about a third of the step):
#                  a tensor-parallel group's first all-reduce is (Megatron's g after the first layer: 4% of the
#                  compute in benchmarks/whatif_accuracy.py's job), a data-parallel one's is not (its gradients
#                  come in the backward: 38-40% for FSDP2's reduce-scatters there, which also wait at once, of
#                  one size, 46-55% for the DDP jobs' buckets)


def _votes(r: graph.RankGraph, name) -> list[str]:
    """What each step of this rank shows the group doing (roles)."""
    idx = np.array([i for i, c in enumerate(r.calls) if c.group == name and c.op in ("all_reduce", "reduce_scatter")],
                   dtype=np.int64)
    if not len(idx) or not len(r.spans):
        return ["unknown"]
    shifted = _warp(r.spans, 2.0)   # t + the compute before t

    def before(t):
        t = np.asarray(t, dtype=float)
        return shifted(t) - t
    queue = np.asarray(r.queue, dtype=float)
    needed = np.full(len(r.calls), np.inf)   # per call: the least compute between its queue point and a wait for it
    if r.waits:
        calls = np.array([w.call for w in r.waits], dtype=np.int64)
        np.minimum.at(needed, calls, before([w.t_from for w in r.waits]) - before(queue[calls]))
    unseen = idx[np.isinf(needed[idx])]   # no wait in the trace (a blocking call whose work was done when it
    if len(unseen):                       # waited, on a loaded host): the compute begun after its queue point and
        starts = np.asarray([a for a, _ in r.spans], dtype=float)   # before its end (an op that encloses the call,
        ends = np.asarray([b for _, b in r.spans], dtype=float)     # begun before it, is its caller's, not work
        for i in unseen:                                             # done meanwhile)
            q, e = queue[i], max(r.calls[i].end_us, queue[i])
            inside = (starts >= q) & (starts < e)
            needed[i] = float(np.sum(np.minimum(ends[inside], e) - starts[inside]))
    took = np.array([max(r.calls[i].duration_us, 1e-9) for i in idx])
    at_once = needed[idx] <= np.maximum(AT_ONCE * took, AT_ONCE_US)
    size = np.array([r.calls[i].bytes if r.calls[i].bytes is not None else -1 for i in idx])
    steps = np.asarray(r.steps or [(r.start, r.end)], dtype=float).reshape(-1, 2)
    k = np.maximum(np.searchsorted(steps[:, 0], queue[idx], side="right") - 1, 0)   # the step each was queued in
    done = before(steps.reshape(-1)).reshape(-1, 2)   # the compute before each step's start and end
    total = done[:, 1] - done[:, 0]
    first_q = np.full(len(steps), np.inf)
    np.minimum.at(first_q, k, queue[idx])
    count = np.bincount(k, minlength=len(steps))
    waited = np.bincount(k, weights=at_once, minlength=len(steps))
    votes = []
    for j in np.flatnonzero(count):
        first = (before([first_q[j]])[0] - done[j, 0]) / total[j] if total[j] > 0 else np.nan
        if count[j] >= 2 and len(np.unique(size[k == j])) == 1 and waited[j] >= 0.75 * count[j] and first < FORWARD:
            votes.append("activations")
        elif first >= FORWARD:
            votes.append("gradients")
        else:
            votes.append("unknown")
    return votes
