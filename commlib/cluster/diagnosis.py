"""What went wrong in a failed run, from each rank's Flight Recorder records and the call it waits in.

    diagnose(snapshots, world_size, errors={rank: text}, stuck=[ranks]) ->
        {"kind": "mismatch" | "missing" | "p2p" | "unknown", "ranks": [culprits], "detail": "one sentence"}

In this order:
  1. torch's fingerprint check (Cluster(debug=True): TORCH_DISTRIBUTED_DEBUG=DETAIL) raised "Detected
     mismatch between collectives on ranks" -> mismatch; the culprits differ from the majority. Or
     torch's monitored_barrier said "Ranks 3 failed to pass monitoredBarrier" -> missing.
  2. the Flight Recorder records, aligned per process group by collective sequence number and compared
     with torch's own matcher (torch.distributed.flight_recorder: Op.match, which checks the type, the
     sizes and the dtypes) -> the first number at which ranks disagree (mismatch: the minority are the
     culprits; two ranks that disagree are both named) or at which some members have no record (missing:
     they never entered it);
  3. the call each stuck rank waits in (Gloo does not record send/recv) -> p2p: the ranks left waiting
     in a send or recv; or missing: members of the group of a collective others wait in, not in it.
  4. otherwise unknown.
A snapshot is flight_recorder.snapshot()'s dict, or None for a rank that could not give one (dead).
"""

from __future__ import annotations

import re

_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
           "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool"}
_OPS = {"ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather", "_ALLGATHER_BASE": "all_gather_into_tensor",
        "REDUCE_SCATTER": "reduce_scatter", "_REDUCE_SCATTER_BASE": "reduce_scatter_tensor",
        "ALLTOALL": "all_to_all", "ALLTOALL_BASE": "all_to_all_single", "ALLREDUCE_COALESCED": "all_reduce_coalesced"}
_FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+), "
                          r"OpType=(\w+), TensorShape=\[([^\]]*)\], TensorDtypes=(\w+)")


def _ranks(ranks, verb: str = "") -> str:
    """'rank 2' / 'ranks 0, 1', with the verb agreeing: _ranks([2], 'differ') -> 'rank 2 differs'."""
    ranks = sorted(ranks)
    text = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
    if verb:
        text += " " + (verb if len(ranks) > 1 else {"wait": "waits"}.get(verb, verb + "s"))
    return text


def _group_of(snapshots: dict, ranks, name: str | None = None) -> str:
    """'process group 0 (default_pg)': the named group, or the one the first of `ranks` failed in."""
    for r in ranks:
        snap = snapshots.get(r) or {}
        if name is None and snap.get("failed"):
            name = snap["failed"].get("group")
        table = snap.get("groups", {})
        if name in table:
            return _group(name, table[name][0])
    return _group(name, "") if name else "an unknown process group"


def _dtype(name: str) -> str:
    return _DTYPES.get(name, name.lower())


def describe_record(entry: dict) -> str:
    """'#3 all_reduce [4] float32' from one Flight Recorder entry."""
    op = entry["profiling_name"].split(":", 1)[-1].split(" ")[0]
    sizes = entry.get("input_sizes") or entry.get("output_sizes") or [[]]
    dtypes = entry.get("input_dtypes") or entry.get("output_dtypes") or ["?"]
    return f"#{entry['collective_seq_id']} {op} {list(sizes[0]) if sizes else []} {_dtype(dtypes[0])}"


def _call(entry: dict) -> str:
    """'all_reduce #3 of [4] float32' from one Flight Recorder entry."""
    op = entry["profiling_name"].split(":", 1)[-1].split(" ")[0]
    sizes = entry.get("input_sizes") or entry.get("output_sizes") or [[]]
    dtypes = entry.get("input_dtypes") or entry.get("output_dtypes") or ["?"]
    return f"{op} #{entry['collective_seq_id']} of {list(sizes[0]) if sizes else []} {_dtype(dtypes[0])}"


def _group(name: str, desc: str) -> str:
    return f"process group {name} ({desc})" if desc else f"process group {name}"


def _split(classes: dict) -> tuple[list[int], list[int]]:
    """{signature: [ranks]} -> (culprits, majority): the ranks outside the one largest class; when no
    class is larger than every other (two ranks that disagree), every rank is a suspect."""
    sizes = sorted((len(r) for r in classes.values()), reverse=True)
    if len(sizes) > 1 and sizes[0] == sizes[1]:
        return sorted(r for ranks in classes.values() for r in ranks), []
    majority = max(classes.values(), key=len)
    return sorted(r for ranks in classes.values() if ranks is not majority for r in ranks), sorted(majority)


