"""What went wrong in a failed run, from each rank's Flight Recorder records, the call it waits in, the
point-to-point operations it posted, and what the cluster itself saw (who raised, who died and how).

    diagnose(snapshots, world_size, errors={rank: text}, stuck=[ranks], dead={rank: how}) ->
        {"kind": "mismatch" | "missing" | "p2p" | "unknown", "ranks": [culprits], "detail": "one sentence"}

In this order:
  1. torch's fingerprint check (Cluster(debug=True): TORCH_DISTRIBUTED_DEBUG=DETAIL) raised "Detected
     mismatch between collectives on ranks", or commlib's check of roots and reduce ops (call_check.py) raised
     -> mismatch; the culprits differ from the majority. Or a live collective (matching.py: records every rank
     holding them has moved past are finished and left out) that the ranks called differently -> mismatch;
  2. a rank that died (signal, exit code): the culprit, whatever the survivors' records or a monitored barrier
     say -> missing;
  3. torch's monitored_barrier said "Ranks 3 failed to pass monitoredBarrier" -> missing; a live call with
     another root or reduce op (call_check's log) -> mismatch;
  4. by sequence: ranks that returned while the others were left in communication, when they are fewer
     (they skipped a program, or tore their process group down) -> missing;
  5. point-to-point operations still pending whose peer never posted the matching one (p2p_log.py) -> p2p:
     the rank most involved in unmatched operations (both of a pair that wait on each other, unless one of
     them used a tag the others do not: it alone);
  6. by sequence: ranks left in a collective that the others, more of them, returned without -> mismatch
     (a call the others lack);
  7. a live collective that some members never entered -> missing;
  8. a rank that raised outside torch.distributed, named from what the cluster saw -> missing when others wait
     in communication it never reached, else unknown (but named);
  9. the call each rank waits in -> missing: members of the group of a collective others wait in, not in it;
 10. otherwise unknown, saying in words what would tell.
A snapshot is flight_recorder.snapshot()'s dict, or None for a rank that could not give one (dead).
"""

from __future__ import annotations

import re
from commlib.cluster import call_check, matching, p2p_log
from commlib.cluster.matching import describe_record, group_text, ranks_text, sides, split  # noqa: F401
from commlib.ui.language import language, tr  # each sentence in the notebook's language where it is made

_OPS = {"ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather", "_ALLGATHER_BASE": "all_gather_into_tensor",
        "REDUCE_SCATTER": "reduce_scatter", "_REDUCE_SCATTER_BASE": "reduce_scatter_tensor",
        "ALLTOALL": "all_to_all", "ALLTOALL_BASE": "all_to_all_single", "ALLREDUCE_COALESCED": "all_reduce_coalesced"}
_FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+), "
                          r"OpType=(\w+), TensorShape=\[([^\]]*)\], TensorDtypes=(\w+)")
WHAT_WOULD_TELL = ("Cluster(debug=True) (TORCH_DISTRIBUTED_DEBUG=DETAIL) checks every collective before it runs, "
                   "and a Flight Recorder (Cluster(flight_recorder=N), TORCH_FR_BUFFER_SIZE) keeps the records")


def _group_of(snapshots: dict, ranks, name: str | None = None) -> str:
    """'process group 0 (default_pg)': the named group, or the one the first of `ranks` failed in."""
    for r in ranks:
        snap = snapshots.get(r) or {}
        if name is None and snap.get("failed"):
            name = snap["failed"].get("group")
        table = snap.get("groups", {})
        if name in table:
            return group_text(name, table[name][0])
    return group_text(name, "") if name else tr("an unknown process group")


# ---------------------------------------------------------------------------- 1. torch's checks
def from_fingerprints(errors: dict, snapshots: dict | None = None) -> dict | None:
    """torch's DETAIL check: each rank's error names itself and one rank that differs from it."""
    prints, seqs = {}, {}
    for text in errors.values():
        if "Detected mismatch between collectives" not in str(text):
            continue
        for rank, seq, op, shape, dt in _FINGERPRINT.findall(str(text)):
            seqs[int(rank)] = int(seq) + 1  # torch counts from 0 here
            prints[int(rank)] = (_OPS.get(op, op.lower()), shape, dt)
    if len(set(prints.values())) < 2:
        return None
    # The call, not its number, is compared: the wrapper's number also counts a rank's sends and recvs, so the
    # stages of a pipeline reach the same collective with different numbers (torch 2.13, ProcessGroupWrapper).
    classes: dict = {}
    for rank, key in sorted(prints.items()):
        classes.setdefault(key, []).append(rank)
    culprits, _ = split(classes)
    text = sides(classes, lambda k: tr(f"{k[0]} #{seqs[min(classes[k])]} of [{k[1]}] {matching.dtype(k[2])}"))
    where = _group_of(snapshots or {}, culprits)
    detail = tr(f"mismatch in {where}: {text} (caught before it ran by torch's fingerprint check, "
                f"TORCH_DISTRIBUTED_DEBUG=DETAIL).")
    return {"kind": "mismatch", "ranks": culprits, "detail": detail}


