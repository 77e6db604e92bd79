"""Stragglers by root cause: who was late at a collective, and whether it was late on its own account or because
it was itself waiting, in another group, for someone else.

    found = find(ranks)     # ranks: traces.load(...) -> {"stragglers", "waits", "late_starts", "spread_us"}

A collective ends on every member at about the same moment, so each member's duration, read back from its end,
is its arrival: the shortest member arrived last (L), each other member c waited w_c = its duration - L's, and the
shortest is the transfer. No clocks are compared between ranks. These are the cross-rank edges of the replay's
dependency graph (graph.py builds its matched sets with the same `matched`).

Root cause, along the wait chain: peer c waited the interval [L.start - w_c, L.start] of L's own clock. Whatever L
did in that interval made it late. The parts of it where L was itself waiting in another call (the first w of
that call, for a rank R in group h) are inherited, charged to (R, h) in L's `behind`; the part before L's trace
began is a late start of tracing (nothing is known of it); the rest is L's own delay (compute, sleep, anything
but waiting). Stragglers are ranked by own delay; R's own lateness in h is itself split the same way, so the
chain can be followed back to its root.

Noise: a symmetric job has a last arriver at every call too, late by the job's own call-to-call spread. A root
(rank, group) is named only if the own delay it caused, per peer, exceeds its group's mean per rank by more than
NOISE x s x sqrt(calls), s the median own lateness (not inherited) of the job's calls, in every group (a group
may have few), where another rank came last: a sum of symmetric noise grows as sqrt(calls), a real straggler's
delay as the calls. A rank that mostly inherited its delay is named when a rank it waited for is. "spread_us":
the median own lateness of each group's calls.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from commlib.cost.intervals import length, union

P2P = ("send", "recv", "send_recv")
NOISE = 4.0   # about 2.7 standard deviations of the sum of a pair's symmetric arrival noise


def matched(ranks) -> list[list]:
    """Collectives matched across ranks: the i-th call of a process group on every rank that has it (point-
    to-point calls left out: they do not end together across a group). Matching stops at the first index
    where the ranks disagree on the op."""
    per = {}
    for r in ranks:
        for c in r.calls:
            if c.op not in P2P and c.group is not None:   # a call of an unknown group has no known peers
                per.setdefault(c.group, {}).setdefault(r.rank, []).append(c)
    out = []
    for by_rank in per.values():
        if len(by_rank) < 2:
            continue
        for i in range(min(len(v) for v in by_rank.values())):
            calls = [v[i] for v in by_rank.values()]
            if len({c.op for c in calls}) > 1:
                break
            out.append(calls)
    return out


def find(ranks, min_share: float = 0.05, noise: float = NOISE) -> dict:
    """-> {"stragglers": [{rank, group, group_size, delay_us, own_us, behind [{rank, group, us}], calls, root,
    chain [{rank, group, root}]}], roots first, then by own delay (root: late mostly on its own account; chain: whom it
    waited for, hop by hop, back to a root), "waits": {(rank, start_us): (wait_us, late rank)} per matched call,
    "late_starts": [{rank, group, us}], "spread_us": {group: median own lateness of its calls}, "unnamed": [the
    (rank, group) entries the noise test left out]}.
    delay_us: the time its peers waited for it (a union on each peer's clock, summed over peers), never more
    than their communication time; named when at least min_share of all communication time and above noise."""
    sets = matched(ranks)
    waits, mine = {}, {}
    for calls in sets:
        last = min(calls, key=lambda c: c.duration_us)
        for c in calls:
            w = c.duration_us - last.duration_us
            waits[(c.rank, c.start_us)] = (w, last.rank)
            if w > 0:   # the first w of its call: it had arrived and waited for the last one
                mine.setdefault(c.rank, []).append((c.start_us, c.start_us + w, last.rank, last.group))
    # where each rank's trace begins: its first event, or its first ProfilerStep (a rank idle at the start of
    # its recorded step, asleep say, has no event there but is traced)
    first = {r.rank: min([r.wall[0]] + [s for s, _ in (getattr(r, "steps", None) or [])[:1]]) for r in ranks}
    mine = {r: _Waits(spans) for r, spans in mine.items()}
    acc, count, size, ended, skews = {}, {}, {}, {}, {}
    for calls in sets:   # a group's sets in order (matched)
        last = min(calls, key=lambda c: c.duration_us)
        key = (last.rank, last.group)
        count[key] = count.get(key, 0) + 1
        size[key] = last.group_size
        start = first.get(last.rank, -math.inf)
        since = max(ended.get((last.rank, last.group), start), start)
        own = 0.0   # how late the last rank was on its own account, at this call (for the noise test)
        for c in calls:
            w = c.duration_us - last.duration_us
            if w > 0:
                explained = _charge(acc.setdefault(key, {}).setdefault(c.rank, _Peer()), c, _Late(last, start), w,
                                    mine.get(last.rank, _Waits([])), since)
                own = max(own, w - explained)
        skews.setdefault(last.group, []).append((last.rank, own))
        for c in calls:
            ended[(c.rank, c.group)] = c.end_us
    rows = {key: _total(peers) for key, peers in acc.items()}
    spread = {g: float(np.median([x for _, x in v])) for g, v in skews.items()}
    comm = sum(c.duration_us for r in ranks for c in r.calls if c.op not in P2P)
    late_starts, candidates, table = [], {}, {}
    for (rank, group), (delay, own, pre, behind) in rows.items():
        if pre > 0.5 * delay and comm and pre >= min_share * comm:
            late_starts.append({"rank": rank, "group": group, "us": pre})
        row = {"rank": rank, "group": group, "group_size": size[(rank, group)], "delay_us": delay - pre,
               "own_us": own, "behind": [{"rank": r, "group": g, "us": us} for (r, g), us in
                                         sorted(behind.items(), key=lambda kv: -kv[1])], "calls": count[(rank, group)]}
        table[(rank, group)] = row
        if comm and row["delay_us"] > 0 and row["delay_us"] >= min_share * comm:
            candidates[(rank, group)] = row
    # a root is named on its own delay, above the noise; a rank that mostly inherited its delay is named when one
    # it waited for is (the chain is followed from its root, however many hops)
    keys = {k for k in candidates if _above_noise(k, rows, size, skews, noise)}
    while True:
        more = {k for k, row in candidates.items() if k not in keys and row["own_us"] < row["delay_us"] - row["own_us"]
                and any((b["rank"], b["group"]) in keys for b in row["behind"])}
        if not more:
            break
        keys |= more
    for row in table.values():
        row["root"] = row["own_us"] >= row["delay_us"] - row["own_us"]
    for row in table.values():
        row["chain"] = _chain(row, table)
    named = sorted((candidates[k] for k in keys), key=lambda s: (not s["root"], -s["own_us"], -s["delay_us"]))
    unnamed = [row for k, row in candidates.items() if k not in keys]
    return {"stragglers": named, "waits": waits, "late_starts": sorted(late_starts, key=lambda s: -s["us"]),
            "spread_us": spread, "unnamed": sorted(unnamed, key=lambda s: -s["delay_us"])}


def _chain(row: dict, rows: dict) -> list[dict]:
    """Whom a late rank waited for, hop by hop back to the root: [{rank, group, root}], each hop the one its
    predecessor waited for longest, ending at a rank late on its own account (root True; [] for a root)."""
    out, seen = [], {(row["rank"], row["group"])}
    while not row["root"] and row["behind"]:
        key = (row["behind"][0]["rank"], row["behind"][0]["group"])
        if key in seen:
            break
        seen.add(key)
        row = rows.get(key)
        out.append({"rank": key[0], "group": key[1], "root": row is not None and row["root"]})
        if row is None:
            break
    return out


class _Waits:
    """A rank's own waits (start, end, rank waited for, group), found by the interval they meet (bisect: a job's
    calls are many)."""

    def __init__(self, spans):
        self.spans = sorted(spans)
        self.starts = [s[0] for s in self.spans]
        self.longest = max((s[1] - s[0] for s in self.spans), default=0.0)

    def within(self, lo: float, hi: float):
        k = bisect.bisect_left(self.starts, hi)
        j = bisect.bisect_left(self.starts, lo - self.longest)
        return [s for s in self.spans[j:k] if s[1] > lo]


class _Late:
    """The last arrival of a call, with its rank's trace start."""

    def __init__(self, call, trace_start: float):
        self.start_us, self.trace_start = call.start_us, trace_start


