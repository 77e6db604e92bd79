"""The replay's network at flow level: each collective a flow that pays a fixed phase (latency and the call's own
overhead, not shared) and then a byte phase that shares its links with the other flows in their byte phase,
recomputed at every start and end.

    net = Flows()
    net.add("a", start=0.0, fixed=5.0, alone=100.0, links=[(0, "out"), (1, "in")])   # us; alone: its byte phase
    net.add("b", start=0.0, fixed=5.0, alone=100.0, links=[(0, "out"), (1, "in")])   # on idle links
    net.pop()        # -> (205.0, "a"): two flows on one link move at half speed each
    phases(starts_ends, alone, links)   # the byte phases a recorded timeline implies (the what-if's overhead split)

A flow's demand is stated as the time its bytes take on idle links (`alone`): on every link it crosses it then
uses the link's whole capacity (the model's bottleneck: a ring keeps every hop busy at once). Sharing is
max-min fair in bytes per second (progressive filling: every flow's share of its links grows at one pace until
a link is full; the flows on it are then fixed, and the rest go on), the rule of SimGrid's flow-level model
(Velho et al., ACM TOMACS 23(4), 2013) without its TCP window terms, and what TCP's congestion control converges
to between flows of one RTT. On the kernel network it was measured (benchmarks/whatif_accuracy.py's sharing
check): two Gloo all-reduces on one connection each take twice the time of one alone, as two flows through one
NIC. A flow with no byte phase (alone 0: no model) is its fixed phase only. A flow given a head start (add's
head: a streaming Gloo call on the kernel network, network.links.credit) ends that much early where its links
were idle that long before its byte phase, and by their idle time where they were idle less.
"""

from __future__ import annotations

import bisect
import heapq
import math

import numpy as np

EPS = 1e-9


def shares(flows: dict) -> dict:
    """Max-min fair shares {key: share of each of its links (0, 1]} for {key: links}: progressive filling."""
    sets = list(flows.values())
    if sets and sets[0] and all(v == sets[0] for v in sets):   # the common case: one set of links, n flows on it
        return dict.fromkeys(flows, 1.0 / len(sets))
    out, used = {}, {}
    todo = {k: set(v) for k, v in flows.items() if v}
    out.update({k: 1.0 for k, v in flows.items() if not v})
    while todo:
        count = {}
        for links in todo.values():
            for link in links:
                count[link] = count.get(link, 0) + 1
        link, level = min(((x, (1.0 - used.get(x, 0.0)) / n) for x, n in count.items()), key=lambda x: x[1])
        level = max(level, 0.0)
        for k in [k for k, links in todo.items() if link in links]:
            out[k] = level
            for x in todo.pop(k):
                used[x] = used.get(x, 0.0) + level
    return out


