"""What a job's traces cannot all be, said in a note instead of reported as if it were fine.

    notes = unmatched(ranks)            # calls of a group that have no match on a peer: a hung job's trace
    note = too_fast(calls)              # bytes moved faster than any link: a size field that is wrong
    found = doubts(ranks, world)        # every note that makes a replay of the traces doubtful, as records

doubts() is what diagnose and whatif both say about traces they cannot trust: the reader's notes (kernels that
overlap on one stream, times from the CPU only, groups or bytes not known), ranks missing, calls of no known
group, late starts of tracing, unmatched calls, impossible speeds. Each record is {kind, text}: diagnose prints
the texts as its notes; whatif carries the same records, and the same texts, beside its replay.

(NCCL kernels overlapping on one stream, which no GPU runs so, are read/streams.py's stream_overlaps.)

unmatched is chapter 10's question asked of a trace: every rank of a process group calls its collectives in
the same order with the same op and size (torch's ProcessGroupWrapper checks exactly this under
TORCH_DISTRIBUTED_DEBUG=DETAIL: op type, sequence number, dtypes, devices and shapes), so a rank with fewer calls
than its peers stopped, and a call whose op or size differs from its peers' is one NCCL would wait on forever.
"""

from __future__ import annotations

from commlib import cost
from commlib.profiling.groups import UNEVEN
from commlib.profiling.read.reader import printable
from commlib.profiling.stragglers import find

P2P = ("send", "recv", "send_recv")
MAX_BUSBW_GBPS = 1e5   # 100 TB/s: over 50x any link built (NVLink 5 moves 1.8 TB/s per GPU)


def _call(c) -> str:
    return f"{c.op} {c.bytes if c.bytes is not None else '?'} B"


def unmatched(ranks, members: dict | None = None) -> list[str]:
    """One note per process group whose ranks' call sequences differ: a rank with no calls or fewer calls than
    its peers (which calls have no match, on which ranks), or the first call whose op or bytes differ across
    ranks. members: {group: ranks} as the traces' pg_config lists them (a listed rank with no call is missing)."""
    per = {}
    for r in ranks:
        for c in r.calls:
            if c.op not in P2P and c.group is not None:
                per.setdefault(c.group, {}).setdefault(r.rank, []).append(c)
    loaded = {r.rank for r in ranks}
    notes = []
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
                shown = "; ".join(f"rank {rank}: {_call(c)}" for rank, c in sorted(seen.items()))
                notes.append(f"group {printable(group)}: call {i} differs across ranks ({shown}): every rank of a "
                             "group calls the same collectives with the same sizes, so either the job hung there "
                             "(NCCL waits forever on such calls) or the traces do not start at the same call")
                break
        if len(set(n.values())) > 1:
            most = max(n.values())
            longest = min(rank for rank, k in n.items() if k == most)
            extra = by_rank[longest][short:]
            behind = ", ".join(f"rank {rank} ({k})" for rank, k in sorted(n.items()) if k < most)
            notes.append(f"group {printable(group)}: calls {short} to {most - 1} (from {_call(extra[0])}) have no match "
                         f"on {behind}: {most} calls on rank {longest}, fewer there. A rank that stopped calling "
                         "(a hung or crashed job) or a profiler window that ended at another call")
    return notes


def too_fast(calls) -> str | None:
    """A note when a call's busbw is past MAX_BUSBW_GBPS: its size field (In msg nelems, Input Dims) or its
    duration is not what the job did. calls: report rows (rank, op, bytes, duration_us, busbw_GBps)."""
    fast = [c for c in calls if (c["busbw_GBps"] or 0.0) > MAX_BUSBW_GBPS]
    if not fast:
        return None
    c = max(fast, key=lambda c: c["busbw_GBps"])
    return (f"{len(fast)} call(s) move bytes faster than any link ({MAX_BUSBW_GBPS:g} GB/s), e.g. rank {c['rank']} "
            f"{printable(c['op'])} of {c['bytes']} B in {c['duration_us']:.1f} us ({c['busbw_GBps']:.3g} GB/s): "
            "its size field ('In msg nelems' or 'Input Dims') or its 'dur' is not what the job did")


def doubts(ranks, world: int, found: dict | None = None, calls=None) -> list[dict]:
    """[{kind, text}] for what makes these traces (and any replay of them) doubtful, in diagnose's wording:
    kind in reader | ranks_missing | late_start | unknown_group | unmatched | too_fast. found: stragglers.find's
    result (computed if None); calls: diagnose's rows (rank, op, bytes, duration_us, busbw_GBps; else from
    the traces' calls)."""
    out = [{"kind": "reader", "text": n} for r in ranks for n in r.notes]
    if len(ranks) < world:
        out.append({"kind": "ranks_missing", "text": f"{len(ranks)} of {world} ranks' traces: stragglers are found "
                                                     "only among these"})
    found = found if found is not None else find(ranks)
    out += [{"kind": "late_start", "text": f"rank {s['rank']}'s trace starts {s['us'] / 1e3:.2f} ms after its peers "
                                           f"in group {s['group']} began waiting for it: a late start of tracing, "
                                           "not straggling"} for s in found["late_starts"]]
    unknown = sum(1 for r in ranks for c in r.calls if c.group is None)
    if unknown:
        out.append({"kind": "unknown_group", "text": f"the process group of {unknown} call(s) is not known (the trace "
                    "names none, or Gloo's worker threads did not settle it): they are matched with no peer and "
                    "charged no wait"})
    listed = {g.name: list(g.ranks) for r in ranks for g in r.groups if g.ranks}
    out += [{"kind": "unmatched", "text": n} for n in unmatched(ranks, listed)]
    fast = too_fast(calls if calls is not None else [_speed(c) for r in ranks for c in r.calls])
    return out + ([{"kind": "too_fast", "text": fast}] if fast else [])


_FACTORS = {}   # (op, group size) -> nccl-tests' bus factor (cost.bus_factor)


def _speed(c) -> dict:
    """A call's row for too_fast: its busbw by nccl-tests' factor, where its size and group are known."""
    op = "sendrecv" if c.op in P2P else c.op
    bus = None
    if c.bytes and c.duration_us > 0 and op in cost.OPS and c.group_size:
        if (op, c.group_size) not in _FACTORS:   # 10^5 calls of a few kinds: each factor checked once
            _FACTORS[op, c.group_size] = cost.bus_factor(op, c.group_size)
        bus = c.bytes / (c.duration_us * 1e-6) / 1e9 * _FACTORS[op, c.group_size]
    return {"rank": c.rank, "op": c.op, "bytes": c.bytes, "duration_us": c.duration_us, "busbw_GBps": bus}
