"""Collectives written from scratch on torch.distributed point-to-point calls (isend/irecv/send/recv).

Call them inside a rank (the default process group initialised); each returns its result tensor.
The steps of each algorithm are the structure of its code. Pass trace=Trace() to record every
message this rank sends (who, to whom, which chunk, how many bytes).

    ring_all_reduce(t)          = ring_reduce_scatter + ring_all_gather, in place, like dist.all_reduce
    ring_reduce_scatter(t)      -> this rank's shard (sizes: shard_sizes(t.numel(), p))
    ring_all_gather(shard)      -> all shards concatenated in rank order (uneven shards allowed)
    naive_all_reduce(t)         reduce to rank 0, then rank 0 sends the result to everyone
    tree_broadcast / tree_reduce / tree_all_reduce     binomial trees            (MPI's: commlib.mpi_algorithms)
    recursive_doubling_all_reduce / rabenseifner_all_reduce   (non-powers of two folded as in MPICH; also MPI's)
    double_binary_tree_all_reduce / ring_broadcast     NCCL's Tree and broadcast (commlib.nccl_algorithms)
    hierarchical_all_reduce / multi_ring_all_reduce / pairwise_all_to_all   nodes of gpus_per_node ranks
                                (commlib.multinode; emulated slow links between nodes: topology.emulate)

Before moving data, every rank checks (one tiny built-in all-gather) that all ranks passed the same
numel, dtype and op; a mismatch raises the same ValueError on every rank instead of hanging.
check=False skips it (benchmarks do, to time the algorithm alone).

The same code runs over Gloo (CPU tensors) and NCCL (CUDA tensors). NCCL runs point-to-point calls
as kernels queued on a stream: a receive and a send between the same two ranks, posted one after
the other, would each wait behind the other on both sides. So a rank's sends and receives of one
step are posted together, as one group (dist.batch_isend_irecv), as NCCL's documentation asks for a
send/receive pair. Over Gloo the ring instead waits for each received segment and forwards it at
once, which pipelines the ring on the host.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from commlib.cost import shard_sizes
from commlib.trace import Event, Trace, replay

__all__ = ["Trace", "Event", "shard_sizes", "ring_all_reduce", "ring_reduce_scatter", "ring_all_gather",
           "naive_all_reduce", "tree_broadcast", "tree_reduce", "tree_all_reduce",
           "recursive_doubling_all_reduce", "rabenseifner_all_reduce", "replay", "OPS", "DTYPES",
           "double_binary_tree_all_reduce", "ring_broadcast",
           "hierarchical_all_reduce", "multi_ring_all_reduce", "pairwise_all_to_all"]  # the last ones: _ELSEWHERE

OPS = ("sum", "max", "min", "avg")
GROUP_P2P: bool | None = None  # None: the ring posts each step as one group for CUDA tensors only; True/False force it
NETWORK = None  # set by commlib.topology.emulate(): paces the messages that cross emulated node boundaries
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64)


# --------------------------------------------------------------------------------- helpers
def _flat(t: torch.Tensor, name: str = "t") -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in DTYPES:
        raise ValueError(f"{name}.dtype must be one of {[str(d) for d in DTYPES]}, got {t.dtype}")
    return t.view(-1) if t.is_contiguous() else t.contiguous().view(-1)


def _write_back(t: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    if flat.data_ptr() != t.data_ptr() or not t.is_contiguous():
        t.copy_(flat.view(t.shape))
    return t


def _check_op(op: str, dtype: torch.dtype) -> None:
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if op == "avg" and not dtype.is_floating_point:
        raise ValueError(f"op='avg' needs a floating-point tensor, got {dtype}; use op='sum' and divide")


def _agree(fn: str, check: bool, device, **fields: int) -> torch.Tensor | None:
    """All-gather a small header of ints from every rank; raise the same ValueError everywhere if they differ
    in any field named in `fields` except those starting with '_' (those are gathered, not compared)."""
    if not check and not any(k.startswith("_") for k in fields):
        return None
    p = dist.get_world_size()
    header = torch.tensor(list(fields.values()), dtype=torch.int64, device=device)
    table = torch.empty(p * len(fields), dtype=torch.int64, device=device)
    dist.all_gather_single(table, header)
    table = table.view(p, len(fields)).cpu()
    if check:
        for i, name in enumerate(fields):
            col = table[:, i].tolist()
            if not name.startswith("_") and len(set(col)) > 1:
                raise ValueError(f"{fn}: the ranks passed different {name}: {dict(enumerate(col))} "
                                 f"(rank: value); every rank must pass the same")
    return table


_DTYPE_CODE = {d: i for i, d in enumerate(DTYPES)}
_OP_CODE = {o: i for i, o in enumerate(OPS)}


def _prepare(name: str, t: torch.Tensor, op: str, check: bool, **extra: int) -> torch.Tensor:
    """The preamble of every reduction: flatten t, validate op, and make sure all ranks agree."""
    flat = _flat(t)
    _check_op(op, flat.dtype)
    _agree(name, check, flat.device, numel=flat.numel(), dtype=_DTYPE_CODE[flat.dtype], op=_OP_CODE[op], **extra)
    return flat


def _reduce_into(acc: torch.Tensor, incoming: torch.Tensor, op: str) -> None:
    if op in ("sum", "avg"):
        acc.add_(incoming)
    elif op == "max":
        torch.maximum(acc, incoming, out=acc)
    else:
        torch.minimum(acc, incoming, out=acc)


def _grouped(t: torch.Tensor) -> bool:
    return t.is_cuda if GROUP_P2P is None else bool(GROUP_P2P)


def _post_and_wait(ops: list) -> None:
    """Post receives and sends (dist.P2POp) as one group, then wait for all of them. With NCCL the wait is the
    stream's (what comes next on this rank's stream runs after them), not the host's."""
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()