_CALL_CHECK = re.compile(re.escape(call_check.MARK) + r": (.*) \[culprits: ([\d, ]+)\]")


def from_call_check(errors: dict) -> dict | None:
    """commlib's debug check of roots and reduce ops (call_check.py): every rank raised, naming the odd ones."""
    for text in errors.values():
        m = _CALL_CHECK.search(str(text))
        if m:
            culprits = [int(r) for r in m.group(2).split(",")]
            return {"kind": "mismatch", "ranks": culprits,
                    "detail": tr(f"{_said_in_ranks(m.group(1))} (caught by commlib's debug check of roots and reduce "
                                 f"ops, which neither the Flight Recorder nor TORCH_DISTRIBUTED_DEBUG=DETAIL records).")}
    return None


def _said_in_ranks(text: str) -> str:
    """call_check's English sentence (made inside the ranks) in the notebook's language: as is in English."""
    m = re.match(r"mismatch in process group (\S+) at its call #(\d+): (.*)$", text)
    if language() is None or not m:
        return text
    said = [re.match(r"ranks? ([\d, ]+) called (.*)$", part) for part in m.group(3).split("; ")]
    if not all(said):
        return tr(text)
    said = "；".join(tr(f"{ranks_text(int(r) for r in x.group(1).split(', '))} called {x.group(2)}") for x in said)
    return tr(f"mismatch in {group_text(m.group(1), '')} at its call #{m.group(2)}: {said}")


def from_call_log(snapshots: dict) -> dict | None:
    """The last call each rank logged per group (call_check.snapshot()): same number, another root or reduce op.
    Only while some rank still waits in such a call: a logged call that every rank went past is finished (it
    may have returned wrong numbers; debug=True's check catches that) and is not what a hang is about."""
    live = {w["op"] for w in _waits(snapshots).values() if not w["p2p"]}
    if not live & {"all_reduce", "broadcast", "reduce"}:
        return None
    last: dict = {}
    for rank, snap in snapshots.items():
        for e in (snap or {}).get("calls") or []:
            last.setdefault((e["group"], tuple(e["members"])), {})[rank] = (e["n"], e["call"])
    for (name, members), by_rank in sorted(last.items()):
        if set(by_rank) != set(members) or len({n for n, _ in by_rank.values()}) != 1:
            continue  # not every member logged it, or they are at different calls: the records tell that
        classes: dict = {}
        for rank, (_, call) in sorted(by_rank.items()):
            classes.setdefault(call, []).append(rank)
        if len(classes) > 1:
            culprits, _ = split(classes)
            n = next(iter(by_rank.values()))[0]
            return {"kind": "mismatch", "ranks": culprits,
                    "detail": tr(f"mismatch in {_group_of(snapshots, members, name)} at its call #{n} of a root "
                                 f"or reduce op: {sides(classes, lambda k: k)} (seen in commlib's log of roots and "
                                 f"reduce ops; the Flight Recorder records neither).")}
    return None


_MONITORED = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")


def from_monitored_barrier(errors: dict, world_size: int) -> dict | None:
    """torch's monitored_barrier (Gloo) names the ranks that did not reach it in time."""
    for text in errors.values():
        m = _MONITORED.search(str(text))
        if m:
            absent = sorted({int(r) for r in m.group(1).replace(" ", "").split(",") if r})
            inside = [r for r in range(world_size) if r not in absent]
            return {"kind": "missing", "ranks": absent,
                    "detail": tr(f"missing: {ranks_text(absent)} never reached the monitored_barrier that "
                                 f"{ranks_text(inside)} reached (torch's monitored_barrier names them), "
                                 f"in the group it was called on.")}
    return None


