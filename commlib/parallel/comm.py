"""Collectives on a process group that count what this rank sends, per collective kind.

Every parallelism in this package talks through a Comm, so each run ends with a ledger
{kind: bytes this rank sent} that commlib.plan's closed forms can be held against.

    comm = Comm()                          # the whole world
    comm = Comm.split([[0, 1], [2, 3]])    # every rank calls it; each gets the Comm of its own group
    comm.all_reduce(t); comm.sent          # Counter({'all_reduce': 2(p-1)/p * t.nbytes})
    comm.log                               # [(kind, bytes), ...]: every call in order

impl="commlib" runs commlib.algorithms (ring reduce-scatter / all-gather / all-reduce, binomial
broadcast) and counts the messages they really sent (their Trace); it needs the whole world as the
group, since those algorithms run on the default group. impl="torch" runs torch.distributed's
built-ins on any group and counts what the same ring would send: ring all-reduce 2n - s_r - s_(r+1),
reduce-scatter n - s_r, all-gather n - s_(r+1), binomial broadcast children(r) * n
(cost.bytes_sent_by_rank; s = shard sizes). all_to_all and send count their exact payloads.
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.distributed as dist

from commlib import algorithms as alg
from commlib import cost

IMPLS = ("torch", "commlib")
REDUCTIONS = ("sum", "avg")  # what these parallelisms reduce: sums (partial results) and means (gradients)


class _Done:
    """The handle of an operation that already finished (the commlib impl is synchronous)."""

    def __init__(self, result):
        self.result = result

    def wait(self):
        return self.result


class _Pending:
    def __init__(self, work, finish):
        self.work, self.finish = work, finish

    def wait(self):
        self.work.wait()
        return self.finish()


class Comm:
    """One process group, its collectives, and the bytes this rank sent through them (`sent`, per kind)."""

    def __init__(self, ranks: list[int] | None = None, impl: str = "torch", group=None):
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
        world = dist.get_world_size()
        self.ranks = list(range(world)) if ranks is None else [int(r) for r in ranks]
        if dist.get_rank() not in self.ranks:
            raise ValueError(f"ranks {self.ranks} do not include this rank ({dist.get_rank()})")
        whole = self.ranks == list(range(world))
        if impl == "commlib" and not whole:
            raise ValueError(f"impl='commlib' runs on the whole world (ranks 0..{world - 1}), got ranks {self.ranks}; "
                             "use impl='torch' for a subgroup")
        if not whole and group is None:
            raise ValueError(f"ranks {self.ranks} are a subgroup: create its process group with Comm.split(partition)")
        self.impl = impl
        self.group = None if whole else group
        self.size = len(self.ranks)
        self.rank = self.ranks.index(dist.get_rank())
        self.sent: Counter = Counter()    # kind -> bytes this rank sent
        self.calls: Counter = Counter()   # kind -> number of calls
        self.log: list[tuple[str, int]] = []   # (kind, bytes sent) of every call, in order

    @classmethod
    def split(cls, partition: list[list[int]], impl: str = "torch") -> "Comm":
        """Create one group per list of ranks (every rank must call this, with the same partition) and
        return this rank's. The lists must cover every rank exactly once."""
        flat = sorted(r for ranks in partition for r in ranks)
        if flat != list(range(dist.get_world_size())):
            raise ValueError(f"partition must cover ranks 0..{dist.get_world_size() - 1} once each, got {partition}")
        mine = None
        for ranks in partition:
            group = dist.new_group(ranks)  # collective over the world: everyone creates every group
            if dist.get_rank() in ranks:
                mine = (ranks, group)
        return cls(mine[0], impl=impl, group=mine[1])

    def reset(self) -> None:
        self.sent.clear()
        self.calls.clear()
        self.log.clear()

    def _count(self, kind: str, nbytes: float) -> None:
        self.sent[kind] += int(nbytes)
        self.calls[kind] += 1
        self.log.append((kind, int(nbytes)))

    def _ring_bytes(self, op: str, numel: int, itemsize: int) -> int:
        return int(cost.bytes_sent_by_rank(op, numel * itemsize, self.size, "ring", itemsize)[self.rank])

    # ----------------------------------------------------------------------------- collectives
    def all_reduce(self, t: torch.Tensor, op: str = "sum", kind: str = "all_reduce") -> torch.Tensor:
        """In place, op in sum|avg; ring bytes 2(p-1)/p n."""
        _check_op(op)
        if self.size == 1:
            return t
        if self.impl == "commlib":
            trace = alg.Trace()
            alg.ring_all_reduce(t, op=op, trace=trace)
            self._count(kind, trace.bytes_sent)
            return t
        dist.all_reduce(t, group=self.group)
        if op == "avg":
            t.div_(self.size)
        self._count(kind, self._ring_bytes("all_reduce", t.numel(), t.element_size()))
        return t

    def reduce_scatter(self, flat: torch.Tensor, op: str = "sum", kind: str = "reduce_scatter") -> torch.Tensor:
        """-> this rank's shard (sizes cost.shard_sizes(numel, p), uneven allowed) of the reduced 1-D tensor."""
        _check_op(op)
        sizes = cost.shard_sizes(flat.numel(), self.size)
        if self.size == 1:
            return flat.clone()
        if self.impl == "commlib":
            trace = alg.Trace()
            shard = alg.ring_reduce_scatter(flat, op=op, trace=trace)
            self._count(kind, trace.bytes_sent)
            return shard
        chunk = sizes[0]  # torch's reduce_scatter_single wants equal shards: pad every shard to the largest
        padded = flat.contiguous()
        if sizes[-1] != chunk:
            padded = flat.new_zeros(chunk * self.size)
            start = 0
            for i, s in enumerate(sizes):
                padded[i * chunk:i * chunk + s] = flat[start:start + s]
                start += s
        out = flat.new_empty(chunk)
        dist.reduce_scatter_single(out, padded, group=self.group)
        if op == "avg":
            out.div_(self.size)
        self._count(kind, self._ring_bytes("reduce_scatter", flat.numel(), flat.element_size()))
        return out[:sizes[self.rank]]

    def all_gather(self, shard: torch.Tensor, sizes: list[int], kind: str = "all_gather", async_op: bool = False):
        """-> the shards of every rank concatenated (1-D; shard i has sizes[i] elements), or, with
        async_op=True, a handle whose wait() returns it (the gather runs meanwhile: prefetch)."""
        total = sum(sizes)
        if self.size == 1:
            out = shard.clone()
            return _Done(out) if async_op else out
        nbytes = self._ring_bytes("all_gather", total, shard.element_size())
        if self.impl == "commlib":
            trace = alg.Trace()
            out = alg.ring_all_gather(shard, trace=trace)
            self._count(kind, trace.bytes_sent)
            return _Done(out) if async_op else out
        chunk = max(sizes)
        even = min(sizes) == chunk
        padded = shard.contiguous()
        if not even:  # torch's all_gather_single wants equal shards: pad, then cut the padding out
            padded = shard.new_zeros(chunk)
            padded[:shard.numel()] = shard
        gathered = shard.new_empty(chunk * self.size)
        work = dist.all_gather_single(gathered, padded, group=self.group, async_op=True)
        self._count(kind, nbytes)

        def finish():
            if even:
                return gathered
            return torch.cat([gathered[i * chunk:i * chunk + s] for i, s in enumerate(sizes)])
        handle = _Pending(work, finish)
        return handle if async_op else handle.wait()

    def broadcast(self, t: torch.Tensor, src: int = 0, kind: str = "broadcast") -> torch.Tensor:
        """In place from group rank src; counted as a binomial tree: children(r) * n."""
        if self.size == 1:
            return t
        nbytes = t.numel() * t.element_size()
        if self.impl == "commlib":
            trace = alg.Trace()
            alg.tree_broadcast(t, src=src, trace=trace)
            self._count(kind, trace.bytes_sent)
            return t
        dist.broadcast(t, src=self.ranks[src], group=self.group)
        sent = cost.bytes_sent_by_rank("broadcast", nbytes, self.size, "tree", t.element_size(), root=src)
        self._count(kind, sent[self.rank])
        return t

    def all_to_all(self, x: torch.Tensor, send_splits: list[int], recv_splits: list[int],
                   kind: str = "all_to_all") -> torch.Tensor:
        """Rows x[send block j] go to group rank j; -> the rows received, in group-rank order (dim 0).
        Counts the rows sent to other ranks: sum over j != r of send_splits[j] * row bytes."""
        row = x[0:1].numel() * x.element_size() if x.dim() > 1 else x.element_size()
        out = x.new_empty((sum(recv_splits), *x.shape[1:]))
        self._count(kind, sum(s for j, s in enumerate(send_splits) if j != self.rank) * row)
        if self.size == 1:
            out.copy_(x)
            return out
        if self.impl == "torch":
            dist.all_to_all_single(out, x.contiguous(), recv_splits, send_splits, group=self.group)
            return out
        send_off, recv_off = _offsets(send_splits), _offsets(recv_splits)
        out[recv_off[self.rank]:recv_off[self.rank + 1]] = x[send_off[self.rank]:send_off[self.rank + 1]]
        for step in range(1, self.size):  # pairwise exchange: at step s send to r+s, receive from r-s
            dst, src = (self.rank + step) % self.size, (self.rank - step) % self.size
            ops = []
            if recv_splits[src]:
                ops.append(dist.P2POp(dist.irecv, out[recv_off[src]:recv_off[src + 1]], self.ranks[src]))
            if send_splits[dst]:
                ops.append(dist.P2POp(dist.isend, x[send_off[dst]:send_off[dst + 1]].contiguous(), self.ranks[dst]))
            if ops:
                for work in dist.batch_isend_irecv(ops):
                    work.wait()
        return out

    # ------------------------------------------------------------------------------ point to point
    def isend(self, t: torch.Tensor, dst: int, kind: str = "send"):
        """Start sending t (contiguous) to group rank dst; -> the work: wait() on it before changing t."""
        if not t.is_contiguous():
            raise ValueError("isend needs a contiguous tensor (a temporary copy could be freed mid-send)")
        self._count(kind, t.numel() * t.element_size())
        return dist.isend(t, dst=self.ranks[dst], group=self.group)

    def recv(self, t: torch.Tensor, src: int) -> torch.Tensor:
        dist.recv(t, src=self.ranks[src], group=self.group)
        return t


def _check_op(op: str) -> None:
    if op not in REDUCTIONS:
        raise ValueError(f"op must be one of {REDUCTIONS}, got {op!r}")


def _offsets(sizes: list[int]) -> list[int]:
    out = [0]
    for s in sizes:
        out.append(out[-1] + s)
    return out
