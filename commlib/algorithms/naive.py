"""The parameter-server all-reduce: everyone sends to rank 0, which reduces and sends the result back."""

from __future__ import annotations

import torch
import torch.distributed as dist

from commlib.algorithms.p2p import Trace, _Messages, _prepare, _reduce_into, _write_back

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
