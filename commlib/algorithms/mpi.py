"""MPI's textbook collectives, written on commlib.algorithms' point-to-point layer: binomial-tree broadcast,
reduce and all-reduce, recursive doubling and Rabenseifner all-reduce (non-powers of two folded as in
MPICH; Thakur, Rabenseifner, Gropp 2005). MPI libraries switch between them by message size; NCCL has none
of them (commlib.algorithms.nccl has its own). Reachable as commlib.algorithms.<name>, like the ring.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from commlib import _validate as check

from commlib.algorithms.p2p import (_DTYPE_CODE, Trace, _agree, _flat, _Messages, _offsets, _prepare, _reduce_into,
                                    _write_back)
from commlib.cost import fold_to_power_of_two, halving_ranges, shard_sizes


# ------------------------------------------------------------------------------ binomial tree
def _check_root(name: str, root) -> int:
    p, root = dist.get_world_size(), check.integer(name, root)   # TypeError for a non-int, as everywhere
    if not 0 <= root < p:
        raise ValueError(f"{name} must be a rank in [0, {p - 1}], got {root!r}")
    return root


def _tree_broadcast_(flat, src, msgs, step0=0) -> None:
    p, r = dist.get_world_size(), dist.get_rank()
    vr = (r - src) % p  # rank relative to the root
    mask, step = 1, step0
    while mask < p:  # round k: ranks that have the data (vr < 2^k) send it 2^k further
        if vr < mask and vr + mask < p:
            msgs.send("broadcast", step, flat, (vr + mask + src) % p)
        elif mask <= vr < 2 * mask:
            msgs.recv(flat, (vr - mask + src) % p)
        mask, step = mask << 1, step + 1


def _tree_reduce_(flat, dst, op, msgs) -> int:
    p, r = dist.get_world_size(), dist.get_rank()
    vr = (r - dst) % p
    incoming = torch.empty_like(flat)
    mask, step = 1, 0
    while mask < p:  # round k: ranks with bit k set send their partial result 2^k down and stop
        if vr & mask:
            msgs.send("reduce", step, flat, (vr - mask + dst) % p)
            break
        if vr + mask < p:
            msgs.recv(incoming, (vr + mask + dst) % p)
            _reduce_into(flat, incoming, op)
        mask, step = mask << 1, step + 1
    return (p - 1).bit_length()  # rounds: ceil(lg p)


def tree_broadcast(t: torch.Tensor, src: int = 0, trace: Trace | None = None, check: bool = True) -> torch.Tensor:
    """In place, like dist.broadcast: binomial tree, ceil(lg p) rounds, ceil(lg p)(a + n b)."""
    flat = _flat(t)
    src = _check_root("src", src)
    _agree("tree_broadcast", check, flat.device, numel=flat.numel(), dtype=_DTYPE_CODE[flat.dtype], src=src)
    _tree_broadcast_(flat, src, _Messages("tree", trace))
    return _write_back(t, flat)


def tree_reduce(t: torch.Tensor, dst: int = 0, op: str = "sum", trace: Trace | None = None,
                check: bool = True) -> torch.Tensor:
    """In place on rank dst, like dist.reduce: binomial tree, ceil(lg p)(a + n b + n g). Other ranks are
    left holding the partial result they forwarded (what they sent up the tree)."""
    dst = _check_root("dst", dst)
    flat = _prepare("tree_reduce", t, op, check, dst=dst)
    _tree_reduce_(flat, dst, op, _Messages("tree", trace))
    if op == "avg" and dist.get_rank() == dst:
        flat.div_(dist.get_world_size())
    return _write_back(t, flat)


def tree_all_reduce(t: torch.Tensor, op: str = "sum", trace: Trace | None = None,
                    check: bool = True) -> torch.Tensor:
    """In place: binomial reduce to rank 0, then binomial broadcast: 2 ceil(lg p)(a + n b) + ceil(lg p) n g."""
    flat = _prepare("tree_all_reduce", t, op, check)
    msgs = _Messages("tree", trace)
    rounds = _tree_reduce_(flat, 0, op, msgs)
    _tree_broadcast_(flat, 0, msgs, step0=rounds)
    if op == "avg":
        flat.div_(dist.get_world_size())
    return _write_back(t, flat)


# ------------------------------------------------------------- recursive doubling / Rabenseifner
def _real_rank(new: int, p: int, p2: int) -> int:
    """Inverse of fold_to_power_of_two: the first rem new ranks are the odd ranks 1, 3, ..."""
    rem = p - p2
    return 2 * new + 1 if new < rem else new + rem


def _fold(flat, op, msgs, incoming) -> tuple[int | None, int]:
    """MPICH's pre-step for p not a power of two: even ranks < 2*rem hand their data to rank+1."""
    p, r = dist.get_world_size(), dist.get_rank()
    new, p2 = fold_to_power_of_two(r, p)
    if r < 2 * (p - p2):
        if r % 2 == 0:
            msgs.send("fold", 0, flat, r + 1)
        else:
            msgs.recv(incoming, r - 1)
            _reduce_into(flat, incoming, op)
    return new, p2


