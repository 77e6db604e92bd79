"""Which collectives were live when a run failed, and which ranks disagree there or never came.

A record is one entry of a rank's Flight Recorder (flight_recorder.snapshot()["fr"]["entries"]). Records are
grouped by process group, and a group is its name *and its members*: torch names the groups a DeviceMesh makes
(new_group / split_group) alike on every rank, so rank 0's "3" (ranks 0, 1) and rank 2's "3" (ranks 2, 3) are
two groups. Within a group, records line up by collective sequence number.

Only what is live counts: a number that every rank holding it has moved past (it has a later record) finished,
so it cannot be what the ranks wait in, and is never compared (issue 31: DTensor's gathers of an earlier step
blamed every rank of a 2x8 mesh for a later, unrelated hang).
"""

from __future__ import annotations

from commlib.ui.language import language, tr  # what a learner reads, in the notebook's language (English: as is)

_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
           "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool"}
_KEYS = ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes")


def ranks_text(ranks, verb: str = "") -> str:
    """'rank 2' / 'ranks 0, 1', with the verb agreeing: ranks_text([2], 'differ') -> 'rank 2 differs'."""
    ranks = sorted(ranks)
    if language() is not None and len(ranks) > 1:  # Chinese: "rank 0、1、3"
        text = "rank " + "、".join(map(str, ranks))
    else:
        text = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
    if verb:
        text += " " + (verb if len(ranks) > 1 else {"wait": "waits"}.get(verb, verb + "s"))
    return text


def group_text(name: str, desc: str) -> str:
    return tr(f"process group {name} ({desc})" if desc else f"process group {name}")


def dtype(name: str) -> str:
    return _DTYPES.get(name, name.lower())


def _op(entry: dict) -> str:
    return entry["profiling_name"].split(":", 1)[-1].split(" ")[0]


def _size_dtype(entry: dict) -> str:
    """'[4] float32', or '' for a record without tensors (a barrier): no '[] ?' in a report."""
    sizes = entry.get("input_sizes") or entry.get("output_sizes") or []
    dtypes = entry.get("input_dtypes") or entry.get("output_dtypes") or []
    if not sizes or not dtypes:
        return ""
    return f"{list(sizes[0])} {dtype(dtypes[0])}"


def describe_record(entry: dict) -> str:
    """'#3 all_reduce [4] float32' from one Flight Recorder entry."""
    what = _size_dtype(entry)
    return f"#{entry['collective_seq_id']} {_op(entry)}" + (f" {what}" if what else "")


def call_text(entry: dict) -> str:
    """'all_reduce #3 of [4] float32' from one Flight Recorder entry."""
    what = _size_dtype(entry)
    return tr(f"{_op(entry)} #{entry['collective_seq_id']}" + (f" of {what}" if what else ""))


def split(classes: dict) -> tuple[list[int], list[int]]:
    """{signature: [ranks]} -> (culprits, majority): the ranks outside the one largest class; when no
    class is larger than every other (two ranks that disagree), every rank is a suspect."""
    sizes = sorted((len(r) for r in classes.values()), reverse=True)
    if len(sizes) > 1 and sizes[0] == sizes[1]:
        return sorted(r for ranks in classes.values() for r in ranks), []
    majority = max(classes.values(), key=len)
    return sorted(r for ranks in classes.values() if ranks is not majority for r in ranks), sorted(majority)


def sides(classes: dict, describe) -> str:
    culprits, majority = split(classes)
    parts = [tr(f"{ranks_text(ranks)} called {describe(key)}")
             for key, ranks in sorted(classes.items(), key=lambda kv: (sorted(kv[1]) == majority, min(kv[1])))]
    if language() is not None:
        return ("，而 " if majority else "；").join(parts)
    return (", where " if majority else "; ").join(parts)


def same_call(a: dict, b: dict, name: str, members) -> bool:
    """torch's own rule for 'the same collective' (flight_recorder Op.match: type, sizes, dtypes).

    Op.match also holds each record to a rule of its own shape: an all_gather's output numel must be its input
    numel times the group size (reduce_scatter's likewise). torch 2.13's Gloo records a DTensor gather's output
    as [1, *shape] per rank, so every such record fails that rule, on every rank, and the analyser reports
    SIZE_OR_SYNTAX_MISMATCH for collectives that matched (issue 31). Two records identical in type, sizes and
    dtypes are the same call whatever that rule says: it compares a record with itself, not the ranks."""
    if _op(a) == _op(b) and all(a.get(k) == b.get(k) for k in _KEYS):
        return True
    try:
        from torch.distributed.flight_recorder.components.types import MatchState, Op

        info = Op(a, {name: set(members)}, name).match(Op(b, {name: set(members)}, name))
        return info.state in (MatchState.FULLY_MATCHED, MatchState.UNDECIDED)
    except Exception:  # an older torch, or a record its parser does not know: differing fields differ
        return False


def _pg_config(fr: dict) -> dict:
    """{name: (desc, [ranks])} from a dump's own pg_config (a GPU job's dump has no commlib group table)."""
    import ast

    out = {}
    for name, cfg in (fr.get("pg_config") or {}).items():
        try:
            ranks = ast.literal_eval(cfg.get("ranks", "[]")) if isinstance(cfg.get("ranks"), str) else cfg["ranks"]
            out[str(name)] = (str(cfg.get("desc", "")), [int(r) for r in ranks])
        except (ValueError, SyntaxError, TypeError, KeyError, AttributeError):
            continue
    return out


