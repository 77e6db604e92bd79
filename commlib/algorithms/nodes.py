"""Collectives shaped by nodes, on the same point-to-point layer as commlib.algorithms (use them from there).

Nodes are groups of gpus_per_node consecutive ranks (N = p / g nodes). Pass trace=Trace() to see every
message; each is marked inter_node True or False. Their bytes per rank, intra- and inter-node apart,
are commlib.topology.bytes_by_rank; their times, commlib.topology.collective_time.

    hierarchical_all_reduce(t, g)   reduce-scatter inside the node, all-reduce of each shard across nodes
                                    (GPU i with GPU i of every node), all-gather inside the node
    multi_ring_all_reduce(t, g)     g rings at once on g slices of t; ring c leaves every node from GPU c,
                                    so a node's g off-node flows use g different NICs (NCCL's channels)
    pairwise_all_to_all(t)          p-1 steps: at step s rank r sends block r+s and receives block r-s
"""

from __future__ import annotations

from numbers import Integral

import torch
import torch.distributed as dist

from commlib.algorithms.p2p import _DTYPE_CODE, _agree, _flat, _Messages, _offsets, _prepare, _write_back
from commlib.algorithms.ring import _ring_all_gather_, _ring_reduce_scatter_, _rings_pass_
from commlib.algorithms.trace import Trace
from commlib.cost import shard_sizes
from commlib.topology import multi_ring_orders


def _nodes(name: str, gpus_per_node) -> tuple[int, int]:
    """-> (nodes, gpus_per_node), or a ValueError unless gpus_per_node divides the world size."""
    p = dist.get_world_size()
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, Integral) or gpus_per_node < 1:
        raise ValueError(f"{name}: gpus_per_node must be an int >= 1, got {gpus_per_node!r}")
    g = int(gpus_per_node)
    if p % g:
        raise ValueError(f"{name}: the world size ({p}) must be a multiple of gpus_per_node ({g})")
    return p // g, g


def hierarchical_all_reduce(t: torch.Tensor, gpus_per_node: int, op: str = "sum", trace: Trace | None = None,
                            check: bool = True) -> torch.Tensor:
    """In place, like dist.all_reduce. Three ring phases, one after another:
    2(g-1) a_intra + 2(g-1)/g n b_intra  +  2(N-1) a_inter + 2(N-1)/N (n/g) b_inter  (+ (p-1)/p n g);
    with k NICs the g rails' flows share them: b_inter -> ceil(g/k) b_inter (commlib.topology)."""
    nodes, g = _nodes("hierarchical_all_reduce", gpus_per_node)
    flat = _prepare("hierarchical_all_reduce", t, op, check, gpus_per_node=g)
    p, r = dist.get_world_size(), dist.get_rank()
    node, local = divmod(r, g)
    msgs = _Messages("hierarchical", trace, gpus_per_node=g)
    if p > 1 and flat.numel():
        sizes = shard_sizes(flat.numel(), g)
        off = _offsets(sizes)
        in_node = [node * g + j for j in range(g)]
        rail = [m * g + local for m in range(nodes)]  # GPU `local` of every node
        if g > 1:  # 1. afterwards shard `local` of this GPU holds its node's sum
            _ring_reduce_scatter_(flat, sizes, op, msgs, 0, in_node)
        lo, hi = off[local], off[local + 1]
        if nodes > 1 and hi > lo:  # 2. all-reduce that shard along the rail: now it holds everyone's sum
            sub = shard_sizes(hi - lo, nodes)
            _ring_reduce_scatter_(flat, sub, op, msgs, g - 1, rail, base=lo)
            _ring_all_gather_(flat, sub, msgs, g - 1 + nodes - 1, rail, base=lo)
        if g > 1:  # 3. share the finished shards inside the node
            _ring_all_gather_(flat, sizes, msgs, g - 1 + 2 * (nodes - 1), in_node)
    if op == "avg":
        flat.div_(p)
    return _write_back(t, flat)


def multi_ring_all_reduce(t: torch.Tensor, gpus_per_node: int, op: str = "sum", trace: Trace | None = None,
                          check: bool = True) -> torch.Tensor:
    """In place. g rings (topology.multi_ring_orders) run at once, ring c on slice c of t: per rank the ring's
    2(p-1)/p n bytes in 2(p-1) steps, but only 1/g of them off-node, spread over the node's NICs: busbw up
    to k NICs' worth where the flat ring gets one."""
    nodes, g = _nodes("multi_ring_all_reduce", gpus_per_node)
    flat = _prepare("multi_ring_all_reduce", t, op, check, gpus_per_node=g)
    p = dist.get_world_size()
    msgs = _Messages("multi_ring", trace, gpus_per_node=g)
    if p > 1 and flat.numel():
        parts = shard_sizes(flat.numel(), g)
        starts = _offsets(parts)
        rings = [(order, starts[c], shard_sizes(parts[c], p)) for c, order in enumerate(multi_ring_orders(nodes, g))]
        _rings_pass_(flat, rings, op, msgs, "reduce_scatter", 0, -1)
        _rings_pass_(flat, rings, None, msgs, "all_gather", p - 1, 0)
    if op == "avg":
        flat.div_(p)
    return _write_back(t, flat)


def pairwise_all_to_all(t: torch.Tensor, gpus_per_node: int | None = None, trace: Trace | None = None,
                        check: bool = True) -> torch.Tensor:
    """-> a new tensor like dist.all_to_all_single(out, t): t splits along dim 0 into p equal blocks, block j
    goes to rank j, and out's block j comes from rank j. p-1 steps, each a send and a receive at once:
    (p-1)(a + n/p b), (p-1)/p n bytes per rank. gpus_per_node only marks the trace's inter_node."""
    flat = _flat(t)
    p, r = dist.get_world_size(), dist.get_rank()
    if gpus_per_node is not None:
        _nodes("pairwise_all_to_all", gpus_per_node)
    if t.dim() == 0 or t.shape[0] % p:
        raise ValueError(f"pairwise_all_to_all: t.shape[0] must be a multiple of the world size ({p}), "
                         f"got shape {tuple(t.shape)}")
    _agree("pairwise_all_to_all", check, flat.device, numel=flat.numel(), dtype=_DTYPE_CODE[flat.dtype])
    block = flat.numel() // p
    out = torch.empty_like(flat)
    out[r * block:(r + 1) * block] = flat[r * block:(r + 1) * block]
    msgs = _Messages("pairwise", trace, gpus_per_node)
    for s in range(1, p):
        dst, src = (r + s) % p, (r - s) % p
        msgs.exchange("all_to_all", s - 1, flat[dst * block:(dst + 1) * block], dst,
                      out[src * block:(src + 1) * block], src, chunk=dst, offset=dst * block)
    return out.view(t.shape)