def _unfold(flat, msgs, step: int) -> None:
    p, r = dist.get_world_size(), dist.get_rank()
    _, p2 = fold_to_power_of_two(r, p)
    if r < 2 * (p - p2):
        if r % 2 == 1:
            msgs.send("unfold", step, flat, r - 1)
        else:
            msgs.recv(flat, r + 1)


def recursive_doubling_all_reduce(t: torch.Tensor, op: str = "sum", trace: Trace | None = None,
                                  check: bool = True) -> torch.Tensor:
    """In place. lg p rounds; in round k rank r swaps its whole tensor with rank r XOR 2^k and reduces:
    lg p (a + n b + n g). Good for small messages (few rounds), poor for large ones (n bytes per round)."""
    flat = _prepare("recursive_doubling_all_reduce", t, op, check)
    p = dist.get_world_size()
    msgs = _Messages("recursive_doubling", trace)
    incoming = torch.empty_like(flat)
    new, p2 = _fold(flat, op, msgs, incoming)
    step = 1
    if new is not None:
        mask = 1
        while mask < p2:
            partner = _real_rank(new ^ mask, p, p2)
            msgs.exchange("exchange", step, flat, partner, incoming, partner)
            _reduce_into(flat, incoming, op)  # a + b == b + a: both partners end bitwise equal
            mask, step = mask << 1, step + 1
    _unfold(flat, msgs, (p2.bit_length() - 1) + 1)
    if op == "avg":
        flat.div_(p)
    return _write_back(t, flat)


def rabenseifner_all_reduce(t: torch.Tensor, op: str = "sum", trace: Trace | None = None,
                            check: bool = True) -> torch.Tensor:
    """In place. Reduce-scatter by recursive halving, then all-gather by recursive doubling:
    2 lg p a + 2(p-1)/p n b + (p-1)/p n g: the ring's bandwidth with only 2 lg p latency terms."""
    flat = _prepare("rabenseifner_all_reduce", t, op, check)
    p = dist.get_world_size()
    msgs = _Messages("rabenseifner", trace)
    incoming = torch.empty_like(flat)
    new, p2 = _fold(flat, op, msgs, incoming)
    lg = p2.bit_length() - 1
    if new is not None and p2 > 1:
        off = _offsets(shard_sizes(flat.numel(), p2))
        rounds = halving_ranges(new, p2)
        for step, (pn, slo, shi, klo, khi) in enumerate(rounds, start=1):  # halve: keep one half, reduce it
            partner = _real_rank(pn, p, p2)
            buf = incoming[:off[khi] - off[klo]]
            msgs.exchange("reduce_scatter", step, flat[off[slo]:off[shi]], partner, buf, partner,
                          chunk=slo, offset=off[slo])
            _reduce_into(flat[off[klo]:off[khi]], buf, op)
        for step, (pn, slo, shi, klo, khi) in enumerate(reversed(rounds), start=lg + 1):  # double back
            partner = _real_rank(pn, p, p2)
            msgs.exchange("all_gather", step, flat[off[klo]:off[khi]], partner, flat[off[slo]:off[shi]], partner,
                          chunk=klo, offset=off[klo])
    _unfold(flat, msgs, 2 * lg + 1)
    if op == "avg":
        flat.div_(p)
    return _write_back(t, flat)