class _Peer:
    """What one peer waited for one late rank in one group: its waits (its clock), and how much of them the late
    rank spent waiting itself (per rank and group it waited for) or before its trace began."""

    def __init__(self):
        self.waited, self.behind, self.pre = [], {}, 0.0


def _charge(peer: _Peer, c, last, w: float, late_waits, since: float) -> float:
    """Peer c waited w for `last`; since: when the two were last in step (the end of their previous call in this
    group, on last's clock) or last's trace began, whichever is later. -> the part of w not last's own delay."""
    hi = last.start_us
    peer.waited.append((c.start_us, c.start_us + w))
    pre = min(w, max(0.0, since - (hi - w))) if since == last.trace_start else 0.0
    peer.pre += pre
    left = w - pre
    # the late rank's own waits since then, latest first: what it lost waiting, up to what it made the peer wait
    for a, b, r, g in sorted(late_waits.within(since, hi), key=lambda s: -s[1]):
        took = min(left, min(b, hi) - max(a, since))
        if took <= 0:
            break
        peer.behind[(r, g)] = peer.behind.get((r, g), 0.0) + took
        left -= took
    return w - left


def _total(peers: dict) -> tuple[float, float, float, dict]:
    """-> (delay, own, before the trace, {(rank, group): inherited}), each summed over the peers."""
    delay = own = pre = 0.0
    behind = {}
    for p in peers.values():
        d = length(union(p.waited))
        inherited = min(d - min(d, p.pre), sum(p.behind.values()))
        delay += d
        pre += min(d, p.pre)
        own += d - min(d, p.pre) - inherited
        for key, us in p.behind.items():
            behind[key] = behind.get(key, 0.0) + us * (inherited / sum(p.behind.values()))
    return delay, max(0.0, own), pre, behind


def _above_noise(key, rows, size, skews, noise: float) -> bool:
    """The own delay this rank caused its group, per peer, above the mean of its peers' by more than the noise:
    NOISE x the job's typical own lateness when another rank came last x sqrt(the group's calls). The mean leaves
    the rank out: with it in, a large delay raised the bar it was measured against (a rank 150 ms late in a
    4-rank job whose calls spread by 4 ms went unnamed)."""
    rank, group = key
    peers = max(1, (size.get(key) or 2) - 1)
    mine = rows[key][1]
    others = [own for (r, g), (_, own, _, _) in rows.items() if g == group and r != rank]
    excess = (mine - sum(others) / peers) / peers
    # the job's own spread: the own lateness of its calls (every group's: a group has few) where another came last
    others = [x for v in skews.values() for r, x in v if r != rank]
    scale = float(np.median(others)) if others else 0.0
    return excess > noise * scale * math.sqrt(len(skews.get(group, [])))
