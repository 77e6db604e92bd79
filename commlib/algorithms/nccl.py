"""Two of NCCL's own algorithms, written from send/recv like commlib.algorithms: the pipelined double
binary tree all-reduce (NCCL's "Tree") and the pipelined chain broadcast (NCCL's "Ring" broadcast).

NCCL has neither recursive doubling nor Rabenseifner. For all-reduce it chooses between Ring, Tree, NVLS,
CollNet (and PAT for all-gather / reduce-scatter) per call, from its tuning model (NCCL 2.30.7
src/graph/tuning.cc). Tree is two binary trees (src/graph/trees.cc; Sanders, Speck, Traeff 2009), each
carrying half of the data, cut into segments that stream up (reduce) and down (broadcast) at once:
ring-like bandwidth (2n bytes per rank) with logarithmic latency (2 h hops for trees of height h).

Both run on a global schedule of ticks. At tick k every rank posts all of that tick's receives and sends as
one group and waits for them, so a send and its receive are always in the same group on both sides: what
NCCL needs for point-to-point (see commlib.algorithms), and pipelined on Gloo as well. In each tree, a rank
whose subtree has height u sends segment j up at tick j + u (its children's copies of segment j arrived in
earlier ticks); the result of segment j reaches a rank at depth d at tick j + h + d.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from commlib.algorithms.p2p import (_DTYPE_CODE, Trace, _agree, _check_segment, _flat, _Messages, _prepare, _reduce_into,
                                _segments, _write_back)
from commlib.cost import double_binary_tree, shard_sizes


def _heights(tree) -> tuple[list[int], list[int]]:
    """-> (height of each rank's subtree, depth of each rank)."""
    p = len(tree)
    depth = [0] * p
    for r in range(p):
        q = r
        while tree[q][0] >= 0:
            q, depth[r] = tree[q][0], depth[r] + 1
    up = [0] * p
    for r in sorted(range(p), key=lambda x: -depth[x]):  # deepest first: children before parents
        if tree[r][1]:
            up[r] = 1 + max(up[c] for c in tree[r][1])
    return up, depth


def double_binary_tree_all_reduce(t: torch.Tensor, op: str = "sum", trace: Trace | None = None,
                                  check: bool = True, segment_bytes: int | None = None) -> torch.Tensor:
    """In place, like dist.all_reduce: NCCL's Tree. The first tree reduces and broadcasts the first half of
    the elements, the second tree the rest; each rank sends its half up once and down once per child:
    2n bytes at most (n at p = 2). Pipelined in segments of segment_bytes."""
    seg = _check_segment(segment_bytes)
    flat = _prepare("double_binary_tree_all_reduce", t, op, check)
    p, r = dist.get_world_size(), dist.get_rank()
    if p > 1 and flat.numel():
        msgs = _Messages("double_binary_tree", trace)
        half = shard_sizes(flat.numel(), 2)
        plans = []  # per tree: (parent, children, segments, up-height, depth, tree height, receive buffers)
        for k, tree in enumerate(double_binary_tree(p)):
            lo = 0 if k == 0 else half[0]
            segs = _segments(lo, lo + half[k], flat.element_size(), seg)
            up, depth = _heights(tree)
            parent, children = tree[r]
            width = max((b - a for a, b in segs), default=0)
            buffers = {c: torch.empty(width, dtype=flat.dtype, device=flat.device) for c in children}
            plans.append((parent, children, segs, up, depth, max(up), buffers))
        ticks = max(len(segs) + 2 * h + 1 for _, _, segs, _, _, h, _ in plans)
        for tick in range(ticks):
            ops, arrived = [], []
            for parent, children, segs, up, depth, h, buffers in plans:
                for c in children:                     # up: child c sends segment tick - up[c]
                    j = tick - up[c]
                    if 0 <= j < len(segs):
                        a, b = segs[j]
                        ops.append(dist.P2POp(dist.irecv, buffers[c][:b - a], c))
                        arrived.append((a, b, buffers[c]))
                j = tick - up[r]
                if parent >= 0 and 0 <= j < len(segs):
                    a, b = segs[j]
                    ops.append(dist.P2POp(dist.isend, flat[a:b], parent))
                    msgs.record("reduce", tick, flat[a:b], parent, None, a)
                j = tick - h - depth[r]                # down: the result of segment j arrives at depth d
                if parent >= 0 and 0 <= j < len(segs):
                    a, b = segs[j]
                    ops.append(dist.P2POp(dist.irecv, flat[a:b], parent))
                j = tick - h - depth[r] - 1            # ... and is forwarded to the children one tick later
                if 0 <= j < len(segs):
                    a, b = segs[j]
                    for c in children:
                        ops.append(dist.P2POp(dist.isend, flat[a:b], c))
                        msgs.record("broadcast", tick, flat[a:b], c, None, a)
            msgs.post_and_wait(ops)
            for a, b, buf in arrived:
                _reduce_into(flat[a:b], buf[:b - a], op)
    if op == "avg":
        flat.div_(p)
    return _write_back(t, flat)


def ring_broadcast(t: torch.Tensor, src: int = 0, trace: Trace | None = None, check: bool = True,
                   segment_bytes: int | None = None) -> torch.Tensor:
    """In place, like dist.broadcast: NCCL's broadcast, a pipelined chain src -> src+1 -> ... -> src-1.
    Every rank but the last forwards n bytes: (p-1) a + n b once the pipeline is full, not ceil(lg p)
    whole-tensor hops like a binomial tree."""
    seg = _check_segment(segment_bytes)
    p, r = dist.get_world_size(), dist.get_rank()
    if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < p:
        raise ValueError(f"src must be a rank in [0, {p - 1}], got {src!r}")
    flat = _flat(t)
    _agree("ring_broadcast", check, flat.device, numel=flat.numel(), dtype=_DTYPE_CODE[flat.dtype], src=src)
    if p > 1 and flat.numel():
        msgs = _Messages("ring", trace)
        q = (r - src) % p                              # position in the chain
        segs = _segments(0, flat.numel(), flat.element_size(), seg)
        for tick in range(len(segs) + p - 1):          # position q receives segment tick - q + 1, sends tick - q
            ops = []
            j = tick - q + 1
            if q > 0 and 0 <= j < len(segs):
                a, b = segs[j]
                ops.append(dist.P2POp(dist.irecv, flat[a:b], (r - 1) % p))
            j = tick - q
            if q < p - 1 and 0 <= j < len(segs):
                a, b = segs[j]
                ops.append(dist.P2POp(dist.isend, flat[a:b], (r + 1) % p))
                msgs.record("broadcast", tick, flat[a:b], (r + 1) % p, None, a)
            msgs.post_and_wait(ops)
    return _write_back(t, flat)
