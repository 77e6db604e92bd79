"""What torch's records leave out: a collective's root and reduce op, logged in every rank and, in debug mode,
compared across its group after every call.

torch 2.13's Flight Recorder entry holds a collective's type, sizes and dtypes, not its root or its reduce op, and
DETAIL's fingerprint (ProcessGroupWrapper.cpp, serialize_fingerprint: op type, sequence number, dtypes, device
types, shapes) holds neither either. So neither sees a broadcast whose src differs on one rank, nor an all_reduce
with MAX on one rank and SUM on the others; Gloo runs the latter and returns wrong numbers, with no error.

install(check) wraps ProcessGroup.allreduce / broadcast / reduce in this process. Every call is counted per group
and its (op, root, reduce op) kept (the last LOG_SIZE; snapshot() gives them to the diagnosis, which compares the
ranks of a hung run). With check=True (Cluster(debug=True)), each rank then writes that fingerprint to the group's
store under the call's number and reads every member's: on a difference every rank raises CallMismatch, whose
message names the ranks outside the majority ("[culprits: 2]"), or every rank when there is none.
"""

from __future__ import annotations

import threading
from collections import deque

LOG_SIZE = 16
MARK = "commlib call check"
_lock = threading.Lock()
_count: dict = {}      # group name -> calls counted
_log: deque = deque(maxlen=LOG_SIZE)
_check = [False]


class CallMismatch(RuntimeError):
    """The ranks of a group called the same collective with different roots or reduce ops."""


def _op_name(opts) -> str:
    op = getattr(opts, "reduceOp", None)
    if op is None:
        return ""
    name = str(getattr(op, "op", op))
    return name.split(".")[-1]


def _options(args, kwargs):
    from torch._C._distributed_c10d import AllreduceOptions, BroadcastOptions, ReduceOptions

    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (AllreduceOptions, BroadcastOptions, ReduceOptions)):
            return a
    return None


def fingerprint(kind: str, opts, members: list) -> str:
    """'broadcast root=0' / 'all_reduce op=SUM' / 'reduce root=1 op=MAX' (a root as a global rank)."""
    parts = [kind]
    root = getattr(opts, "rootRank", None)
    if root is not None and kind != "all_reduce":
        parts.append(f"root={members[root] if 0 <= root < len(members) else root}")
    op = _op_name(opts)
    if op:
        parts.append(f"op={op}")
    return " ".join(parts)


def _note(pg, kind: str, opts) -> None:
    from torch.distributed import distributed_c10d as c10d

    members = sorted(c10d._world.pg_group_ranks.get(pg, {}))
    name = c10d._world.pg_names.get(pg, "")
    what = fingerprint(kind, opts, members)
    with _lock:
        _count[name] = n = _count.get(name, 0) + 1
        _log.append({"group": name, "members": members, "n": n, "call": what})
    if _check[0] and len(members) > 1:
        _compare(pg, name, members, n, what)


def _compare(pg, name: str, members: list, n: int, what: str) -> None:
    import torch.distributed as dist

    store, me = pg.get_group_store(), dist.get_rank()
    store.set(f"{MARK}/{n}/{me}", what)
    got = {r: store.get(f"{MARK}/{n}/{r}").decode() for r in members}  # blocks until each member has called
    if n > 2:  # every member has read #n-2: each wrote #n-1 after it had read all of #n-2
        store.delete_key(f"{MARK}/{n - 2}/{me}")
    if len(set(got.values())) < 2:
        return
    classes: dict = {}
    for r, fp in sorted(got.items()):
        classes.setdefault(fp, []).append(r)
    sizes = sorted((len(v) for v in classes.values()), reverse=True)
    majority = max(classes.values(), key=len) if sizes[0] > sizes[1] else []
    culprits = sorted(r for v in classes.values() if v is not majority for r in v)
    said = "; ".join(f"{_ranks(v)} called {fp}" for fp, v in sorted(classes.items(), key=lambda kv: kv[1] == majority))
    raise CallMismatch(f"{MARK}: mismatch in process group {name} at its call #{n}: {said} "
                       f"[culprits: {', '.join(map(str, culprits))}]")


def _ranks(ranks) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def install(check: bool) -> None:
    """Wrap ProcessGroup.allreduce/broadcast/reduce (once per process); check: compare across the group (debug)."""
    from torch._C._distributed_c10d import ProcessGroup

    _check[0] = bool(check)
    if getattr(ProcessGroup.allreduce, "_commlib", False):
        return

    def wrap(method, kind):
        def call(self, *args, **kwargs):
            work = method(self, *args, **kwargs)  # issued first: the records and torch's own checks are unchanged
            _note(self, kind, _options(args, kwargs))
            return work
        call._commlib = True
        return call

    ProcessGroup.allreduce = wrap(ProcessGroup.allreduce, "all_reduce")
    ProcessGroup.broadcast = wrap(ProcessGroup.broadcast, "broadcast")
    ProcessGroup.reduce = wrap(ProcessGroup.reduce, "reduce")


def set_checking(on: bool) -> None:
    """Switch the cross-rank comparison on or off in this rank (every rank of a group must do the same, at the
    same point of its calls): chapter 10 times a collective with and without it."""
    _check[0] = bool(on)


def snapshot() -> list:
    """The last LOG_SIZE calls of this rank: [{group, members, n, call}], oldest first."""
    with _lock:
        return [dict(e) for e in _log]