class Flows:
    """Flows in time order (a discrete-event simulation): add() them as the replay starts them, pop() the
    earliest to end. A flow added with a start before the network's clock starts now (said by `late`)."""

    def __init__(self):
        self.now = 0.0
        self.pending = []        # (byte phase start, seq, key): in their fixed phase
        self.active = {}         # key -> [remaining alone-us, links, share (alone-us of progress per us)]
        self.done_at = {}        # key -> end, for flows with no byte phase (and those whose phase ends at once)
        self.started = {}        # key -> its start (its fixed phase's), as taken
        self.idle_since = {}     # link -> when the last flow on it ended (none yet: idle since the start)
        self.late = 0
        self._seq = 0

    def add(self, key, start: float, fixed: float, alone: float, links, head: float = 0.0) -> None:
        """A flow: its fixed phase from `start`, then `alone` us of bytes on `links`; head: us its byte phase
        ends early where its links were all idle for that long before it, up to the time they were idle (the
        kernel network's shaper after idle NICs: network.links.credit, sharing.flow_inputs)."""
        if start < self.now - EPS:
            self.late += 1
            start = self.now
        self.started[key] = start
        t = start + max(0.0, fixed)
        if alone <= 0 or not links:
            self.done_at[key] = t
            return
        self._seq += 1
        heapq.heappush(self.pending, (t, self._seq, key, float(alone), tuple(links), max(0.0, head)))

    def __len__(self) -> int:
        return len(self.pending) + len(self.active) + len(self.done_at)

    def pop(self):
        """-> (end, key) of the flow that ends first, or None when none is left."""
        while True:
            finish = self._next_finish()
            nxt = self.pending[0][0] if self.pending else math.inf
            if self.done_at:
                key = min(self.done_at, key=self.done_at.get)
                t = self.done_at[key]
                if t <= min(nxt, finish[0] if finish else math.inf) + EPS:
                    del self.done_at[key]
                    self.now = max(self.now, t)
                    return t, key
            if finish is None and not self.pending:
                return None
            if finish is not None and finish[0] <= nxt + EPS:
                t, key = finish
                self._advance(t)
                for link in self.active.pop(key)[1]:
                    self.idle_since[link] = t
                self._share()
                return t, key
            t, _, key, alone, links, head = heapq.heappop(self.pending)
            self._advance(t)
            if head > 0:   # what its links' idle time lets go at once: none where a flow is on one of them
                busy = {x for v in self.active.values() for x in v[1]}
                idle = min((math.inf if x not in self.idle_since else t - self.idle_since[x]) if x not in busy
                           else 0.0 for x in links)
                alone = max(0.0, alone - min(head, idle))
            self.active[key] = [alone, links, 0.0]
            self._share()

    def _share(self) -> None:
        """Each active flow's share, kept beside it (shares: max-min, 1/n where all cross the same links)."""
        got = shares({k: v[1] for k, v in self.active.items()})
        for k, v in self.active.items():
            v[2] = got[k]

    def _next_finish(self):
        best = None
        for k, (left, _, r) in self.active.items():
            t = self.now + left / r if r > 0 else math.inf
            if best is None or t < best[0]:
                best = (t, k)
        return best

    def _advance(self, t: float) -> None:
        dt = max(0.0, t - self.now)
        for v in self.active.values():
            v[0] = max(0.0, v[0] - dt * v[2])
        self.now = max(self.now, t)


def phases(ends, limits, alone, links, rounds: int = 8) -> list[float]:
    """The byte phase each recorded flow had, as the sharing of its links says: flow i's byte phase ended at
    ends[i] (its recorded end) and moved alone[i] us of idle-link work, at the share it got from the flows whose
    byte phases overlapped it. Solved by fixed point (start from each alone; place every phase before its end;
    recompute the shares over time; integrate back from each end until its work is done), each phase at most
    limits[i] (the recorded call: a flow faster than its model keeps its whole time). -> per flow, us.
    Where the flows' link sets are equal or disjoint (each flow shares its links only with flows on the same
    ones: a share is 1 / the flows in its set), a round is computed with numpy (_round_uniform), else by
    progressive filling per segment (_round)."""
    n = len(ends)
    dur = [min(a, lim) for a, lim in zip(alone, limits)]
    live = [i for i in range(n) if alone[i] > 0 and links[i]]
    group = _uniform([links[i] for i in live])
    for _ in range(rounds):
        if group is not None:
            new = _round_uniform(ends, limits, alone, dur, live, group)
        else:
            new = _round(ends, limits, alone, links, dur, live)
        if max((abs(a - b) for a, b in zip(new, dur)), default=0.0) < 1e-3:
            return new
        dur = new
    return dur