class _Messages:
    """The point-to-point layer every algorithm sends through: records sends in the trace (marking those that
    cross a node boundary when nodes of gpus_per_node ranks are known), skips empty messages on both sides,
    and lets an emulated network (NETWORK) register each message and pace its completion."""

    def __init__(self, algorithm: str, trace: Trace | None, gpus_per_node: int | None = None,
                 segment_bytes: int | None = None):
        self.algorithm, self.trace, self.segment_bytes = algorithm, trace, _check_segment(segment_bytes)
        self.rank = dist.get_rank()
        self.net = NETWORK
        self.gpus_per_node = gpus_per_node or (self.net.gpus_per_node if self.net is not None else None)

    def record(self, phase, step, buf, dst, chunk, offset):
        if self.trace is not None:
            g = self.gpus_per_node
            self.trace.events.append(Event(self.algorithm, phase, step, self.rank, dst, chunk, offset,
                                           buf.numel(), buf.numel() * buf.element_size(),
                                           None if g is None else self.rank // g != dst // g))

    def isend(self, buf: torch.Tensor, dst: int):
        ticket = None if self.net is None else self.net.on_send(dst, buf.numel() * buf.element_size())
        work = dist.isend(buf, dst=dst)
        return work if ticket is None else _Paced(work, self.net, ticket)

    def irecv(self, buf: torch.Tensor, src: int):
        work = dist.irecv(buf, src=src)
        ticket = None if self.net is None else self.net.expect(src, buf.numel() * buf.element_size())
        return work if ticket is None else _Paced(work, self.net, ticket)

    def post_and_wait(self, ops: list) -> None:
        """_post_and_wait, with the emulated network told of each send and receive before, and pacing them after."""
        tickets = []
        if self.net is not None:
            for o in ops:
                nbytes = o.tensor.numel() * o.tensor.element_size()
                sending = o.op is dist.isend
                tickets.append(self.net.on_send(o.peer, nbytes) if sending else self.net.expect(o.peer, nbytes))
        _post_and_wait(ops)
        for ticket in tickets:
            if ticket is not None:
                self.net.complete(ticket)

    def exchange(self, phase: str, step: int, send: torch.Tensor | None, dst: int | None,
                 recv: torch.Tensor | None, src: int | None, chunk: int | None = None, offset: int = 0) -> None:
        """Send and receive at once (posted together, as one group), then wait for both."""
        ops = []
        if recv is not None and recv.numel():
            ops.append(dist.P2POp(dist.irecv, recv, src))
        if send is not None and send.numel():
            ops.append(dist.P2POp(dist.isend, send, dst))
            self.record(phase, step, send, dst, chunk, offset)
        self.post_and_wait(ops)

    def send(self, phase: str, step: int, buf: torch.Tensor, dst: int, chunk=None, offset: int = 0) -> None:
        if buf.numel():
            self.isend(buf, dst).wait()
            self.record(phase, step, buf, dst, chunk, offset)

    def recv(self, buf: torch.Tensor, src: int) -> None:
        if buf.numel():
            self.irecv(buf, src).wait()


class _Paced:
    """A send's or receive's work whose wait() also waits until the emulated network would have completed it."""

    def __init__(self, work, net, ticket):
        self.work, self.net, self.ticket = work, net, ticket

    def wait(self):
        self.work.wait()
        self.net.complete(self.ticket)
        return True


def _offsets(sizes: list[int]) -> list[int]:
    out, acc = [], 0
    for s in sizes:
        out.append(acc)
        acc += s
    return out + [acc]


# ------------------------------------------------------------------------------------ ring
SEGMENT_BYTES = 1 << 21  # ring pipelining: chunks travel in segments of at most this many bytes


def _segments(lo: int, hi: int, itemsize: int, segment_bytes: int | None = None) -> list[tuple[int, int]]:
    step = max(1, (segment_bytes or SEGMENT_BYTES) // itemsize)
    return [(a, min(a + step, hi)) for a in range(lo, hi, step)]


def _check_segment(segment_bytes) -> int | None:
    if segment_bytes is not None and (isinstance(segment_bytes, bool) or not isinstance(segment_bytes, int)
                                      or segment_bytes < 1):
        raise ValueError(f"segment_bytes must be an int >= 1 (bytes) or None for {SEGMENT_BYTES}, got {segment_bytes!r}")
    return segment_bytes


def _ring_position(ring: list[int] | None) -> tuple[list[int], int]:
    """(the ring as global ranks in ring order, this rank's position in it); None: all ranks in rank order."""
    r = dist.get_rank()
    if ring is None:
        return list(range(dist.get_world_size())), r
    return ring, ring.index(r)


def _ring_plans(flat, rings, op) -> list[tuple]:
    """For each (ring, base, sizes): (p, right, left, first chunk sent, chunk offsets in flat, 2 receive buffers)."""
    plans = []
    for ring, base, sizes in rings:
        ring, q = _ring_position(ring)
        buffers = None if op is None else [torch.empty(max(sizes), dtype=flat.dtype, device=flat.device)
                                           for _ in range(2)]  # step s receives into buffers[s % 2]
        plans.append((len(ring), ring[(q + 1) % len(ring)], ring[(q - 1) % len(ring)], q,
                      [base + o for o in _offsets(sizes)], buffers))
    return plans


def _rings_pass_(flat, rings, op, msgs, phase, step0, start) -> None:
    """p-1 steps around each ring in `rings`, all at once: (ring = global ranks in ring order, None for all
    ranks; base; sizes = its chunks, one per position, from flat[base]). At step s the rank at position q sends
    chunk q+start-s to the next position and receives chunk q+start-s-1 from the previous one: reducing it into
    its own copy (op given: reduce-scatter) or storing it (op None: all-gather). Chunks travel in segments.
    Pipelined (Gloo): a segment received at step s is forwarded at step s+1 as soon as it has arrived (and
    been reduced), while later segments are still on the wire; the rings take turns segment by segment.
    Grouped (NCCL, or GROUP_P2P): each step's receives and sends of every ring are posted as one group, as
    NCCL needs for a send/receive pair; the stream (NCCL) or the wait (Gloo) orders the steps."""
    plans = _ring_plans(flat, rings, op)
    itemsize = flat.element_size()
    p = plans[0][0]
    pending: list[list] = [[] for _ in plans]  # per ring, the previous step's receives: (work, lo, hi, buffer view)
    sends: list = []
    for s in range(p - 1):
        incoming, outgoing = [], []  # per ring: (left, [(lo, hi, receive buffer view)]), [(lo, hi, right, chunk)]
        for _, right, left, q, off, buffers in plans:
            send_c, recv_c = (q + start - s) % p, (q + start - s - 1) % p
            incoming.append((left, [(lo, hi, flat[lo:hi] if op is None else
                                     buffers[s % 2][lo - off[recv_c]:hi - off[recv_c]])
                                    for lo, hi in _segments(off[recv_c], off[recv_c + 1], itemsize, msgs.segment_bytes)]))
            outgoing.append([(lo, hi, right, send_c)
                             for lo, hi in _segments(off[send_c], off[send_c + 1], itemsize, msgs.segment_bytes)])
        if _grouped(flat):
            ops = [dist.P2POp(dist.irecv, view, left) for left, views in incoming for _, _, view in views]
            for lo, hi, right, send_c in (seg for segs in outgoing for seg in segs):
                ops.append(dist.P2POp(dist.isend, flat[lo:hi], right))
                msgs.record(phase, step0 + s, flat[lo:hi], right, send_c, lo)
            msgs.post_and_wait(ops)
            if op is not None:
                for lo, hi, view in (v for _, views in incoming for v in views):
                    _reduce_into(flat[lo:hi], view, op)
            continue
        posted = [[] for _ in plans]  # in the senders' order: rings may join the same two ranks in the same direction
        for j in range(max(len(views) for _, views in incoming)):
            for i, (left, views) in enumerate(incoming):
                if j < len(views):
                    lo, hi, view = views[j]
                    posted[i].append((msgs.irecv(view, left), lo, hi, view))
        for j in range(max(map(len, outgoing))):  # segment j of every ring in turn
            for i, segs in enumerate(outgoing):
                if j >= len(segs):
                    continue
                lo, hi, right, send_c = segs[j]
                if pending[i]:  # this segment is what arrived last step: wait for it, reduce it, pass it on
                    work, plo, phi, buf = pending[i][j]
                    work.wait()
                    if op is not None:
                        _reduce_into(flat[plo:phi], buf, op)
                sends.append(msgs.isend(flat[lo:hi], right))
                msgs.record(phase, step0 + s, flat[lo:hi], right, send_c, lo)
        pending = posted
    for work, lo, hi, buf in (w for ring in pending for w in ring):
        work.wait()
        if op is not None:
            _reduce_into(flat[lo:hi], buf, op)
    for work in sends:
        work.wait()


def _ring_reduce_scatter_(flat, sizes, op, msgs, step0=0, ring=None, base=0) -> None:
    """p-1 steps; at step s position q sends chunk q-s-1 on and adds chunk q-s-2 from its left into its own copy.
    Afterwards chunk q at position q holds the reduction over the ring."""
    _rings_pass_(flat, [(ring, base, sizes)], op, msgs, "reduce_scatter", step0, -1)


def _ring_all_gather_(flat, sizes, msgs, step0=0, ring=None, base=0) -> None:
    """p-1 steps; at step s position q forwards chunk q-s and stores chunk q-s-1 from its left in place.
    Starts with chunk q complete at position q; ends with every chunk everywhere."""
    _rings_pass_(flat, [(ring, base, sizes)], None, msgs, "all_gather", step0, 0)


def ring_reduce_scatter(t: torch.Tensor, op: str = "sum", trace: Trace | None = None,
                        check: bool = True, segment_bytes: int | None = None) -> torch.Tensor:
    """-> this rank's shard of the reduction, 1-D, shard_sizes(t.numel(), p)[rank] elements; t is unchanged.
    Each rank sends (p-1)/p * n bytes in p-1 steps, each chunk in segments of segment_bytes (default 2 MiB)."""
    _check_segment(segment_bytes)
    flat = _prepare("ring_reduce_scatter", t, op, check)
    p, r = dist.get_world_size(), dist.get_rank()
    sizes = shard_sizes(flat.numel(), p)
    work = flat.clone()
    if p > 1 and flat.numel():
        _ring_reduce_scatter_(work, sizes, op, _Messages("ring", trace, segment_bytes=segment_bytes))
    off = _offsets(sizes)
    shard = work[off[r]:off[r + 1]].clone()
    return shard.div_(p) if op == "avg" else shard


def ring_all_gather(shard: torch.Tensor, trace: Trace | None = None, check: bool = True,
                    segment_bytes: int | None = None) -> torch.Tensor:
    """-> every rank's shard concatenated in rank order (along dim 0; a 0-d shard counts as one element).
    Shards may differ in length along dim 0; dtype and the other dims must match. Each rank sends
    (p-1)/p * n bytes of the gathered n."""
    _check_segment(segment_bytes)
    flat = _flat(shard, "shard")
    row = math.prod(shard.shape[1:])  # elements per row along dim 0 (1 for 0-d and 1-d shards)
    table = _agree("ring_all_gather", check, flat.device, dtype=_DTYPE_CODE[flat.dtype], row=row,
                   ndim=shard.dim(), _numel=flat.numel())
    p, r = dist.get_world_size(), dist.get_rank()
    sizes = table[:, -1].tolist()
    out = torch.empty(sum(sizes), dtype=flat.dtype, device=flat.device)
    off = _offsets(sizes)
    out[off[r]:off[r + 1]] = flat
    if p > 1:
        _ring_all_gather_(out, sizes, _Messages("ring", trace, segment_bytes=segment_bytes))
    if shard.dim() <= 1:
        return out
    return out.view(-1, *shard.shape[1:])


def ring_all_reduce(t: torch.Tensor, op: str = "sum", trace: Trace | None = None,
                    check: bool = True, segment_bytes: int | None = None) -> torch.Tensor:
    """In place, like dist.all_reduce: reduce-scatter then all-gather around the ring.
    2(p-1) steps; each rank sends 2(p-1)/p * n bytes: 2(p-1) a + 2(p-1)/p n b + (p-1)/p n g. Each chunk
    travels in segments of at most segment_bytes (default SEGMENT_BYTES, 2 MiB), each one message:
    cost.pipelined_ring_time prices a smaller segment (chapter 8)."""
    _check_segment(segment_bytes)
    flat = _prepare("ring_all_reduce", t, op, check)
    p = dist.get_world_size()
    if p > 1 and flat.numel():
        sizes = shard_sizes(flat.numel(), p)
        msgs = _Messages("ring", trace, segment_bytes=segment_bytes)
        _ring_reduce_scatter_(flat, sizes, op, msgs)
        _ring_all_gather_(flat, sizes, msgs, step0=p - 1)
    if op == "avg":
        flat.div_(p)
    return _write_back(t, flat)


# ----------------------------------------------------------------------- naive (parameter server)
def naive_all_reduce(t: torch.Tensor, op: str = "sum", trace: Trace | None = None,
                     check: bool = True) -> torch.Tensor:
    """In place. Every rank sends its tensor to rank 0, which reduces and sends the result back to each
    rank in turn: rank 0 sends (p-1) n bytes and is the bottleneck, 2(p-1)(a + n b) + (p-1) n g."""
    flat = _prepare("naive_all_reduce", t, op, check)
    p, r = dist.get_world_size(), dist.get_rank()
    msgs = _Messages("naive", trace)
    if r == 0:
        incoming = torch.empty_like(flat)
        for src in range(1, p):
            msgs.recv(incoming, src)
            _reduce_into(flat, incoming, op)
        for step, dst in enumerate(range(1, p)):
            msgs.send("broadcast", p - 1 + step, flat, dst)
    else:
        msgs.send("reduce", r - 1, flat, 0)
        msgs.recv(flat, 0)
    if op == "avg":
        flat.div_(p)
    return _write_back(t, flat)


_ELSEWHERE = {  # collectives built on this module's layer, in modules of their own (imported on first use)
    "tree_broadcast": "mpi_algorithms", "tree_reduce": "mpi_algorithms", "tree_all_reduce": "mpi_algorithms",
    "recursive_doubling_all_reduce": "mpi_algorithms", "rabenseifner_all_reduce": "mpi_algorithms",
    "double_binary_tree_all_reduce": "nccl_algorithms", "ring_broadcast": "nccl_algorithms",
    "hierarchical_all_reduce": "multinode", "multi_ring_all_reduce": "multinode", "pairwise_all_to_all": "multinode",
}


def __getattr__(name: str):
    """MPI's textbook algorithms (commlib.mpi_algorithms), NCCL's (commlib.nccl_algorithms) and the collectives
    shaped by nodes (commlib.multinode) build on this module's point-to-point layer, so this module cannot
    import them at its top; alg.<name> finds them on first use."""
    if name in _ELSEWHERE:
        import importlib

        return getattr(importlib.import_module(f"commlib.{_ELSEWHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
