"""Point-to-point bookkeeping inside a rank, and the matching of what the ranks posted.

torch's Flight Recorder does not record send/recv on Gloo (torch 2.13: ProcessGroupGloo records collectives
only), and a rank blocked in `work.wait()` of an isend/irecv is not inside any torch.distributed function, so
neither the records nor the stack tell who waits for whom. Every p2p operation reaches the process group's
`send`/`recv`/`recv_anysource` (blocking send/recv, isend/irecv and batch_isend_irecv alike), so `install()`
wraps those three methods: each posted operation is counted per (direction, peer, tag) and, while it has not
completed, kept with its Work. A snapshot holds the counts and the pending operations.

Matching (`unmatched`): sends from a to b and receives at b from a pair up in order, as MPI's and Gloo's
non-overtaking rule has it, so the k-th send a -> b (one tag) is matched iff b posted at least k receives from
a with that tag (or from any source). Counting is enough: no clock, no order across peers.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter

MAX_PENDING = 256   # pending operations kept per rank (older ones are dropped from the list, never from the counts)
_lock = threading.Lock()
_posted: Counter = Counter()       # ("send"|"recv", global peer or None (any source), tag) -> operations posted
_pending: list = []                # [entry dict, Work or None]
_task_start: Counter = Counter()   # _posted when the current task started (mark_task)
_SKIP = (os.path.join("torch", ""), os.path.join("commlib", "cluster", ""))


def _where() -> str:
    """'fn() line 12 of file.py': the innermost frame outside torch and this package (the caller's line)."""
    f = sys._getframe(2)
    while f is not None and any(s in f.f_code.co_filename for s in _SKIP):
        f = f.f_back
    if f is None:
        return ""
    name = f.f_code.co_filename
    return f"{f.f_code.co_name}() line {f.f_lineno}" + ("" if name.startswith("<") else f" of {os.path.basename(name)}")


def _post(kind: str, group, tensors, peer, tag, work) -> None:
    import torch.distributed as dist

    try:
        peer = None if peer is None else dist.get_global_rank(group, peer)
    except Exception:  # a group torch no longer knows: keep the group rank
        pass
    t = tensors[0] if tensors else None
    entry = {"op": kind, "peer": peer, "tag": int(tag),
             "tensor": None if t is None else {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")},
             "where": _where()}
    with _lock:
        _posted[(kind, peer, int(tag))] += 1
        entry["index"] = _posted[(kind, peer, int(tag))]
        _pending[:] = [p for p in _pending if not _done(p[1])][-(MAX_PENDING - 1):] + [[entry, work]]


def _done(work) -> bool:
    try:
        return work is not None and work.is_completed()
    except Exception:
        return True


def install() -> None:
    """Wrap ProcessGroup.send/recv/recv_anysource in this process (once; call after importing torch.distributed)."""
    from torch._C._distributed_c10d import ProcessGroup

    if getattr(ProcessGroup.send, "_commlib", False):
        return
    send, recv, recv_any = ProcessGroup.send, ProcessGroup.recv, ProcessGroup.recv_anysource

    def send_(self, tensors, dst, tag=0):
        work = send(self, tensors, dst, tag)
        _post("send", self, tensors, dst, tag, work)
        return work

    def recv_(self, tensors, src, tag=0):
        work = recv(self, tensors, src, tag)
        _post("recv", self, tensors, src, tag, work)
        return work

    def recv_any_(self, tensors, tag=0):
        work = recv_any(self, tensors, tag)
        _post("recv", self, tensors, None, tag, work)
        return work

    for f in (send_, recv_, recv_any_):
        f._commlib = True
    ProcessGroup.send, ProcessGroup.recv, ProcessGroup.recv_anysource = send_, recv_, recv_any_


def reset() -> None:
    with _lock:
        _posted.clear()
        _pending.clear()
        _task_start.clear()


def mark_task() -> None:
    """A task starts: what it posts is counted apart too ("task" in snapshot())."""
    with _lock:
        _task_start.clear()
        _task_start.update(_posted)


def snapshot() -> dict:
    """{"posted": {(op, peer, tag): count}, "task": the same, posted since the task started, "pending": [entries
    not completed]} of this rank."""
    with _lock:
        task = {k: n - _task_start.get(k, 0) for k, n in _posted.items() if n > _task_start.get(k, 0)}
        return {"posted": dict(_posted), "task": task, "pending": [dict(e) for e, w in _pending if not _done(w)]}


# ------------------------------------------------------------------------------ parent side
def unmatched(p2p: dict) -> list[tuple[int, dict]]:
    """{rank: snapshot() or None} -> [(rank, entry)] for every pending operation whose peer never posted the
    matching one (by the in-order rule of the module docstring). A peer without a snapshot (dead) matches
    nothing; a receive from any source is matched by any send to this rank."""
    out = []
    for rank, snap in sorted(p2p.items()):
        for e in (snap or {}).get("pending", []):
            peer = e["peer"]
            if peer is None or peer == rank:
                continue
            other = (p2p.get(peer) or {}).get("posted")
            if other is None:
                out.append((rank, e))
                continue
            mirror = "recv" if e["op"] == "send" else "send"
            posted = other.get((mirror, rank, e["tag"]), 0)
            if e["op"] == "send":
                posted += other.get(("recv", None, e["tag"]), 0)
            if posted < e["index"]:
                out.append((rank, e))
    return out