# ------------------------------------------------------------------------------ 3. point-to-point
def _call(w: dict) -> str:
    """'recv from rank 1 ([4] float32) at swap() line 3 of x.py' for a waiting call or a pending p2p entry."""
    t = w.get("tensor")
    what = f" ({t['shape']} {t['dtype']})" if t else ""
    peer = w.get("peer")
    direction = {"send": " to", "isend": " to", "recv": " from", "irecv": " from"}.get(w["op"], "")
    peer_text = f"{direction} rank {peer}" if peer is not None and direction else ""
    peer_text += f" with tag {w['tag']}" if w.get("tag") else ""
    where = f" at {tr(w['where'])}" if w.get("where") else ""
    return tr(f"{w['op']}{peer_text}{what}{where}")


def from_p2p(snapshots: dict) -> dict | None:
    """Pending sends/recvs that their peer never matched: who waits to receive from whom, and whether that
    peer ever posted the send. A rank that waits only on ranks stuck elsewhere (they wait on others, not on it)
    waits behind them and is not a culprit; ranks that wait on each other are all named."""
    if not any(s and s.get("p2p") is not None for s in snapshots.values()):
        return None
    lost = p2p_log.unmatched({r: (s or {}).get("p2p") for r, s in snapshots.items()})
    if not lost:
        return None
    targets: dict = {}
    for rank, e in lost:
        targets.setdefault(rank, set()).add(e["peer"])
    behind = {w for w, ts in targets.items() if all(t in targets and w not in targets[t] for t in ts)}
    culprits = sorted(set(targets) - behind) or sorted(targets)
    culprits = _odd_tag(snapshots, lost, culprits)
    parts = []
    for rank, e in lost:
        peer = e["peer"]
        told = tr(f"rank {peer} is gone" if snapshots.get(peer) is None else
                  f"rank {peer} never posted the matching {'recv' if e['op'] == 'send' else 'send'}")
        parts.append(tr(f"rank {rank} in {_call(e)}: {told}"))
    return {"kind": "p2p", "ranks": culprits,
            "detail": tr(f"p2p: {ranks_text(culprits, 'wait')} in a send or recv that no peer matches "
                         f"({_join(parts)}).")}


def _join(parts) -> str:
    """Items of a sentence joined: '; ' in English, '；' in Chinese."""
    return ("；" if language() is not None else "; ").join(parts)


def _odd_tag(snapshots: dict, lost: list, culprits: list) -> list:
    """Of a pair whose pending send and recv differ only in their tag, the rank whose tag fewer operations of the
    whole run used (its peer posted what everyone else posts, and waits: the victim)."""
    pending = {(r, e["op"].replace("i", ""), e["peer"]): e["tag"] for r, e in lost}
    use: dict = {}
    for snap in snapshots.values():
        for (_, _, tag), n in ((snap or {}).get("p2p") or {}).get("posted", {}).items():
            use[tag] = use.get(tag, 0) + n
    odd = set()
    for (r, op, peer), tag in pending.items():
        mirror = pending.get((peer, "recv" if op == "send" else "send", r))
        if mirror is not None and mirror != tag and use.get(tag, 0) != use.get(mirror, 0):
            odd.add(r if use.get(tag, 0) < use.get(mirror, 0) else peer)
    return sorted(odd) if odd and odd < set(culprits) else culprits


# ------------------------------------------------------------------------------ sequences
def _finished(world_size: int, errors: dict, stuck, dead: dict) -> list:
    return sorted(set(range(world_size)) - set(stuck) - set(errors) - set(dead))


def _waited_on(snapshots: dict, rank: int, world_size: int, lost: list) -> tuple[set, set]:
    """The ranks `rank` waits for -> (in a collective: the members of the group of the call it waits or raised in,
    all ranks when its table does not hold that group; by send/recv: the peers of its unmatched operations, lost
    being p2p_log.unmatched())."""
    snap = snapshots.get(rank) or {}
    coll, p2p = set(), {e["peer"] for r, e in lost if r == rank}
    for call in (snap.get("waiting"), snap.get("failed")):
        if not call:
            continue
        if call["p2p"]:
            p2p |= {call["peer"]} if call.get("peer") is not None else set(range(world_size))
        else:
            coll |= set((snap.get("groups") or {}).get(call.get("group"), ("", range(world_size)))[1])
    return coll - {rank}, p2p - {rank}


def _posted_with(snapshots: dict, rank: int, peer: int) -> int:
    """Sends and receives `rank` posted with `peer` in the task that failed (all its life for an older snapshot)."""
    log = (snapshots.get(rank) or {}).get("p2p") or {}
    counts = log.get("task", log.get("posted")) or {}
    return sum(n for (_, p, _), n in counts.items() if p == peer)


