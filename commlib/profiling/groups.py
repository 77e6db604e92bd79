"""The job's process groups, merged from every rank's trace, and which group each collective call ran in.

    groups = merge(ranks)                 # {name: Group}; TraceError naming both files where two ranks disagree
    where, notes = assign_gloo(ranks, groups)   # Gloo only: {(rank, worker thread): group name or None}
    ranks = file_calls(ranks)             # every call under its group, sized by it (traces.load calls this)

Each rank's `distributedInfo.pg_config` lists only the groups that rank belongs to (torch writes it from
c10d's `_world.pg_map`), so the ranks' lists differ on any job with subgroups: the job's groups are their
union, a group being one name with one list of ranks wherever it appears.

NCCL traces name each call's group (`Process Group Name` on the kernel or on `record_param_comms`). Gloo
traces do not (checked on torch 2.13: neither the `c10d::*` op, nor `_c10d_functional::*`, nor Gloo's
`gloo:*` work records it), but each ProcessGroupGloo runs its work on worker threads of its own
(`pt_gloo_runloop`, Options::threads, 2 by default), started when the group is created. So each worker thread
is matched to one group:
  - on a rank, its threads in creation order go to its groups in creation order (pg_config order), at most
    `threads` to a group. A process's thread ids grow as threads are made, except across a wrap of the
    machine's id counter (pid_max), after which they restart below the process's own id (_tid_key);
  - across ranks, the assignment must fit the calls: every member of a group calls the group's collectives in
    one order with one op and size (what TORCH_DISTRIBUTED_DEBUG=DETAIL checks), so each group's calls, in
    the order each member issued them, are the same sequence on every member. Of all the assignments, the
    ones that fit best (fewest calls differing or missing between members, then fewest threads on the
    default group: a job that made groups with new_group uses them) are found by branch and bound, rank by
    rank. This holds for overlapping groups of any shape: chains, rings of pairs, a mesh's rows and columns.
  - a thread the best assignments put in different groups (two groups of the same ranks running the same
    calls, say) keeps its calls' group unknown (None), and a note says so: diagnose does not guess.
"""
from __future__ import annotations

import functools
import itertools
import os
from dataclasses import dataclass, replace

from commlib.profiling.read.reader import TraceError

UNEVEN = ("all_to_all", "gather", "scatter")   # sizes that may differ by rank (all_to_allv's splits, the root's)


@dataclass(frozen=True)
class Group:
    name: str
    ranks: tuple          # global ranks, ascending; () where no trace listed them
    desc: str | None = None
    pg_size: int | None = None   # as pg_config states it, where it lists no ranks

    @property
    def size(self) -> int | None:
        return len(self.ranks) or self.pg_size

    def label(self) -> str:
        return f"{self.name} ({self.size or '?'})"


def parse_ranks(value) -> tuple | None:
    """pg_config's / the kernel's ranks: a list of ints, or that list written as a string ("[0, 1]")."""
    if isinstance(value, str):
        return _ranks_text(value)   # every kernel of a job repeats a few such strings: parsed once each
    if not isinstance(value, (list, tuple)) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                       for x in value):
        return None
    return tuple(sorted(set(value)))


@functools.lru_cache(maxsize=4096)
def _ranks_text(value: str) -> tuple | None:
    text = value.strip().strip("[]").strip()
    try:
        return parse_ranks([int(x) for x in text.split(",")] if text else [])
    except ValueError:
        return None


def configured(info: dict) -> list[Group]:
    """One rank's pg_config as Groups, in the order the rank created them."""
    out = []
    for g in info.get("pg_config") or [] if isinstance(info.get("pg_config"), list) else []:
        if isinstance(g, dict) and g.get("pg_name") is not None:
            size = g.get("pg_size")
            out.append(Group(str(g["pg_name"]), parse_ranks(g.get("ranks")) or (), g.get("pg_desc"),
                             size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None))
    return out


def merge(ranks) -> dict:
    """{name: Group} over every rank's pg_config; a name with two lists of ranks is a TraceError naming both
    files (they are not one job)."""
    groups, where = {}, {}
    for r in ranks:
        for g in r.groups:
            old = groups.get(g.name)
            if old is None or (not old.ranks and g.ranks):
                groups[g.name], where[g.name] = g, r.path
            elif (g.ranks and old.ranks and g.ranks != old.ranks) or (g.size and old.size and g.size != old.size):
                raise TraceError(r.path, f"from another job than {where[g.name]}: process group {g.name} has "
                                         f"ranks {list(g.ranks) or g.size} here, {list(old.ranks) or old.size} there")
    return groups


