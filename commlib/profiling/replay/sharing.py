"""Each collective of a scenario as a flow (flows.py): its fixed phase and its byte phase on the scenario's links,
with the call's own overhead taken apart from the time it spent sharing a busy NIC when it was recorded.

    net = flow_inputs(g0, g, origin, pricer)   # per set of g: (fixed us, byte phase alone us, links)

A recorded transfer (graph.py: a matched set's shortest member) is split by the model at the measured network:
fixed (latency, reduction) + byte phase + the call's own excess. The byte phase it had is what the sharing of
its links with the recorded flows beside it made it (flows.phases: each phase ends where the transfer ended, its
work the model's time on idle links): the excess is what is left. A call that shared no link keeps its own; one
that shared takes its kind's (op, group, bytes) typical excess among the calls that ran alone, else the least
its kind shows (TCP serves two flows of one connection unevenly: what the sharing model cannot place is not
the call's). What the excess does in a scenario depends on the network it was measured on (whatif's `excess`):
- "fixed" (the default): it is the call's software's own time, kept as measured, a fixed phase before the bytes.
  On the pacer (network.emulate, which moves bytes at exactly its rate) it is: the BucketedDDP job at 1/4 the
  bandwidth is predicted within 10% so, 50% above with "bytes".
- "bytes": it moves with the call's bytes, the byte phase alone the model's times (1 + excess / the measured
  model's byte phase). On the kernel network (TCP through HTB-shaped NICs) it does: FSDP2's forward all-gathers
  run 5.3 ms above a 13.8-ms model at 10 MB/s and about 1.5 ms above it at 40 MB/s (on 2 ranks, Gloo's
  handshake, pricing.HANDSHAKE, which a larger ring drops: without_handshakes); "fixed" predicts its x4 step
  24% high, "bytes" 7% (benchmarks/whatif_accuracy.py --network kernel).
A transfer faster than its model on idle links scales with the model either way (as pricing.reprice).
"""

from __future__ import annotations

from dataclasses import replace

from commlib.profiling.replay.flows import phases

EXCESS = ("fixed", "bytes")   # what a call's excess over its model does in a scenario (flow_inputs)
from commlib.profiling.replay.pricing import cached_links


def _ranks(g, members) -> list[int]:
    return [g.ranks[p].rank for p, _ in members]


def _links(t, memo: dict):
    """pricing.cached_links on t, remembered in memo per (ranks, group size, stride): 10^5 sets, a few groups."""
    def get(ranks, size, stride):
        key = (tuple(ranks), size, stride)
        if key not in memo:
            memo[key] = cached_links(t, ranks, size, stride)
        return memo[key]
    return get


