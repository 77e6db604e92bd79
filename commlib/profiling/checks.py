"""What a job's traces cannot all be, as records that report/words.py says in words.

    found = unmatched(ranks)            # calls of a group that have no match on a peer: a hung job's trace
    fast = too_fast(calls)              # bytes moved faster than any link: a size field that is wrong
    notes = doubts(ranks, world)        # every note that makes the traces (and a replay of them) doubtful

(NCCL kernels overlapping on one stream, which no GPU runs so, are read/streams.py's stream_overlaps, a reader
note.) doubts() is what diagnose and whatif both say about traces they cannot trust: the reader's notes (kernels
that overlap on one stream, times from the CPU only, groups or bytes not known), ranks missing, late starts of
tracing, calls of no known group, unmatched calls, impossible speeds. Each is a record {kind, ...}: diagnose
reports them as its notes; whatif carries the same records beside its replay, said in the same words.

unmatched is chapter 10's question asked of a trace: every rank of a process group calls its collectives in
the same order with the same op and size (torch's ProcessGroupWrapper checks exactly this under
TORCH_DISTRIBUTED_DEBUG=DETAIL: op type, sequence number, dtypes, devices and shapes), so a rank with fewer calls
than its peers stopped, and a call whose op or size differs from its peers' is one NCCL would wait on forever.
"""

from __future__ import annotations

from commlib import cost
from commlib.profiling.groups import UNEVEN
from commlib.profiling.model import bus_factor
from commlib.profiling.stragglers import find

P2P = ("send", "recv", "send_recv")
MAX_BUSBW_GBPS = 1e5   # 100 TB/s: over 50x any link built (NVLink 5 moves 1.8 TB/s per GPU)


def unmatched(ranks, members: dict | None = None) -> list[dict]:
    """Per process group whose ranks' call sequences differ, records of kind "unmatched": {case "differs", group,
    call (its index), seen [{rank, op, bytes}]} for the first call whose op or bytes differ across ranks, and
    {case "fewer", group, short, most, first {op, bytes}, behind [{rank, calls}], longest} where ranks have
    fewer calls than their peers. members: {group: ranks} as pg_config lists them (a listed rank with no call
    is missing)."""
    per = {}
    for r in ranks:
        for c in r.calls:
            if c.op not in P2P and c.group is not None:
                per.setdefault(c.group, {}).setdefault(r.rank, []).append(c)
    loaded = {r.rank for r in ranks}
    out = []
    for group, by_rank in per.items():
        listed = set((members or {}).get(group) or ()) & loaded
        for rank in sorted(listed - set(by_rank)):
            by_rank[rank] = []
        if len(by_rank) < 2:
            continue
        n = {rank: len(cs) for rank, cs in by_rank.items()}
        short = min(n.values())
        for i in range(short):   # the first call whose op or size differs
            seen = {rank: cs[i] for rank, cs in by_rank.items()}
            sizes = {c.bytes for c in seen.values() if c.bytes is not None and c.op not in UNEVEN}
            if len({c.op for c in seen.values()}) > 1 or len(sizes) > 1:
                out.append({"kind": "unmatched", "case": "differs", "group": group, "call": i, "seen": [
                    {"rank": rank, "op": c.op, "bytes": c.bytes} for rank, c in sorted(seen.items())]})
                break
        if len(set(n.values())) > 1:
            most = max(n.values())
            longest = min(rank for rank, k in n.items() if k == most)
            first = by_rank[longest][short]
            out.append({"kind": "unmatched", "case": "fewer", "group": group, "short": short, "most": most, "longest": longest,
                        "first": {"op": first.op, "bytes": first.bytes},
                        "behind": [{"rank": rank, "calls": k} for rank, k in sorted(n.items()) if k < most]})
    return out


def too_fast(calls) -> dict | None:
    """A record {kind "too_fast", calls, rank, op, bytes, duration_us, busbw_GBps, limit_GBps} when calls move
    bytes past MAX_BUSBW_GBPS (the fastest as the example): a size field (In msg nelems, Input Dims) or a
    duration that is not what the job did. calls: rows (rank, op, bytes, duration_us, busbw_GBps)."""
    fast = [c for c in calls if (c["busbw_GBps"] or 0.0) > MAX_BUSBW_GBPS]
    if not fast:
        return None
    c = max(fast, key=lambda c: c["busbw_GBps"])
    return {"kind": "too_fast", "calls": len(fast), "rank": c["rank"], "op": c["op"], "bytes": c["bytes"],
            "duration_us": c["duration_us"], "busbw_GBps": c["busbw_GBps"], "limit_GBps": MAX_BUSBW_GBPS}


def doubts(ranks, world: int, found: dict | None = None, calls=None) -> list[dict]:
    """[{kind, ...}] for what makes these traces (and any replay of them) doubtful, kind in reader ({text}: the
    reader's own note) | ranks_missing {traces, world} | late_start {rank, group, us} | unknown_group {calls} |
    unmatched | too_fast (above). found: stragglers.find's result (computed if None); calls: diagnose's
    rows (else the traces' calls, priced for too_fast here)."""
    out = [{"kind": "reader", "text": n} for r in ranks for n in r.notes]
    if len(ranks) < world:
        out.append({"kind": "ranks_missing", "traces": len(ranks), "world": world})
    found = found if found is not None else find(ranks)
    out += [{"kind": "late_start", **s} for s in found["late_starts"]]
    unknown = sum(1 for r in ranks for c in r.calls if c.group is None)
    if unknown:
        out.append({"kind": "unknown_group", "calls": unknown})
    out += unmatched(ranks, {g.name: list(g.ranks) for r in ranks for g in r.groups if g.ranks})
    fast = too_fast(calls if calls is not None else [_speed(c) for r in ranks for c in r.calls])
    return out + ([fast] if fast else [])


def assumed_dtypes(calls) -> list[dict]:
    """[{kind "dtype_assumed"}] where a call's bytes came from an element count with no dtype in the trace (Gloo,
    tensor lists: 4-byte elements assumed); calls: diagnose's rows."""
    return [{"kind": "dtype_assumed"}] if any(c["dtype"] is None and c["bytes"] for c in calls) else []


def _speed(c) -> dict:
    """A call's row for too_fast: its busbw by nccl-tests' factor, where its size and group are known."""
    op = "sendrecv" if c.op in P2P else c.op
    bus = None
    if c.bytes and c.duration_us > 0 and op in cost.OPS and c.group_size:
        bus = c.bytes / (c.duration_us * 1e-6) / 1e9 * bus_factor(op, c.group_size)
    return {"rank": c.rank, "op": c.op, "bytes": c.bytes, "duration_us": c.duration_us, "busbw_GBps": bus}