def from_returned(snapshots: dict, world_size: int, errors: dict, stuck, dead: dict) -> dict | None:
    """Ranks that returned while more ranks were left in communication that waits for them, or raised inside it:
    they skipped what the others entered, or tore their process group down. A rank waited for by send/recv only
    counts when it posted no send or recv with the ranks waiting for it in this task (it skipped them; one that
    did exchange with them did its part, and the waiting rank asked the wrong peer). Returned ranks nobody waits
    for are bystanders."""
    left = sorted(set(stuck) | set(errors))
    if dead or not left or any(not (snapshots.get(r) or {}).get("failed") for r in errors):
        return None  # a death, or a rank that raised on its own: their story (from_failures)
    lost = p2p_log.unmatched({r: (s or {}).get("p2p") for r, s in snapshots.items()})
    waits = {r: _waited_on(snapshots, r, world_size, lost) for r in left}
    finished = set(_finished(world_size, errors, stuck, dead))
    by_coll = {r for w in waits.values() for r in w[0]} & finished
    by_p2p = {r for r in finished - by_coll
              if any(r in w[1] for w in waits.values())
              and all(_posted_with(snapshots, r, w) == 0 for w, (_, p) in waits.items() if r in p)}
    done = sorted(by_coll | by_p2p)
    if not done or len(done) >= len(left):
        return None
    found = matching.from_records(snapshots, "missing")
    if found and found["ranks"] == done:
        return found  # the records say it in their own words: the collective it never entered
    gone = [r for r in done if not (snapshots.get(r) or {}).get("groups")]
    how = tr("it returned with its process group destroyed" if gone == done else "it returned, having skipped it")
    waits = _waits(snapshots, done)
    w = next((w for _, w in sorted(waits.items())), None)
    inside = f"the {_call(w)}" if w else "the communication"
    where = f", in {_group_of(snapshots, left, w['group'])}" if w and not w["p2p"] else ""
    return {"kind": "missing", "ranks": done,
            "detail": tr(f"missing: {ranks_text(done)} never entered {inside}{where} that {ranks_text(left)} "
                         f"{'was' if len(left) == 1 else 'were'} left in: {how} (the odd rank by sequence).")}


def from_extra(snapshots: dict, world_size: int, errors: dict, stuck, dead: dict) -> dict | None:
    """Ranks left waiting in a collective that more ranks returned without: a call the others lack."""
    done = _finished(world_size, errors, stuck, dead)
    stuck = sorted(stuck)
    if errors or dead or not stuck or len(stuck) >= len(done):
        return None
    waits = _waits(snapshots)
    if not all(r in waits and not waits[r]["p2p"] for r in stuck):
        return None
    calls = _join(tr(f"rank {r} in {_call(waits[r])}") for r in stuck)
    return {"kind": "mismatch", "ranks": stuck,
            "detail": tr(f"mismatch: {ranks_text(stuck)} called a collective that {ranks_text(done)} never "
                         f"called: they returned ({calls}; a call the others lack, by sequence).")}


# ------------------------------------------------------------------ 8. what the cluster itself saw
def _waits(snapshots: dict, exclude=()) -> dict:
    """{rank: the torch.distributed call it waits in} for the ranks that could be asked."""
    return {r: s["waiting"] for r, s in snapshots.items() if s and s.get("waiting") and r not in exclude}


def from_failures(snapshots: dict, errors: dict, dead: dict, stuck=()) -> dict | None:
    """Dead ranks, else ranks that raised outside torch.distributed (the others' errors, raised inside a
    collective or a send/recv, are what the first one left them with). Ranks still running (stuck) when the
    first error came are left waiting too, even if a loaded machine has not yet brought them into the call."""
    own = [r for r in errors if r not in dead and not (snapshots.get(r) or {}).get("failed")]
    culprits = sorted(dead) or sorted(own)
    if not culprits:
        return None
    how = {r: (f"died ({dead[r]})" if r in dead else f"raised {_last_line(errors[r])}") for r in culprits}
    said = _join(tr(f"rank {r} {how[r]}") for r in culprits)
    waits = _waits(snapshots, culprits)
    victims = sorted((set(waits) | set(errors) | set(stuck)) - set(culprits))
    if not victims:
        return {"kind": "unknown", "ranks": culprits,
                "detail": tr(f"unknown: {said}; no other rank was left waiting in a collective or a send/recv "
                             f"(the error itself is the story).")}
    inside = next((f" the {_call(w)}" for w in waits.values()), " the communication")
    return {"kind": "missing", "ranks": culprits,
            "detail": tr(f"missing: {said}, so {'it' if len(culprits) == 1 else 'they'} never entered{inside} that "
                         f"{ranks_text(victims)} {'was' if len(victims) == 1 else 'were'} left in.")}