def groups(snapshots: dict) -> dict:
    """-> {(name, members): {"desc", "records": {rank: {seq: entry}}, "later": {rank: {seq: moved past it}},
    "wrapped": {rank: first seq kept}}} from every rank's records and its own group table."""
    out: dict = {}
    for rank, snap in snapshots.items():
        fr = (snap or {}).get("fr")
        if not fr:
            continue
        table = snap.get("groups") or _pg_config(fr)
        entries = [e for e in fr.get("entries", []) if not e.get("is_p2p")]
        last_id = max((e.get("record_id", 0) for e in entries), default=-1)
        for e in entries:
            name, desc = e["process_group"]
            own = table.get(name)
            if table and (own is None or rank not in own[1]):
                continue  # a group this rank's table does not hold: the debug wrapper's helper group, or destroyed
            key = (name, tuple(own[1]) if own else None)  # no table at all: the members are whoever recorded it
            g = out.setdefault(key, {"desc": (own[0] if own else "") or desc, "records": {}, "later": {},
                                     "wrapped": {}})
            seq = e["collective_seq_id"]
            g["records"].setdefault(rank, {})[seq] = e
            g["later"].setdefault(rank, {})[seq] = e.get("record_id", 0) < last_id
            if entries[0].get("record_id", 0) > 0:  # the ring buffer has dropped older records
                g["wrapped"].setdefault(rank, seq)
    return out


def findings(snapshots: dict) -> list[dict]:
    """Every live disagreement, group by group: mismatches (the minority are the culprits; two ranks that
    disagree are both named) and numbers some members never entered (missing)."""
    found = []
    for (name, members), g in sorted(groups(snapshots).items(), key=lambda kv: (len(kv[0][0]), kv[0][0])):
        members = members or sorted(g["records"])
        known = [r for r in members if (snapshots.get(r) or {}).get("fr")]
        per_rank = {r: g["records"].get(r, {}) for r in known}
        seqs = sorted({s for recs in per_rank.values() for s in recs})
        lo = max([1] + list(g["wrapped"].values()))
        where = group_text(name, g["desc"])
        for seq in (s for s in seqs if s >= lo):
            present = {r: recs[seq] for r, recs in per_rank.items() if seq in recs}
            if all(g["later"][r][seq] for r in present):
                continue  # every rank that called it went on: finished, not what anyone waits in
            classes: list = []  # [(entry, [ranks])]
            for r, e in sorted(present.items()):
                for rep, ranks in classes:
                    if same_call(rep, e, name, members):
                        ranks.append(r)
                        break
                else:
                    classes.append((e, [r]))
            absent = sorted(set(known) - set(present))
            if len(classes) > 1:
                table = {i: ranks for i, (_, ranks) in enumerate(classes)}
                culprits, _ = split(table)
                found.append({"kind": "mismatch", "ranks": culprits,
                              "detail": tr(f"mismatch in {where}: {sides(table, lambda i: call_text(classes[i][0]))}.")})
            elif absent:
                last = {r: max(per_rank[r], default=0) for r in absent}
                if len(set(last.values())) == 1:
                    n = next(iter(last.values()))
                    they = "it" if len(absent) == 1 else "they"
                    before = tr(f"{they} had called none there" if n == 0 else f"{they} stopped at #{n}")
                else:
                    before = ("，" if language() else ", ").join(tr(f"rank {r} stopped at #{n}")
                                                                 for r, n in last.items())
                found.append({"kind": "missing", "ranks": absent,
                              "detail": tr(f"missing: {ranks_text(absent)} never entered {call_text(classes[0][0])} "
                                           f"in {where}, which {ranks_text(sorted(present))} entered ({before}).")})
            else:
                continue
            break  # the first live disagreement of a group is its story; later numbers follow from it
    return found


def from_records(snapshots: dict, kind: str) -> dict | None:
    """The first live finding of this kind ('mismatch' or 'missing'), or None."""
    return next((f for f in findings(snapshots) if f["kind"] == kind), None)


def torch_verdicts(snapshots: dict) -> str:
    """What torch's own matcher (flight_recorder Op.match, as its analyser uses it) says when each rank's records
    are compared with those of the group's first rank, finished or not: one line, for the stale-records lesson."""
    from collections import Counter

    from torch.distributed.flight_recorder.components.types import MatchState, Op

    flagged, states, compared = set(), Counter(), 0
    for (name, members), g in groups(snapshots).items():
        members = members or sorted(g["records"])
        first = min(g["records"])
        for rank, recs in g["records"].items():
            for seq, e in recs.items():
                ref = g["records"][first].get(seq)
                if ref is None or rank == first:
                    continue
                compared += 1
                state = Op(ref, {name: set(members)}, name).match(Op(e, {name: set(members)}, name)).state
                if state not in (MatchState.FULLY_MATCHED, MatchState.UNDECIDED):
                    flagged.update((rank, first))
                    states[state.name] += 1
    if not flagged:
        return tr(f"torch's Op.match: all {compared} record pairs match")
    kinds = ", ".join(f"{n} {s}" for s, n in states.most_common())
    return tr(f"torch's Op.match: {kinds} in {compared} record pairs, which would blame "
              f"{ranks_text(sorted(flagged))}")
