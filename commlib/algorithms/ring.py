"""Ring reduce-scatter, all-gather and all-reduce (Patarasuk and Yuan 2009; Baidu's ring all-reduce; NCCL's Ring).

    ring_all_reduce(t)          = ring_reduce_scatter + ring_all_gather, in place, like dist.all_reduce
    ring_reduce_scatter(t)      -> this rank's shard (sizes: shard_sizes(t.numel(), p))
    ring_all_gather(shard)      -> all shards concatenated in rank order (uneven shards allowed)

Each rank sends 2(p-1)/p * n bytes for an all-reduce, (p-1)/p * n for the other two; chunks travel in segments.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from commlib.algorithms.p2p import (_DTYPE_CODE, Trace, _agree, _check_segment, _grouped, _Messages, _offsets,
                                    _prepare, _reduce_into, _segments, _flat, _write_back)
from commlib.cost import shard_sizes

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
    cost.pipelined_ring_time prices a smaller segment (chapter 9)."""
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