def _sides(classes: dict, describe) -> str:
    culprits, majority = _split(classes)
    parts = [f"{_ranks(ranks)} called {describe(key)}"
             for key, ranks in sorted(classes.items(), key=lambda kv: (sorted(kv[1]) == majority, min(kv[1])))]
    return (", where " if majority else "; ").join(parts)


# ---------------------------------------------------------------------------- 1. fingerprints
def from_fingerprints(errors: dict, snapshots: dict | None = None) -> dict | None:
    """torch's DETAIL check: each rank's error names itself and one rank that differs from it."""
    prints = {}
    for text in errors.values():
        if "Detected mismatch between collectives" not in str(text):
            continue
        for rank, seq, op, shape, dtype in _FINGERPRINT.findall(str(text)):
            prints[int(rank)] = (int(seq) + 1, _OPS.get(op, op.lower()), shape, dtype)  # torch counts from 0 here
    if len(set(prints.values())) < 2:
        return None
    classes: dict = {}
    for rank, key in prints.items():
        classes.setdefault(key, []).append(rank)
    culprits, _ = _split(classes)
    sides = _sides(classes, lambda k: f"{k[1]} #{k[0]} of [{k[2]}] {_dtype(k[3])}")
    where = _group_of(snapshots or {}, culprits)
    detail = (f"mismatch in {where}: {sides} (caught before it ran by torch's fingerprint check, "
              f"TORCH_DISTRIBUTED_DEBUG=DETAIL).")
    return {"kind": "mismatch", "ranks": culprits, "detail": detail}


_MONITORED = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")


def from_monitored_barrier(errors: dict, world_size: int) -> dict | None:
    """torch's monitored_barrier (Gloo) names the ranks that did not reach it in time."""
    for text in errors.values():
        m = _MONITORED.search(str(text))
        if m:
            absent = sorted({int(r) for r in m.group(1).replace(" ", "").split(",") if r})
            inside = [r for r in range(world_size) if r not in absent]
            return {"kind": "missing", "ranks": absent,
                    "detail": f"missing: {_ranks(absent)} never reached the monitored_barrier that "
                              f"{_ranks(inside)} reached (torch's monitored_barrier names them), "
                              f"in the group it was called on."}
    return None


