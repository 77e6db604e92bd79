"""Each collective of a scenario as a flow (flows.py): its fixed phase and its byte phase on the scenario's links,
with the call's own overhead taken apart from the time it spent sharing a busy NIC when it was recorded.

    net = flow_inputs(g0, g, origin, pricer)   # per set of g: (fixed us, byte phase alone us, links)

A recorded transfer (graph.py: a matched set's shortest member) is split by the model at the measured network:
fixed (latency, reduction) + byte phase + the call's own excess. The byte phase it had is what the sharing of
its links with the recorded flows beside it made it (flows.phases: each phase ends where the transfer ended, its
work the model's time on idle links): the excess is what is left. A call that shared no link keeps its own; one
that shared takes its kind's (op, group, bytes) typical excess among the calls that ran alone, else the least
its kind shows (TCP serves two flows of one connection unevenly: what the sharing model cannot place is not
the call's), and a smaller call that ended with a bigger one on its links no more than the bigger one's kind
(first in first out on one connection: recorded() has the CNN job's measurement). What the excess does in a scenario depends on the network it was measured on (whatif's `excess`):
- "fixed" (the default): it is the call's software's own time, kept as measured, a fixed phase before the bytes.
  On the pacer (network.emulate, which moves bytes at exactly its rate) it is: the BucketedDDP job at 1/4 the
  bandwidth is predicted within 10% so, 50% above with "bytes".
- "bytes": it moves with the call's bytes, the byte phase alone the model's times (1 + excess / the measured
  model's byte phase): TCP through HTB-shaped NICs (the kernel network).
A transfer faster than its model on idle links: with "fixed" the model scaled by the ratio (as pricing.reprice);
with "bytes" faster by the same time, as HTB's burst makes it (1 ms of the rate sent at once by a NIC that was
idle, network.kernel._burst: FSDP2's reduce-scatters ran 0.47 ms under their bytes at 10 MB/s, 0.61 at 40).
On 2 ranks a Gloo all-gather's later member waits for a handshake (pricing.HANDSHAKE): where the scenario keeps
it, kept_handshakes prices it (half the bytes' time moves, the rest is fixed); where it does not,
without_handshakes drops it. FSDP2's x4 step from a 10 MB/s recording (benchmarks/whatif_accuracy.py --network
kernel, predicted again): 17.5% high with neither, 12.0% with the handshake priced, 7.1% with the burst too.
"""

from __future__ import annotations

from dataclasses import replace

from commlib.profiling.replay.flows import phases

EXCESS = ("fixed", "bytes")   # what a call's excess over its model does in a scenario (flow_inputs)
# a 2-rank Gloo all-gather paid its handshake (pricing.HANDSHAKE) where its later member ended at least this share
# of its bytes' time after the other (issue 49's FSDP2 recordings: 0.41-0.47 at 10 MB/s, 0.13-0.36 at 40 MB/s;
# 0-0.06 where both ranks arrived together, their notices crossing before any data)
PAID = 0.1
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
    pairs = _overlaps(ends, g0.transfer, used)
    shared = {s for pair in pairs for s in pair}
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
    # first in first out: a smaller call that ended with a bigger one beside it on a link (at or after the
    # bigger one's last tenth) waited behind the bigger one's bytes on their connection, not on its own account.
    # It keeps no more than the bigger one's kind shows. DDP's small last bucket on a CNN (83 KiB), queued just
    # before its big one, always ended with it, 63 ms where its bytes took 8: kept as its own overhead, that time
    # moved with the link, and the replay put the step at x0.25 the bandwidth 55% above the run
    # (benchmarks/whatif_accuracy.py, job cnn_batchnorm).
    behind = _behind(pairs, ends, g0.transfer, [_kind(g0, s)[2] or 0 for s in range(len(ends))])
    return [r if r is None or s not in shared else
            (r[0], r[1], min([typical[_kind(g0, s)]] + [typical[_kind(g0, t)] for t in behind.get(s, ())]))
            for s, r in enumerate(out)]


def _behind(pairs, ends, durations, sizes) -> dict:
    """{flow: the bigger flows it ended with}, of the pairs that overlap on a link (_overlaps): of the two, it
    carries fewer bytes and ends at or after the other's last tenth."""
    out = {}
    for s, t in pairs:
        for a, b in ((s, t), (t, s)):
            if sizes[a] < sizes[b] and ends[a] >= ends[b] - 0.1 * durations[b]:
                out.setdefault(a, []).append(b)
    return out


