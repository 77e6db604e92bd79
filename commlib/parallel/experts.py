"""Expert parallelism: a mixture-of-experts layer whose experts live on different ranks (all-to-all).

Shazeer et al. 2017 (top-k gating); Lepikhin et al. 2020 (GShard: experts sharded over devices, tokens
moved by all-to-all). Each token picks its top-k experts; the E experts are split over ep ranks,
E/ep each. A forward is two all-to-alls with uneven splits:

    dispatch  every token copy (T*k per rank) goes to the rank that holds its expert
    combine   each expert output goes back to the token's rank, which sums weight * output over its k picks

Backward runs both in reverse (the gradient of an all-to-all is the all-to-all with the splits swapped).
With balanced routing a rank sends T k (ep-1)/ep rows of h in each, 4 T k h (ep-1)/ep forward and backward;
a rank whose experts draw f times the balanced traffic sends (1 + f) instead of 2 per pass (see
skewed_routing, plan.ep_bytes_per_rank). The split sizes themselves travel first ("all_to_all_sizes").
"""

from __future__ import annotations

import copy

import torch

from commlib.parallel.comm import Comm
from commlib.parallel.tensor import MLP


class MoE(torch.nn.Module):
    """The single-process reference: a router (h -> E) and E expert MLPs; out = sum_k w_k expert_k(x)."""

    def __init__(self, hidden: int, experts: int, topk: int = 2, ffn: int | None = None, seed: int = 0):
        super().__init__()
        if not 1 <= topk <= experts:
            raise ValueError(f"topk must be in [1, experts={experts}], got {topk}")
        torch.manual_seed(seed)
        self.topk = topk
        self.router = torch.nn.Linear(hidden, experts, bias=False)
        self.experts = torch.nn.ModuleList(MLP(hidden, ffn) for _ in range(experts))

    def route(self, x: torch.Tensor, idx: torch.Tensor | None = None):
        """-> (idx [T, k] expert of each pick, weights [T, k]): the top-k of the router's logits (or the
        given idx), weighted by a softmax over the k picked logits (Shazeer et al. 2017)."""
        logits = self.router(x)
        if idx is None:
            idx = logits.topk(self.topk, dim=-1).indices
        return idx, torch.softmax(logits.gather(1, idx), dim=-1)

    def forward(self, x: torch.Tensor, idx: torch.Tensor | None = None) -> torch.Tensor:
        idx, w = self.route(x, idx)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            tok, pick = (idx == e).nonzero(as_tuple=True)
            if len(tok):
                out = out.index_add(0, tok, w[tok, pick, None] * expert(x[tok]))
        return out


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm: Comm, send: list[int], recv: list[int]):
        ctx.comm, ctx.send, ctx.recv = comm, send, recv
        return comm.all_to_all(x, send, recv)

    @staticmethod
    def backward(ctx, g):
        return ctx.comm.all_to_all(g.contiguous(), ctx.recv, ctx.send), None, None, None


class ExpertParallelMoE(torch.nn.Module):
    """The MoE layer over an expert-parallel group: this rank keeps experts [r E/ep, (r+1) E/ep) and a copy
    of the router; each rank brings its own tokens."""

    def __init__(self, dense: MoE, comm: Comm):
        super().__init__()
        n = len(dense.experts)
        if n % comm.size:
            raise ValueError(f"experts ({n}) must be divisible by the expert-parallel size ep={comm.size}")
        self.comm, self.topk, self.per_rank = comm, dense.topk, n // comm.size
        self.router = copy.deepcopy(dense.router)
        first = comm.rank * self.per_rank
        self.local = torch.nn.ModuleList(copy.deepcopy(dense.experts[first + i]) for i in range(self.per_rank))

    def forward(self, x: torch.Tensor, idx: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.router(x)
        if idx is None:
            idx = logits.topk(self.topk, dim=-1).indices
        w = torch.softmax(logits.gather(1, idx), dim=-1)
        ep, k, e_per = self.comm.size, self.topk, self.per_rank
        flat = idx.reshape(-1)                       # one entry per token copy, token-major
        order = torch.argsort(flat, stable=True)     # copies grouped by expert, hence by rank
        counts = torch.bincount(flat, minlength=ep * e_per)                  # copies per expert
        recv_counts = self.comm.all_to_all(counts.view(ep, e_per), [1] * ep, [1] * ep,
                                           kind="all_to_all_sizes")           # [src, local expert]
        send = counts.view(ep, e_per).sum(1).tolist()
        recv = recv_counts.sum(1).tolist()
        rows = _AllToAll.apply(x[order // k], self.comm, send, recv)          # dispatch
        start, pieces = 0, []
        for src in range(ep):  # rows from each source arrive grouped by our local expert
            for e in range(e_per):
                n = int(recv_counts[src, e])
                pieces.append((e, start, start + n))
                start += n
        out = torch.cat([self.local[e](rows[a:b]) for e, a, b in pieces]) if pieces else rows
        back = _AllToAll.apply(out, self.comm, recv, send)                    # combine
        per_copy = torch.empty_like(back).index_copy(0, order, back)          # undo the sort
        return (w.reshape(-1, 1) * per_copy).view(-1, k, x.shape[-1]).sum(1)

    def pairs(self, dense: MoE):
        """(local parameter, dense parameter) pairs of this rank's experts, for checking gradients."""
        first = self.comm.rank * self.per_rank
        return [(a, b) for i, m in enumerate(self.local)
                for a, b in zip(m.parameters(), dense.experts[first + i].parameters())]


def skewed_routing(tokens: int, topk: int, experts: int, ep: int, rank: int, imbalance: float = 1.0) -> torch.Tensor:
    """Expert picks [tokens, topk] for `rank` under which rank 0's experts draw `imbalance` times the
    balanced traffic from every other rank: rank 0 spreads its copies evenly over the ranks; every other
    rank sends imbalance/ep of its T*k copies to rank 0 and spreads the rest over ranks 1..ep-1. Rank 0
    then sends T k h (ep-1)/ep (1 + imbalance) bytes per pass (plan.ep_bytes_per_rank), the most of any rank.
    Needs topk <= experts/ep (the k picks of a token are distinct) and whole numbers of copies."""
    per = experts // ep
    if experts % ep or topk > per:
        raise ValueError(f"need experts divisible by ep and topk <= experts/ep, got experts={experts}, ep={ep}, "
                         f"topk={topk}")
    copies = tokens * topk
    hot = copies * imbalance / ep
    if not 1.0 <= imbalance <= ep or (rank and (hot != int(hot) or (copies - hot) % (ep - 1))):
        raise ValueError(f"imbalance must be in [1, ep={ep}] and give whole copies per rank, got {imbalance} "
                         f"with tokens={tokens}, topk={topk}")
    dest = [c % ep for c in range(copies)] if rank == 0 else \
        [0 if c < hot else 1 + (c - int(hot)) % (ep - 1) for c in range(copies)]
    # a token's k picks use local experts 0..k-1 of their ranks: distinct even when they share a rank
    return torch.tensor([d * per + c % topk for c, d in enumerate(dest)]).view(tokens, topk)