def _round(ends, limits, alone, links, dur, live) -> list[float]:
    """One round of phases' fixed point, by progressive filling on every segment between the phases' cuts."""
    cuts = sorted({t for i in live for t in (ends[i] - dur[i], ends[i])})
    seg_share, seg_live = [], []   # per segment [cuts[j], cuts[j+1]): {flow: share}, the flows in it
    order = sorted(live, key=lambda i: ends[i] - dur[i])
    at, active = 0, set()
    for j in range(len(cuts) - 1):
        t0 = cuts[j]
        while at < len(order) and ends[order[at]] - dur[order[at]] <= t0 + EPS:
            active.add(order[at])
            at += 1
        active = {i for i in active if ends[i] > t0 + EPS}
        seg_share.append(shares({i: links[i] for i in active}) if active else {})
        seg_live.append(frozenset(active))
    new = list(dur)
    for i in live:
        need, t, s = alone[i], ends[i], 1.0
        j = _segment(cuts, ends[i]) - 1
        while need > EPS and j >= 0 and t > ends[i] - limits[i] + EPS:
            s = seg_share[j].get(i)
            if s is None:   # outside its phase so far (the phase grows): its share beside the flows there
                s = shares({k: links[k] for k in seg_live[j] | {i}})[i]
            span = min(t - cuts[j], t - (ends[i] - limits[i]))
            if s * span >= need:
                t -= need / s
                need = 0.0
                break
            need -= s * span
            t -= span
            j -= 1
        new[i] = min(limits[i], ends[i] - t + need / s)   # before the first segment: at the share there
    return new


def _uniform(sets):
    """Per flow, the index of its link set if every two sets are equal or disjoint (max-min sharing then
    gives each flow 1 / the flows active on its set), else None."""
    distinct = {}
    group = [distinct.setdefault(frozenset(x), len(distinct)) for x in sets]
    if sum(len(x) for x in distinct) != len(frozenset().union(*distinct)):
        return None
    return np.asarray(group, dtype=np.int64)


def _round_uniform(ends, limits, alone, dur, live, group) -> list[float]:
    """_round where the link sets are equal or disjoint (_uniform's group): the same cuts, shares and
    integration back from each end, the same float operations in the same order, on arrays of all flows at
    once (one step back per segment for every flow still short of its work)."""
    new = list(dur)
    if not live:
        return new
    idx = np.asarray(live)
    end = np.asarray(ends, dtype=float)[idx]
    lim = np.asarray(limits, dtype=float)[idx]
    start = end - np.asarray(dur, dtype=float)[idx]
    cuts = np.unique(np.concatenate((start, end)))
    x = cuts + EPS   # flow i is in segment j if start <= x[j] < end: as ranks, rs <= j < re
    rs, re = np.searchsorted(x, start, "left"), np.searchsorted(x, end, "left")
    base = len(cuts) + 1
    ks, ke = np.sort(group * base + rs), np.sort(group * base + re)   # each set's flows, in rank order

    def count(g, j):   # the flows of set g in segment j
        lo = g * base
        return (np.searchsorted(ks, lo + j, "right") - np.searchsorted(ks, lo, "left")
                - np.searchsorted(ke, lo + j, "right") + np.searchsorted(ke, lo, "left"))

    need = np.asarray(alone, dtype=float)[idx]
    t, s = end.copy(), np.ones(len(idx))
    j = np.searchsorted(cuts, end - EPS, "left") - 1
    floor = end - lim
    k = np.flatnonzero((need > EPS) & (j >= 0) & (t > floor + EPS))
    while len(k):
        jk, tk, nk = j[k], t[k], need[k]
        inside = (rs[k] <= jk) & (re[k] > jk)
        sk = 1.0 / (count(group[k], jk) + np.where(inside, 0, 1))   # outside its phase so far: beside them
        span = np.minimum(tk - cuts[jk], tk - floor[k])
        done = sk * span >= nk
        t[k] = np.where(done, tk - nk / sk, tk - span)
        need[k] = np.where(done, 0.0, nk - sk * span)
        j[k] = jk - 1
        s[k] = sk
        k = k[~done]
        k = k[(need[k] > EPS) & (j[k] >= 0) & (t[k] > floor[k] + EPS)]
    got = np.minimum(lim, end - t + need / s)
    for i, v in zip(live, got.tolist()):
        new[i] = v
    return new


def _segment(cuts, t) -> int:
    return bisect.bisect_left(cuts, t - EPS) if cuts else 0