def _overlaps(ends, durations, used) -> list:
    """The pairs of flows whose recorded intervals overlap on a link they both load (a sweep in start order)."""
    order = sorted(range(len(ends)), key=lambda s: ends[s] - durations[s])
    out, live = [], []
    for s in order:
        start = ends[s] - durations[s]
        live = [t for t in live if ends[t] > start]
        out += [(s, t) for t in live if set(used[s]) & set(used[t])]
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
    # a set regrouping kept has a number of its own in g: its traced set is the one its first call opened in g0
    traced = {id(g0.ranks[m[0][0]].calls[m[0][1]]): s for s, m in enumerate(g0.sets)} if g is not g0 else None
    for s, members in enumerate(g.sets):
        p0, i0 = members[0]
        c = g.ranks[p0].calls[i0]
        old, new, codec, size = pricer.parts(c)
        pricer.priced += new is not None
        pricer.kept += new is None
        if g.transfer[s] is not None:
            d, r = g.transfer[s], rec[s if traced is None else traced[id(c)]]
        else:   # a regrouped bucket: the traced sets it replaces, their overhead per byte times its bytes
            d, r = None, _regrouped(g0, origin[s], rec, c.bytes or 0)
        if new is None:   # no model in the scenario: its measured time (a new bucket: none measured, none)
            net.append(((d or 0.0) + codec, 0.0, ()))
            continue
        fixed, bw = new[0] * 1e6, new[1] * 1e6
        if pricer.m is not None and r is None and d is not None:   # no model of it as measured: keep its time
            net.append((d + codec, 0.0, ()))
            continue
        # its traced overhead over the model, less a 2-rank handshake that a larger ring does not pay
        over = 0.0 if r is None or (r[2] > 0 and pricer.handshake_dropped(c)) else r[2]
        ratio = pricer.measured_ratio(c) if r is not None and old is not None and d is not None else None
        if ratio is not None:   # a small call: its own time (no sharing) moved as its size's calls measured
            own = (old[0] + old[1]) * 1e6
            total = (own + over if over >= 0 else own * (1 + over)) * ratio
            bw = min(bw, total)   # the model's bytes at the new rate, within it; the rest is the steps' wake-ups
            fixed, pricer.measured = total - bw, pricer.measured + 1
        elif r is not None:
            if over < 0 and excess == "bytes" and old is not None:   # faster by a fixed time (the shaper's burst)
                less = -over * (old[0] + old[1]) * 1e6   # off the fixed phase first, then the bytes
                fixed, bw, over = max(0.0, fixed - less), max(0.0, bw - max(0.0, less - fixed)), 0.0
            if over < 0:   # faster than its model: the model scaled by the ratio, no overhead
                fixed, bw, over = fixed * (1 + over), bw * (1 + over), 0.0
            if excess == "bytes" and old is not None and old[1] > 0 and d is not None:   # moves with the bytes
                bw *= 1 + over / (old[1] * 1e6)
            else:   # a regrouped bucket (its traced calls' overhead per byte), or no byte phase: kept as is
                fixed += over
        used = links(_ranks(g, members), size or len(members), pricer.strides.get(c.group, 1))
        # a streaming call's first packet (a small call's steps are set by its wake-ups: measured_ratio)
        head = pricer.head_start(c) * 1e6 if r is not None and ratio is None else 0.0
        net.append((fixed + codec, bw, used, head) if head else (fixed + codec, bw, used))
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


def kept_handshakes(g, pricer):
    """g with each set that paid a handshake the scenario pays too (pricing.Pricer.handshake on a group of the
    size it was traced on; PAID: its later member ended well after the other) split into what both members move
    and what the later one waits for: its transfer the earlier member's (from the last arrival), the later
    member's residual the handshake, priced in the scenario (graph.Graph.priced_resid: not scaled again). On 2
    ranks the later member waits for its peer's second half, sent once its own data is through
    (pricing.HANDSHAKE: half the bytes' time): measured 5.9 ms after the other at 10 MB/s and 0.73 ms at 40 (13.8
    and 3.4 ms of bytes), so the handshake's share moves with the bytes and what is left of it is fixed."""
    sets, transfer, resid = [], list(g.transfer), {}
    for s, members in enumerate(g.sets):
        c = g.ranks[members[0][0]].calls[members[0][1]]
        paid = pricer.handshake(c) if len(members) == 2 else None
        if paid is None:   # most sets: nothing to price, and no parts() looked up
            continue
        old, new, _, size = pricer.parts(c)
        # how long after the last arrival each member ended: the transfer + its residual (graph.build)
        ends = [g.transfer[s] + g.ranks[p].resid[i] for p, i in members]
        tail = max(ends) - min(ends)
        if size != paid[1] or old is None or new is None or tail < PAID * old[1] * 1e6:   # arrived together
            continue
        transfer[s] = max(0.0, min(ends))
        held = max(0.0, tail + paid[3] * (new[1] - old[1]) * 1e6)
        for (p, i), e in zip(members, ends):
            resid[p, i] = held if e == max(ends) and e != min(ends) else min(ends) - transfer[s]
        sets.append(s)
    if not sets:
        return g
    ranks = [replace(r, resid=[resid.get((p, i), x) for i, x in enumerate(r.resid)]) for p, r in enumerate(g.ranks)]
    return replace(g, ranks=ranks, transfer=transfer, priced_resid=frozenset(sets))
