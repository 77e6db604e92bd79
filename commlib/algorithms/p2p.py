"""The point-to-point layer every collective in commlib.algorithms is written on.

Validation every algorithm shares (_flat, _prepare: all ranks agree on numel, dtype and op before moving data),
reduction into a buffer, and _Messages: sends and receives that are recorded in a Trace, skipped when empty,
posted together as one group where NCCL needs it, and paced by an emulated network (commlib.network.emulate)
when one is active in this rank.

The same code runs over Gloo (CPU tensors) and NCCL (CUDA tensors). NCCL runs point-to-point calls
as kernels queued on a stream: a receive and a send between the same two ranks, posted one after
the other, would each wait behind the other on both sides. So a rank's sends and receives of one
step are posted together, as one group (dist.batch_isend_irecv), as NCCL's documentation asks for a
send/receive pair. Over Gloo the ring instead waits for each received segment and forwards it at
once, which pipelines the ring on the host.
"""

from __future__ import annotations


import torch
import torch.distributed as dist

from commlib import _validate as check

from commlib.algorithms.trace import Event, Trace

REDUCE_OPS = ("sum", "max", "min", "avg")  # what a reduction may do (torch.distributed.ReduceOp names)
GROUP_P2P: bool | None = None  # None: the ring posts each step as one group for CUDA tensors only; True/False force it
NETWORK = None  # set by commlib.network.emulate(): paces the messages that cross emulated node boundaries
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
    if op not in REDUCE_OPS:
        raise ValueError(f"op must be one of {REDUCE_OPS}, got {op!r}")
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
_OP_CODE = {o: i for i, o in enumerate(REDUCE_OPS)}


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


def send(t: torch.Tensor, dst: int) -> None:
    """dist.send(t, dst) through the layer every algorithm sends through (so paced under an emulated network)."""
    _Messages("p2p", None).send("send", 0, t, dst)


def recv(t: torch.Tensor, src: int) -> torch.Tensor:
    """dist.recv into t from src, through the same layer as send(); returns t."""
    _Messages("p2p", None).recv(t, src)
    return t


def network():
    """The emulated network active in this rank (commlib.network.emulate), or None."""
    return NETWORK


# ------------------------------------------------------------------------------ segments
SEGMENT_BYTES = 1 << 21  # ring pipelining: chunks travel in segments of at most this many bytes


def _segments(lo: int, hi: int, itemsize: int, segment_bytes: int | None = None) -> list[tuple[int, int]]:
    step = max(1, (segment_bytes or SEGMENT_BYTES) // itemsize)
    return [(a, min(a + step, hi)) for a in range(lo, hi, step)]


def _check_segment(segment_bytes) -> int | None:
    """None (SEGMENT_BYTES) or an int >= 1 (bytes)."""
    return None if segment_bytes is None else check.integer("segment_bytes", segment_bytes, low=1)
