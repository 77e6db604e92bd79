"""The one registry of collective algorithms: which op each runs, who implements it, the function in
commlib.algorithms that runs it, and what it costs. Adding an algorithm is one `register(...)` here (plus its
code in commlib.algorithms); commlib.cost prices it, `python -m commlib bench` runs it, the notebooks list it.

Two levels. On one link (ring, tree, ...), each entry carries its pricing, following its schedule:
  sent(n, p, shards, root, numel, itemsize) -> bytes each rank sends (uneven shards included)
  busiest(n, p)                            -> closed form for the busiest rank (n divisible by p)
  path(n, p)                               -> (messages, bytes, reduced bytes) on the slowest rank's path (p > 1)
Across nodes (flat_ring, multi_ring, ...), commlib.topology prices them from the Topology; entries name them.
Pure Python: no torch (commlib.plan and the widgets price without it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from commlib.cost.schedules import (binomial_children, dbtree_sent, double_binary_tree, fold_to_power_of_two,
                                    halving_ranges, shard_sizes, tree_height)


@dataclass(frozen=True)
class Algorithm:
    op: str
    name: str
    family: str                  # who implements it: MPI, NCCL, both, or neither
    function: str | None         # its name in commlib.algorithms (None: priced, not run from send/recv)
    level: str = "link"          # "link": one flat group of ranks; "nodes": shaped by nodes (commlib.topology)
    sent: Callable | None = None
    busiest: Callable | None = None
    path: Callable | None = None
    power_of_two: bool = False   # defined only for power-of-two world sizes
    per_node: bool = False       # the function takes gpus_per_node after the tensor


REGISTRY: dict[tuple[str, str], Algorithm] = {}


def register(op: str, name: str, family: str, function: str | None, **kw) -> Algorithm:
    if (op, name) in REGISTRY:
        raise ValueError(f"({op!r}, {name!r}) is registered already")
    REGISTRY[op, name] = entry = Algorithm(op, name, family, function, **kw)
    return entry


def algorithms(level: str = "link", op: str | None = None) -> tuple[str, ...]:
    """Names in registration order (each once), of one level, optionally for one op."""
    names = [a.name for a in REGISTRY.values() if a.level == level and (op is None or a.op == op)]
    return tuple(dict.fromkeys(names))


def _rel(r: int, root: int, p: int) -> int:
    return (r - root) % p


def _frac(p: int) -> float:
    return (p - 1) / p


def _lg2(p: int) -> int:       # floor(lg p)
    return p.bit_length() - 1


def _clg(p: int) -> int:       # ceil(lg p)
    return (p - 1).bit_length()


def _folded(p: int) -> int:    # MPICH's extra fold and unfold for non-powers of two
    return 0 if p & (p - 1) == 0 else 1


# ------------------------------------------------------------------------------------ all_reduce
def _rd_sent(n, p, s, root, numel, itemsize):
    out = []
    for r in range(p):
        new, p2 = fold_to_power_of_two(r, p)
        out.append(n if new is None else int(math.log2(p2)) * n + (n if r < 2 * (p - p2) else 0.0))
    return out   # a folded-out rank hands its data over and gets the result back


def _rabenseifner_sent(n, p, s, root, numel, itemsize):
    out = []
    for r in range(p):
        new, p2 = fold_to_power_of_two(r, p)
        if new is None:
            out.append(n)
            continue
        chunk = [x * itemsize for x in shard_sizes(numel, p2)]
        sent = n if r < 2 * (p - p2) else 0.0   # the result handed back after the folded run
        for _, slo, shi, klo, khi in halving_ranges(new, p2):
            sent += sum(chunk[slo:shi]) + sum(chunk[klo:khi])  # halving sends; doubling sends what it kept
        out.append(sent)
    return out


def _mpich_path(core, n, p):
    fold = (0, 0, 0) if not _folded(p) else (2, 2 * n, n)
    return tuple(float(c + f) for c, f in zip(core, fold))


def _dbt_path(n, p):
    trees = double_binary_tree(p)
    height = max(tree_height(t) for t in trees)
    reduced = max(sum(n / 2 * len(t[r][1]) for t in trees) for r in range(p))
    return 2 * height, max(dbtree_sent(p, [n / 2, n / 2])), reduced


register("all_reduce", "ring", "MPI and NCCL", "ring_all_reduce",
         sent=lambda n, p, s, root, numel, itemsize: [2 * n - s[r] - s[(r + 1) % p] for r in range(p)],
         busiest=lambda n, p: 2 * _frac(p) * n,
         path=lambda n, p: (2 * (p - 1), 2 * _frac(p) * n, _frac(p) * n))
register("all_reduce", "tree", "MPI (binomial tree)", "tree_all_reduce",   # binomial reduce, then broadcast
         sent=lambda n, p, s, root, numel, itemsize: [(0.0 if r == root else n)
                                                      + binomial_children(_rel(r, root, p), p) * n for r in range(p)],
         busiest=lambda n, p: _clg(p) * n,
         path=lambda n, p: (2 * _clg(p), 2 * _clg(p) * n, _clg(p) * n))
register("all_reduce", "recursive_doubling", "MPI", "recursive_doubling_all_reduce", sent=_rd_sent,
         busiest=lambda n, p: (_lg2(p) + _folded(p)) * n,
         path=lambda n, p: _mpich_path((_lg2(p), _lg2(p) * n, _lg2(p) * n), n, p))
register("all_reduce", "rabenseifner", "MPI", "rabenseifner_all_reduce", sent=_rabenseifner_sent,
         busiest=lambda n, p: 2 * _frac(2 ** _lg2(p)) * n + _folded(p) * n,
         path=lambda n, p: _mpich_path((2 * _lg2(p), 2 * _frac(2 ** _lg2(p)) * n, _frac(2 ** _lg2(p)) * n), n, p))
register("all_reduce", "naive", "neither (parameter server)", "naive_all_reduce",
         sent=lambda n, p, s, root, numel, itemsize: [(p - 1) * n if r == root else n for r in range(p)],
         busiest=lambda n, p: (p - 1) * n,
         path=lambda n, p: (2 * (p - 1), 2 * (p - 1) * n, (p - 1) * n))
register("all_reduce", "double_binary_tree", "NCCL (Tree)", "double_binary_tree_all_reduce",
         # each tree: n/2 up to the parent, down to each child; the first tree carries the larger half
         sent=lambda n, p, s, root, numel, itemsize: dbtree_sent(p, [x * itemsize for x in shard_sizes(numel, 2)]),
         busiest=lambda n, p: max(dbtree_sent(p, [n / 2, n / 2])) if p > 1 else 0.0,
         path=_dbt_path)

# ------------------------------------------------------------------ all_gather, reduce_scatter
register("all_gather", "ring", "MPI and NCCL", "ring_all_gather",
         sent=lambda n, p, s, root, numel, itemsize: [n - s[(r + 1) % p] for r in range(p)],
         busiest=lambda n, p: _frac(p) * n, path=lambda n, p: (p - 1, _frac(p) * n, 0.0))
register("all_gather", "recursive_doubling", "MPI", None, power_of_two=True,
         sent=lambda n, p, s, root, numel, itemsize: [sum(sum(s[lo:hi]) for _, lo, hi, _, _ in halving_ranges(r, p))
                                                      for r in range(p)],
         busiest=lambda n, p: _frac(p) * n, path=lambda n, p: (math.log2(p), _frac(p) * n, 0.0))
register("reduce_scatter", "ring", "MPI and NCCL", "ring_reduce_scatter",
         sent=lambda n, p, s, root, numel, itemsize: [n - s[r] for r in range(p)],
         busiest=lambda n, p: _frac(p) * n, path=lambda n, p: (p - 1, _frac(p) * n, _frac(p) * n))
register("reduce_scatter", "recursive_doubling", "MPI", None, power_of_two=True,   # recursive halving
         sent=lambda n, p, s, root, numel, itemsize: [sum(sum(s[lo:hi]) for _, lo, hi, _, _ in halving_ranges(r, p))
                                                      for r in range(p)],
         busiest=lambda n, p: _frac(p) * n, path=lambda n, p: (math.log2(p), _frac(p) * n, _frac(p) * n))


# --------------------------------------------------------------------------- broadcast, reduce
def _scatter_allgather_sent(n, p, s, root, numel, itemsize):
    """Binomial scatter of p chunks (relative rank v sends each child v + mask the chunks of its subtree), then
    a ring all-gather."""
    s_rel = [s[(v + root) % p] for v in range(p)]      # chunk v belongs to relative rank v
    out = []
    for r in range(p):
        v, sent, mask = _rel(r, root, p), 0.0, 1
        while mask < p:
            if v < mask and v + mask < p:
                sent += sum(s_rel[v + mask:min(v + 2 * mask, p)])
            mask <<= 1
        out.append(sent + n - s_rel[(v + 1) % p])
    return out


register("broadcast", "tree", "MPI (binomial tree)", "tree_broadcast",
         sent=lambda n, p, s, root, numel, itemsize: [binomial_children(_rel(r, root, p), p) * n for r in range(p)],
         busiest=lambda n, p: _clg(p) * n, path=lambda n, p: (_clg(p), _clg(p) * n, 0.0))
register("broadcast", "naive", "neither (parameter server)", None,
         sent=lambda n, p, s, root, numel, itemsize: [(p - 1) * n if r == root else 0.0 for r in range(p)],
         busiest=lambda n, p: (p - 1) * n, path=lambda n, p: (p - 1, (p - 1) * n, 0.0))
register("broadcast", "ring", "MPI and NCCL", "ring_broadcast",   # NCCL's pipelined chain root -> root+1 -> ...
         sent=lambda n, p, s, root, numel, itemsize: [0.0 if _rel(r, root, p) == p - 1 else n for r in range(p)],
         busiest=lambda n, p: n if p > 1 else 0.0, path=lambda n, p: (p - 1, n, 0.0))
register("broadcast", "scatter_allgather", "MPI (long broadcast)", None, sent=_scatter_allgather_sent,
         busiest=lambda n, p: 2 * _frac(p) * n, path=lambda n, p: (_clg(p) + p - 1, 2 * _frac(p) * n, 0.0))
register("reduce", "tree", "MPI (binomial tree)", "tree_reduce",
         sent=lambda n, p, s, root, numel, itemsize: [0.0 if r == root else n for r in range(p)],
         busiest=lambda n, p: n if p > 1 else 0.0, path=lambda n, p: (_clg(p), _clg(p) * n, _clg(p) * n))
register("reduce", "naive", "neither (parameter server)", None,
         sent=lambda n, p, s, root, numel, itemsize: [0.0 if r == root else n for r in range(p)],
         busiest=lambda n, p: n if p > 1 else 0.0, path=lambda n, p: (p - 1, (p - 1) * n, (p - 1) * n))
register("reduce", "ring", "MPI and NCCL", None,     # chain root+1 -> root+2 -> ... -> root: all but the root send n
         sent=lambda n, p, s, root, numel, itemsize: [0.0 if r == root else n for r in range(p)],
         busiest=lambda n, p: n if p > 1 else 0.0, path=lambda n, p: (p - 1, n, n))

# ------------------------------------------------------------------------- all_to_all, sendrecv
register("all_to_all", "ring", "MPI and NCCL", None,   # pairwise exchange in ring order; rank r keeps its own 1/p
         sent=lambda n, p, s, root, numel, itemsize: [n - s[r] for r in range(p)],
         busiest=lambda n, p: _frac(p) * n, path=lambda n, p: (p - 1, _frac(p) * n, 0.0))
register("sendrecv", "ring", "MPI and NCCL", None,     # every rank sends n bytes to its right neighbour at once
         sent=lambda n, p, s, root, numel, itemsize: [n] * p,
         busiest=lambda n, p: n if p > 1 else 0.0, path=lambda n, p: (1, n, 0.0))

# ------------------------------------------------------------------------------- across nodes
register("all_reduce", "flat_ring", "MPI and NCCL", "ring_all_reduce", level="nodes")
register("all_reduce", "multi_ring", "NCCL (Ring, one ring per NIC)", "multi_ring_all_reduce", level="nodes",
         per_node=True)
register("all_reduce", "hierarchical", "MPI, Horovod", "hierarchical_all_reduce", level="nodes", per_node=True)
register("all_reduce", "in_network", "NCCL (NVLS, CollNet/SHARP)", None, level="nodes")
for _op in ("reduce_scatter", "all_gather"):    # priced by commlib.topology; run as the flat ring of one link
    register(_op, "flat_ring", "MPI and NCCL", None, level="nodes")
    register(_op, "multi_ring", "NCCL (Ring, one ring per NIC)", None, level="nodes")
    register(_op, "hierarchical", "MPI", None, level="nodes")
register("all_to_all", "pairwise", "MPI and NCCL", "pairwise_all_to_all", level="nodes", per_node=True)
register("all_to_all", "bulk", "NCCL (all sends posted at once)", None, level="nodes")