# --------------------------------------------------------------------------------- 2. records
def _matcher(members: dict):
    """torch's own rule for 'same collective' (Op.match), or a plain comparison if it cannot be used."""
    try:
        from torch.distributed.flight_recorder.components.types import MatchState, Op
    except Exception:  # pragma: no cover - an older torch
        Op = None

    def plain(a, b):
        keys = ("profiling_name", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes")
        return all(a.get(k) == b.get(k) for k in keys)

    def same(a, b, pg):
        if Op is None:
            return plain(a, b)
        try:
            info = Op(a, members, pg).match(Op(b, members, pg))
            return info.state in (MatchState.FULLY_MATCHED, MatchState.UNDECIDED)
        except Exception:
            return plain(a, b)
    return same


def from_records(snapshots: dict) -> dict | None:
    groups: dict = {}   # pg name -> (desc, members)
    records: dict = {}  # pg name -> rank -> {seq: entry}
    wrapped: dict = {}  # pg name -> rank -> first seq still in its ring buffer
    for rank, snap in snapshots.items():
        fr = (snap or {}).get("fr")
        if not fr:
            continue
        for name, (desc, members) in snap.get("groups", {}).items():
            groups.setdefault(name, (desc, list(members)))
        entries = [e for e in fr.get("entries", []) if not e.get("is_p2p")]
        for e in entries:
            records.setdefault(e["process_group"][0], {}).setdefault(rank, {})[e["collective_seq_id"]] = e
        if entries and entries[0].get("record_id", 0) > 0:  # the ring buffer has dropped older records
            for e in entries:
                wrapped.setdefault(e["process_group"][0], {}).setdefault(rank, e["collective_seq_id"])
    for name in sorted(records, key=lambda n: (len(n), n)):
        desc, members = groups.get(name, ("", sorted(records[name])))
        known = [r for r in members if snapshots.get(r) and snapshots[r].get("fr")]
        per_rank = {r: records[name].get(r, {}) for r in known}
        seqs = [s for recs in per_rank.values() for s in recs]
        if not seqs:
            continue
        lo = max([1] + list(wrapped.get(name, {}).values()))
        same = _matcher({name: set(members)})
        for seq in range(lo, max(seqs) + 1):
            present = {r: recs[seq] for r, recs in per_rank.items() if seq in recs}
            absent = sorted(set(known) - set(present))
            classes: list = []  # [(entry, [ranks])]
            for r, e in sorted(present.items()):
                for rep, ranks in classes:
                    if same(rep, e, name):
                        ranks.append(r)
                        break
                else:
                    classes.append((e, [r]))
            where = _group(name, desc)
            if len(classes) > 1:
                table = {i: ranks for i, (_, ranks) in enumerate(classes)}
                culprits, _ = _split(table)
                sides = _sides(table, lambda i: _call(classes[i][0]))
                return {"kind": "mismatch", "ranks": culprits,
                        "detail": f"mismatch in {where}: {sides}."}
            if absent and present:
                waiting = sorted(present)
                last = {r: max(per_rank[r], default=0) for r in absent}
                if len(set(last.values())) == 1:
                    n = next(iter(last.values()))
                    they = "it" if len(absent) == 1 else "they"
                    before = f"{they} had called none there" if n == 0 else f"{they} stopped at #{n}"
                else:
                    before = ", ".join(f"rank {r} stopped at #{n}" for r, n in last.items())
                return {"kind": "missing", "ranks": absent,
                        "detail": f"missing: {_ranks(absent)} never entered {_call(classes[0][0])} in {where}, "
                                  f"which {_ranks(waiting)} entered ({before})."}
    return None


# --------------------------------------------------------------------------------- 3. waiting
def _waiting_call(w: dict) -> str:
    t = w.get("tensor")
    what = f" ({t['shape']} {t['dtype']})" if t else ""
    peer = w.get("peer")
    direction = {"send": " to", "isend": " to", "recv": " from", "irecv": " from"}.get(w["op"], "")
    peer_text = f"{direction} rank {peer}" if peer is not None and direction else ""
    where = f" at {w['where']}" if w.get("where") else ""
    return f"{w['op']}{peer_text}{what}{where}"


def from_waiting(snapshots: dict, stuck: list) -> dict | None:
    waits = {r: (snapshots.get(r) or {}).get("waiting") for r in stuck}
    waits = {r: w for r, w in waits.items() if w}
    p2p = {r: w for r, w in waits.items() if w["p2p"]}
    if p2p:
        calls = "; ".join(f"rank {r} in {_waiting_call(w)}" for r, w in sorted(p2p.items()))
        return {"kind": "p2p", "ranks": sorted(p2p),
                "detail": f"p2p: {_ranks(p2p, 'wait')} in a send or recv that no peer matches ({calls})."}
    for r, w in sorted(waits.items()):
        members = next((m for s in snapshots.values() if s for n, (_, m) in s.get("groups", {}).items()
                        if n == w["group"]), list(range(len(snapshots))))
        absent = [m for m in members if m not in waits or waits[m]["op"] != w["op"]]
        if absent:
            inside = sorted(m for m in members if m not in absent)
            return {"kind": "missing", "ranks": absent,
                    "detail": f"missing: {_ranks(absent)} never entered the {_waiting_call(w)} that "
                              f"{_ranks(inside)} wait in, in {_group_of(snapshots, inside, w['group'])}."}
    return None


def diagnose(snapshots: dict, world_size: int, errors: dict | None = None, stuck=(), headline: str = "") -> dict:
    """The diagnosis of one failed run (see the module docstring). headline: the first line of the error that
    will be raised, which an unknown diagnosis repeats (it is then the best clue)."""
    snapshots = {r: snapshots.get(r) for r in range(world_size)}
    errors = errors or {}
    found = (from_fingerprints(errors, snapshots) or from_monitored_barrier(errors, world_size)
             or from_records(snapshots) or (from_waiting(snapshots, list(stuck)) if stuck else None))
    if found:
        return found
    heard = sorted(r for r, s in snapshots.items() if s)
    if headline:
        why = headline.rstrip(".:") + "; "
    else:
        failed = [f"rank {r} raised in {_waiting_call(s['failed'])}" for r, s in snapshots.items() if s and s.get("failed")]
        why = "; ".join(failed[:2]) + ("; ..." if len(failed) > 2 else "") + "; " if failed else ""
    why += (f"the Flight Recorder records of {_ranks(heard)} show no mismatched, missing or unmatched collective"
            if heard else "no rank could be asked for its Flight Recorder records")
    return {"kind": "unknown", "ranks": [], "detail": f"unknown: {why}."}


def summary(error, width: int = 100) -> str:
    """A failed run's diagnosis for people: the kind and culprits, then the detail wrapped to `width`.
    error: the exception run() raised, or its .diagnosis."""
    import textwrap

    d = getattr(error, "diagnosis", error)
    if not isinstance(d, dict) or "detail" not in d:
        return f"no diagnosis: {type(error).__name__}"
    head = f"{type(error).__name__}: " if isinstance(error, BaseException) else ""
    lines = [f"{head}kind={d['kind']!r}, culprits={d['ranks']}"]
    lines += textwrap.wrap(d["detail"], width=width, subsequent_indent="  ")
    return "\n".join(lines)