def _last_line(text) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[-1] if lines else "an exception"


# --------------------------------------------------------------------------------- 6. waiting
def from_waiting(snapshots: dict) -> dict | None:
    waits = _waits(snapshots)
    for r, w in sorted(waits.items()):
        if w["p2p"]:
            continue
        members = next((m for s in snapshots.values() if s for n, (_, m) in s.get("groups", {}).items()
                        if n == w["group"] and r in m), list(range(len(snapshots))))
        absent = [m for m in members if m not in waits or waits[m]["op"] != w["op"]]
        if absent:
            inside = sorted(m for m in members if m not in absent)
            return {"kind": "missing", "ranks": absent,
                    "detail": tr(f"missing: {ranks_text(absent)} never entered the {_call(w)} that "
                                 f"{ranks_text(inside, 'wait')} in, in {_group_of(snapshots, inside, w['group'])}.")}
    p2p = {r: w for r, w in waits.items() if w["p2p"]}
    if p2p:
        calls = _join(tr(f"rank {r} in {_call(w)}") for r, w in sorted(p2p.items()))
        return {"kind": "p2p", "ranks": sorted(p2p),
                "detail": tr(f"p2p: {ranks_text(p2p, 'wait')} in a send or recv that no peer matches ({calls}).")}
    return None


def diagnose(snapshots: dict, world_size: int, errors: dict | None = None, stuck=(), headline: str = "",
             dead: dict | None = None) -> dict:
    """The diagnosis of one failed run (see the module docstring). errors: {rank: the text it raised};
    stuck: ranks that gave no answer; dead: {rank: how it ended}; headline: the first line of the error that
    will be raised, which an unknown diagnosis repeats (it is then the best clue)."""
    snapshots = {r: snapshots.get(r) for r in range(world_size)}
    errors, dead = errors or {}, dead or {}
    found = (from_fingerprints(errors, snapshots) or from_call_check(errors)
             or matching.from_records(snapshots, "mismatch")
             or (from_failures(snapshots, errors, dead, stuck) if dead else None)
             or from_monitored_barrier(errors, world_size) or from_call_log(snapshots)
             or from_returned(snapshots, world_size, errors, stuck, dead) or from_p2p(snapshots)
             or from_extra(snapshots, world_size, errors, stuck, dead)
             or matching.from_records(snapshots, "missing") or from_failures(snapshots, errors, dead, stuck)
             or from_waiting(snapshots))
    if found:
        return found
    heard = sorted(r for r, s in snapshots.items() if s)
    why = headline.rstrip(".:") + "; " if headline else ""
    why += (f"the records of {ranks_text(heard)} show no mismatched, missing or unmatched collective or send/recv"
            if heard else "no rank could be asked for its records")
    return {"kind": "unknown", "ranks": [],
            "detail": tr(f"unknown: {why}, so no rank can be named; {WHAT_WOULD_TELL}.")}


def summary(error, width: int = 100) -> str:
    """A failed run's diagnosis for people: the kind and culprits, then the detail wrapped to `width`.
    error: the exception run() raised, or its .diagnosis."""
    import textwrap

    from commlib.ui.language import language, tr  # the notebook's language: the detail stays English data in d

    d = getattr(error, "diagnosis", error)
    if not isinstance(d, dict) or "detail" not in d:
        return tr(f"no diagnosis: {type(error).__name__}")
    head = f"{type(error).__name__}: " if isinstance(error, BaseException) else ""
    who = f"culprits={d['ranks']}" if d["ranks"] else tr("no culprit named (see below)")
    lines = [f"{head}kind={d['kind']!r}, {who}"]
    if language() is not None:  # Chinese: wrapped by display width, never inside a word
        from commlib.ui.wrap import wrap

        return "\n".join(lines + [("  " if i else "") + line for i, line in enumerate(wrap(tr(d["detail"]),
                                                                                         width - 2))])
    lines += textwrap.wrap(d["detail"], width=width, subsequent_indent="  ")
    return "\n".join(lines)