def recorded(g0, pricer) -> list:
    """Per traced set: (fixed us, byte phase us, overhead us) at the measured network, or None (no model); a
    transfer faster than its model alone: (fixed, its model's byte phase, measured / model - 1, below 0)."""
    info, ends, limits, alone, used = [], [], [], [], []
    links = _links(pricer.m, {})
    for s, members in enumerate(g0.sets):
        p0, i0 = members[0]
        c = g0.ranks[p0].calls[i0]
        old, _, _, _ = pricer.parts(c)
        last = max(g0.ranks[p].calls[i].start_us - g0.ranks[p].offset for p, i in members)
        d = g0.transfer[s]
        info.append(old)
        ends.append(last + d)
        if old is None or pricer.m is None:
            limits.append(d), alone.append(0.0), used.append(())
            continue
        fixed, bw = old[0] * 1e6, old[1] * 1e6
        limits.append(max(0.0, d - fixed))
        alone.append(bw)
        used.append(links(_ranks(g0, members), c.group_size or len(members),
                          pricer.strides.get(c.group, 1)))
    got = phases(ends, limits, alone, used)
    out, kinds = [], {}
    shared = _overlapping(ends, [g0.transfer[s] for s in range(len(ends))], used)
    for s, old in enumerate(info):
        if old is None or pricer.m is None:
            out.append(None)
            continue
        fixed, bw, d = old[0] * 1e6, old[1] * 1e6, g0.transfer[s]
        # faster than its model on idle links: no overhead, the ratio (negative: a share of the model's time)
        out.append((fixed, bw, d / (fixed + bw) - 1.0) if d < fixed + bw else (fixed, got[s], d - fixed - got[s]))
        kinds.setdefault(_kind(g0, s), ([], []))[s in shared].append(out[-1][2])
    # a call that shared no link keeps its own overhead. One that shared: the sharing model places its bytes,
    # but TCP serves two flows of one connection unevenly, so what is left is not all its own: it takes what
    # its kind shows alone (the median of those that ran alone), else the least its kind shows
    typical = {k: (sorted(a)[len(a) // 2] if a else min(b)) for k, (a, b) in kinds.items()}
    return [r if r is None or s not in shared else (r[0], r[1], typical[_kind(g0, s)]) for s, r in enumerate(out)]


def _overlapping(ends, durations, used) -> set:
    """The flows whose recorded interval overlaps another's on a link they both load."""
    order = sorted(range(len(ends)), key=lambda s: ends[s] - durations[s])
    out, live = set(), []
    for s in order:
        start = ends[s] - durations[s]
        live = [t for t in live if ends[t] > start]
        for t in live:
            if set(used[s]) & set(used[t]):
                out.update((s, t))
        live.append(s)
    return out


def _kind(g, s) -> tuple:
    p, i = g.sets[s][0]
    c = g.ranks[p].calls[i]
    return c.op, c.group, c.bytes


def flow_inputs(g0, g, origin, pricer, excess: str = "fixed") -> list:
    """Per set of g (the scenario's graph: g0's sets, or regrouped buckets, whose traced calls origin names):
    (fixed us, alone us, links) for graph.replay's net. excess "fixed": a call's excess stays as measured (its
    software's own time); "bytes": it moves with the call's bytes (module docstring)."""
    rec = recorded(g0, pricer)
    net, links = [], _links(pricer.t, {})
    for s, members in enumerate(g.sets):
        p0, i0 = members[0]
        c = g.ranks[p0].calls[i0]
        old, new, codec, size = pricer.parts(c)
        pricer.priced += new is not None
        pricer.kept += new is None
        if g.transfer[s] is not None:
            d, r = g.transfer[s], rec[s]
        else:   # a regrouped bucket: the traced sets it replaces, their overhead per byte times its bytes
            d, r = None, _regrouped(g0, origin[s], rec, c.bytes or 0)
        if new is None:   # no model in the scenario: its measured time (a new bucket: none measured, none)
            net.append(((d or 0.0) + codec, 0.0, ()))
            continue
        fixed, bw = new[0] * 1e6, new[1] * 1e6
        if pricer.m is not None and r is None and d is not None:   # no model of it as measured: keep its time
            net.append((d + codec, 0.0, ()))
            continue
        if r is not None:
            _, _, over = r
            if over > 0 and pricer.handshake_dropped(c):   # a 2-rank handshake a larger ring does not pay
                over = 0.0
            if over < 0:   # faster than its model: the model scaled by the ratio, no overhead
                fixed, bw, over = fixed * (1 + over), bw * (1 + over), 0.0
            if excess == "bytes" and old is not None and old[1] > 0 and d is not None:   # moves with the bytes
                bw *= 1 + over / (old[1] * 1e6)
            else:   # a regrouped bucket (its traced calls' overhead per byte), or no byte phase: kept as is
                fixed += over
        used = links(_ranks(g, members), size or len(members), pricer.strides.get(c.group, 1))
        net.append((fixed + codec, bw, used))
    return net


def _regrouped(g0, olds, rec, nbytes: int):
    """A new bucket's (fixed, byte phase, overhead) as measured: its traced calls' overhead per byte."""
    sets = [s for s in {g0.ranks[q].member[j] for q, j in olds if g0.ranks[q].member[j] >= 0} if rec[s] is not None]
    above = [s for s in sets if rec[s][2] >= 0]
    size = sum(g0.ranks[g0.sets[s][0][0]].calls[g0.sets[s][0][1]].bytes or 0 for s in above)
    if above and size:   # their overhead per byte
        return 0.0, 0.0, sum(rec[s][2] for s in above) / size * nbytes
    if sets:             # all faster than their model: their mean ratio
        return 0.0, 0.0, sum(rec[s][2] for s in sets) / len(sets)
    return None


def without_handshakes(g, pricer):
    """g with every member of a call whose handshake the scenario does not pay (pricing.Pricer.handshake_dropped)
    ending with its set: on 2 ranks a Gloo all-gather's later rank ends after the earlier one by what its
    handshake held back (issue 49: about 6 ms of 13.8 at 10 MB/s, in every recording), which a larger ring, whose
    members end together, does not -> (graph, sets dropped)."""
    drop = [s for s, m in enumerate(g.sets) if pricer.handshake_dropped(g.ranks[m[0][0]].calls[m[0][1]])]
    if not drop:
        return g, 0
    ranks = [replace(r, resid=list(r.resid)) for r in g.ranks]
    for s in drop:
        for p, i in g.sets[s]:
            ranks[p].resid[i] = 0.0
    return replace(g, ranks=ranks), len(drop)
