"""The job's process groups, merged from every rank's trace, and which group each collective call ran in.

    groups = merge(ranks)                 # {name: Group}; TraceError naming both files where two ranks disagree
    where = assign_gloo(ranks, groups)    # Gloo only: {(rank, worker thread): group name}, or None (unknown)
    ranks = file_calls(ranks)             # every call under its group, sized by it (traces.load calls this)

Each rank's `distributedInfo.pg_config` lists only the groups that rank belongs to (torch writes it from
c10d's `_world.pg_map`), so the ranks' lists differ on any job with subgroups: the job's groups are their
union, a group being one name with one list of ranks wherever it appears.

NCCL traces name each call's group (`Process Group Name` on the kernel or on `record_param_comms`). Gloo
traces do not (checked on torch 2.13: neither the `c10d::*` op, nor `_c10d_functional::*`, nor Gloo's
`gloo:*` work records it), but each ProcessGroupGloo runs its work on its own worker threads
(`pt_gloo_runloop`, Options::threads, 2 by default), started when the group is created. So a Gloo call's
group is found from its thread, in two steps:
  1. roles: the k-th collective a program issues is the same line of code on every rank (SPMD), so the
     threads that ran the k-th call on the ranks serve one role (say "the tensor-parallel group"); threads
     linked this way, through any k, are one role (union-find).
  2. groups: on each rank, roles ordered by their threads' ids (a process's thread ids grow as threads are
     created) go to its groups in the order it created them (pg_config order), several roles to one group
     at most `threads` at a time, groups no call used skipped; every member of a group must give that group
     to the same role. Groups made with new_group (or a DeviceMesh) are tried before the default group.
     Of the assignments that fit, the one whose groups' threads have the closest ids wins (a group's
     threads are started one after the other); a tie, or none, leaves the calls' group unknown (None),
     and diagnose says so rather than guess.
"""
from __future__ import annotations

import functools
import itertools
import os
from dataclasses import dataclass, replace

from commlib.profiling.read.reader import TraceError


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


def _roles(ranks) -> dict:
    """(rank, thread) -> role id: threads that ran the k-th call on different ranks serve one role."""
    parent = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    # each rank's calls in the order its program issued them (r.threads: (thread, issue index) per call)
    per_rank = [[(c, t[0]) for c, t in sorted(zip(r.calls, r.threads), key=lambda ct: ct[1][1])] for r in ranks]
    for r, pairs in zip(ranks, per_rank):
        for _, tid in pairs:
            find((r.rank, tid))
    for k in range(max((len(p) for p in per_rank), default=0)):
        at_k = [(r.rank, p[k]) for r, p in zip(ranks, per_rank) if k < len(p)]
        if len({c.op for _, (c, _) in at_k}) > 1:
            break   # the programs differ from here on: no more roles from order
        first = find((at_k[0][0], at_k[0][1][1]))
        for rank, (_, tid) in at_k[1:]:
            parent[find((rank, tid))] = first
    return {key: find(key) for key in parent}


def assign_gloo(ranks, groups: dict, threads_per_group: int = 2, limit: int = 50_000) -> dict | None:
    """{(rank, thread): group name} for Gloo calls, or None where the threads do not settle one assignment
    (see the module docstring). A job with one group needs none of this: every call is in it."""
    role = _roles(ranks)
    mine = {}    # rank -> {role: its lowest thread id on that rank}
    for (rank, tid), rid in role.items():
        low = mine.setdefault(rank, {})
        low[rid] = min(low.get(rid, tid), tid, key=_tid_key)
    order = {rank: sorted(d, key=lambda rid: _tid_key(d[rid])) for rank, d in mine.items()}
    for with_default in (False, True):
        found = _search(ranks, groups, order, mine, with_default, threads_per_group, limit)
        if found is None:
            return None
        if found:
            found.sort(key=lambda sc: sc[0])
            if len(found) > 1 and found[0][0] == found[1][0]:
                return None   # two assignments fit equally well: the trace does not say which
            choice = found[0][1]
            return {key: choice[(key[0], rid)] for key, rid in role.items()}
    return None


def _tid_key(tid):
    return (0, tid, "") if isinstance(tid, int) else (1, 0, str(tid))


def _spread(tids) -> float:
    """How far apart a group's threads' ids are on one rank (threads created together have adjacent ids)."""
    ints = [t for t in tids if isinstance(t, int)]
    return float(max(ints) - min(ints)) if len(ints) > 1 else 0.0


def _search(ranks, groups, order, tids, with_default, per_group, limit):
    """Every consistent assignment as (spread, {(rank, role): group name}); None past limit. On each rank,
    roles in thread-id order go to groups in creation order (several roles may share a group: a group has
    up to per_group threads); a group given to a role on one member is given to it on all members."""
    cands = {}
    for r in ranks:
        cands[r.rank] = [groups[g.name] for g in r.groups if g.name in groups and r.rank in groups[g.name].ranks
                         and (with_default or g.desc != "default_pg")]
    rank_ids = [r.rank for r in ranks if order.get(r.rank)]
    solutions, steps = [], [0]

    def ok(chosen, rank, pick):
        for rid, g in pick.items():
            for m in g.ranks:
                if m != rank and m in order and rid not in order[m]:
                    return False   # a member that never served this role
                other = chosen.get((m, rid))
                if m != rank and other is not None and other != g.name:
                    return False
        for (m, rid), name in chosen.items():   # groups given earlier that contain this rank
            if rank in groups[name].ranks and (rid not in pick or pick[rid].name != name):
                return False
        return True

    def walk(i, chosen, spread):
        steps[0] += 1
        if steps[0] > limit:
            return
        if i == len(rank_ids):
            solutions.append((spread, dict(chosen)))
            return
        rank = rank_ids[i]
        roles = order[rank]
        for picks in _monotone(len(roles), len(cands[rank]), per_group):
            steps[0] += 1
            if steps[0] > limit:
                return
            pick = {rid: cands[rank][j] for rid, j in zip(roles, picks)}
            if ok(chosen, rank, pick):
                by = {}
                for rid, j in zip(roles, picks):
                    by.setdefault(j, []).append(tids[rank][rid])
                walk(i + 1, {**chosen, **{(rank, rid): g.name for rid, g in pick.items()}},
                     spread + sum(_spread(t) for t in by.values()))
    walk(0, {}, 0.0)
    return None if steps[0] > limit else solutions


def _monotone(n: int, k: int, cap: int):
    """Non-decreasing sequences of n indices into range(k), no index more than cap times."""
    if n == 0:
        yield ()
        return
    for combo in itertools.combinations_with_replacement(range(k), n):
        if all(combo.count(j) <= cap for j in set(combo)):
            yield combo


def file_calls(ranks: list) -> list:
    """The ranks with every call under its process group of the job, sized by the group's ranks: NCCL calls
    as the trace names them; Gloo calls by their worker thread (groups.assign_gloo; group None where that
    is not settled, and the job has more than one group)."""
    groups = merge(ranks)
    gloo = [r for r in ranks if r.backend == "gloo" and r.calls]
    where = {}
    if gloo and len(groups) > 1:
        where = assign_gloo(gloo, groups)
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
            calls.append(replace(c, group=name, group_size=size, bytes=nbytes))
        if any(i in r.shards and c.bytes is None for i, c in enumerate(calls)):
            r.notes.append(f"{os.path.basename(r.path)}: all-gathers recorded with one rank's shard and no known "
                           "group: their bytes (shard x group size) are not known, nothing is flagged on them")
        r.calls = calls
    return ranks