def assign_gloo(ranks, groups: dict, threads_per_group: int = 2, limit: int = 200_000) -> tuple[dict, list[str]]:
    """-> ({(rank, worker thread): group name, or None where unsettled}, notes) for Gloo calls (see the module
    docstring). A job with one group needs none of this: every call is in it."""
    ranks = [r for r in ranks if r.calls]
    options = {r.rank: _options(r, groups, threads_per_group) for r in ranks}
    best, agreed, steps = [None], {}, [0]

    def walk(i, fixed, score, chosen):
        steps[0] += 1
        if steps[0] > limit or (best[0] is not None and score > best[0]):
            return
        if i == len(ranks):
            if best[0] is None or score < best[0]:
                best[0] = score
                agreed.clear()
            for key, name in chosen.items():
                agreed.setdefault(key, set()).add(name)
            return
        rank = ranks[i].rank
        for pick, seqs, on_default in options[rank]:
            cost, added = 0, {}
            for name, seq in seqs.items():
                if name in fixed:
                    cost += _misfit(fixed[name], seq)
                added[name] = fixed.get(name, seq)
            walk(i + 1, {**fixed, **added}, (score[0] + cost, score[1] + on_default),
                 {**chosen, **{(rank, tid): name for tid, name in pick.items()}})

    walk(0, {}, (0, 0), {})
    if steps[0] > limit:
        return {}, [f"Gloo's worker threads: more ways to assign them to the job's {len(groups)} process groups "
                    f"than the {limit} tried: every call's group is left unknown"]
    where = {key: next(iter(names)) if len(names) == 1 else None for key, names in agreed.items()}
    loose = sorted((key, names) for key, names in agreed.items() if len(names) > 1)
    notes = []
    if loose:
        (rank, tid), names = loose[0]
        calls = sum(1 for r in ranks if r.rank == rank for t, _ in r.threads if t == tid)
        notes.append(f"Gloo's worker threads fit the process groups in more than one way ({len(loose)} thread(s), "
                     f"e.g. rank {rank}'s thread {tid}, {calls} call(s), fits groups "
                     f"{' and '.join(sorted(names, key=lambda n: (len(n), n)))} equally: same ranks, same calls): "
                     "their calls' group is left unknown rather than guessed")
    return where, notes


def _misfit(ref: tuple, seq: tuple) -> int:
    """How far one member's calls in a group are from another's: calls one has and the other not, and calls at
    the same place that differ in op or bytes."""
    return abs(len(ref) - len(seq)) + sum(1 for a, b in zip(ref, seq) if a != b)


def _options(r, groups: dict, per_group: int) -> list:
    """A rank's possible assignments of its worker threads, each (thread -> group name, {group: its calls'
    (op, bytes) in issue order}, threads on the default group): threads in creation order to the rank's groups in
    creation order (pg_config order), at most per_group threads a group."""
    mine = [g.name for g in r.groups if g.name in groups and (not groups[g.name].ranks
                                                              or r.rank in groups[g.name].ranks)]
    default = {g.name for g in r.groups if g.desc == "default_pg"}
    by_thread = {}
    for c, (tid, issue) in zip(r.calls, r.threads):
        by_thread.setdefault(tid, []).append((issue, (c.op, None if c.op in UNEVEN else c.bytes)))
    tids = sorted(by_thread, key=lambda tid: _tid_key(tid, r.pid))
    if not mine:   # no pg_config: nothing to assign
        return [({tid: None for tid in tids}, {}, 0)]
    out = []
    for combo in _monotone(len(tids), len(mine), per_group):
        pick = {tid: mine[j] for tid, j in zip(tids, combo)}
        seqs = {name: [] for name in mine}
        for tid, name in pick.items():
            seqs[name] += by_thread[tid]
        out.append((pick, {name: tuple(sig for _, sig in sorted(s, key=lambda x: x[0])) for name, s in seqs.items()},
                    sum(1 for name in pick.values() if name in default)))
    return out


def _tid_key(tid, pid=None):
    """Creation order: Linux gives a new thread the next free id after the last one given on the machine, so
    a process's threads' ids grow as they are made, except where the counter passed pid_max (32768 on many
    machines, a few minutes of a busy test run) and began again from the bottom. Every thread is made after
    the main thread, whose id is the process's: ids below it were given after such a wrap, so they come last."""
    if not isinstance(tid, int):
        return (2, 0, str(tid))
    return (int(isinstance(pid, int) and tid < pid), tid, "")


def _monotone(n: int, k: int, cap: int):
    """Non-decreasing sequences of n indices into range(k), no index more than cap times."""
    if n == 0:
        yield ()
        return
    for combo in itertools.combinations_with_replacement(range(k), n):
        if all(combo.count(j) <= cap for j in set(combo)):
            yield combo


def _same(a, b) -> bool:
    return a is b or (type(a) is type(b) and a == b)


def file_calls(ranks: list) -> list:
    """The ranks with every call under its process group of the job, sized by the group's ranks: NCCL calls
    as the trace names them; Gloo calls by their worker thread (groups.assign_gloo; group None where that
    is not settled, and the job has more than one group)."""
    groups = merge(ranks)
    gloo = [r for r in ranks if r.backend == "gloo" and r.calls]
    where = {}
    if gloo and len(groups) > 1:
        where, notes = assign_gloo(gloo, groups)
        gloo[0].notes.extend(notes)
    for r in ranks:
        calls = []
        for i, c in enumerate(r.calls):
            name = c.group
            if r.backend == "gloo" and len(groups) > 1:
                name = where.get((r.rank, r.threads[i][0])) if where else None
            g = groups.get(name)
            size = g.size if g is not None and g.size else (c.group_size if name == c.group else None)
            if not groups and c.group_size and r.world_size and c.group_size != r.world_size:
                name = None   # no pg_config, and the trace's sizes say it is not the whole job: which group?
            nbytes = c.bytes
            if i in r.shards:   # an older trace's all-gather: nccl-tests counts the gathered total
                nbytes = nbytes * size if nbytes is not None and size else None
            if _same(name, c.group) and _same(size, c.group_size) and _same(nbytes, c.bytes):
                calls.append(c)   # nothing to change (most calls): replace() costs more than all the rest
            else:
                calls.append(replace(c, group=name, group_size=size, bytes=nbytes))
        if any(i in r.shards and c.bytes is None for i, c in enumerate(calls)):
            r.notes.append(f"{os.path.basename(r.path)}: all-gathers recorded with one rank's shard and no known "
                           "group: their bytes (shard x group size) are not known, nothing is flagged on them")
        r.calls = calls
    return ranks
