"""Context parallelism: attention over a sequence split across cp ranks, by ring attention or by all-gathering K/V.

Each rank holds s/cp tokens of q, k and v ([batch, heads, tokens, head_dim]). Ring attention (Liu et al.,
"Ring Attention with Blockwise Transformers for Near-Infinite Context", 2023; the blockwise softmax of
Milakov & Gimelshein 2018 and FlashAttention) passes the K/V blocks around the ring of cp ranks: at step t
rank r attends with its queries to the block of rank r-t while it sends that block on to rank r+1. The
partial results merge exactly with their log-sum-exps:

    lse = logaddexp(lse_a, lse_b);  out = out_a exp(lse_a - lse) + out_b exp(lse_b - lse)

Forward, each rank sends its K/V block cp-1 times: (cp-1) 2 b (s/cp) h_kv bytes (plan.cp_bytes_per_rank).
Backward, the K/V blocks travel again (cp-1 sends), with an accumulator of their gradients that ends back
at its owner (cp sends): (2cp-1) 2 b (s/cp) h_kv.

Layouts. The sequence is cut into 2 cp chunks. "contiguous": rank i holds chunks 2i and 2i+1. With a causal
mask rank i has 4i+3 chunk pairs to compute: rank 0 three, the last rank 4cp-1, and the others wait for it.
"zigzag": rank i holds chunks i and 2cp-1-i; every rank then computes 2cp+1 chunk pairs. Llama 3 splits the
sequence so (Dubey et al., "The Llama 3 Herd of Models", 2024, section 3.3.2), as do Megatron-LM /
Transformer Engine's context parallelism and torch's context_parallel with load balancing. (Striped
Attention, Brandon et al. 2023, balances by dealing out single tokens instead.)

The all-gather variant (Llama 3: Dubey et al. 2024, section 3.3.2): all-gather K and V, attend locally,
reduce-scatter their gradients backward. Forward bytes equal the ring's, (cp-1)/cp of the whole K/V per rank;
but every rank holds the whole sequence's K/V, against two blocks for the ring. With grouped-query attention
K/V are small next to Q, which is why Llama 3 chose it (and for masks other than causal).
"""

from __future__ import annotations

import torch

from commlib.parallel.collective_matmul import RingPass
from commlib.parallel.comm import Comm

BALANCES = ("zigzag", "contiguous")


def chunks_of(rank: int, cp: int, balance: str = "zigzag") -> tuple[int, int]:
    """The two chunks (of 2 cp) of the sequence that rank holds."""
    if balance not in BALANCES:
        raise ValueError(f"balance must be one of {BALANCES}, got {balance!r}")
    return (rank, 2 * cp - 1 - rank) if balance == "zigzag" else (2 * rank, 2 * rank + 1)


def positions(seq: int, cp: int, rank: int, balance: str = "zigzag") -> torch.Tensor:
    """The token positions rank holds, in the order it holds them."""
    if seq % (2 * cp):
        raise ValueError(f"seq ({seq}) must be divisible by 2*cp = {2 * cp} (two chunks per rank)")
    c = seq // (2 * cp)
    return torch.cat([torch.arange(k * c, (k + 1) * c) for k in chunks_of(rank, cp, balance)])


def work_per_rank(cp: int, causal: bool = True, balance: str = "zigzag") -> list[int]:
    """Chunk pairs (query chunk, key chunk) each rank computes: those the mask does not hide entirely.
    contiguous: 4i+3; zigzag: 2cp+1 (causal); 4cp without a mask."""
    out = []
    for r in range(cp):
        mine = chunks_of(r, cp, balance)
        out.append(sum(1 for j in range(cp) for kc in chunks_of(j, cp, balance) for qc in mine
                       if not causal or qc >= kc))
    return out


def _pairs(qpos: torch.Tensor, kpos: torch.Tensor, causal: bool):
    """(query chunk slice, key chunk slice, mask or None) for each chunk pair that has something to compute."""
    h = qpos.numel() // 2
    halves = (slice(0, h), slice(h, 2 * h))
    for qs in halves:
        for ks in halves:
            q, k = qpos[qs], kpos[ks]
            if not causal or q.min() >= k.max():
                yield qs, ks, None
            elif q.max() >= k.min():
                yield qs, ks, q[:, None] >= k[None, :]


def _scores(q, k, mask, scale):
    s = (q @ k.transpose(-1, -2)) * scale
    return s if mask is None else s.masked_fill(~mask, float("-inf"))


def _merge(out, lse, o, l):
    new = torch.logaddexp(lse, l)
    return out * torch.exp(lse - new)[..., None] + o * torch.exp(l - new)[..., None], new


class _Ring(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, ring, qpos, allpos, causal, overlap, stats):
        scale = q.shape[-1] ** -0.5
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)

        def compute(step, src, kv):
            nonlocal out, lse
            for qs, ks, mask in _pairs(qpos, allpos[src], causal):
                s = _scores(q[..., qs, :], kv[0][..., ks, :], mask, scale)
                l = torch.logsumexp(s, -1)
                o = torch.exp(s - l[..., None]) @ kv[1][..., ks, :]
                out[..., qs, :], lse[..., qs] = _merge(out[..., qs, :], lse[..., qs], o, l)
                stats["work"] += 1

        before = ring.sent
        ring.run(torch.stack([k, v]), compute, overlap=overlap)
        stats["forward_bytes"] += ring.sent - before
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.qpos, ctx.allpos, ctx.causal, ctx.overlap, ctx.stats = ring, qpos, allpos, causal, overlap, stats
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        ring, scale = ctx.ring, q.shape[-1] ** -0.5
        dq = torch.zeros_like(q)
        delta = (dout * out).sum(-1)
        dkv = torch.zeros((2, *k.shape), dtype=k.dtype)   # the accumulator of the block now held
        pending = []
        before = ring.sent

        def compute(step, src, kv):
            nonlocal dkv
            part = torch.zeros_like(dkv)
            for qs, ks, mask in _pairs(ctx.qpos, ctx.allpos[src], ctx.causal):
                p = torch.exp(_scores(q[..., qs, :], kv[0][..., ks, :], mask, scale) - lse[..., qs, None])
                part[1][..., ks, :] += p.transpose(-1, -2) @ dout[..., qs, :]
                ds = p * (dout[..., qs, :] @ kv[1][..., ks, :].transpose(-1, -2) - delta[..., qs, None])
                dq[..., qs, :] += (ds @ kv[0][..., ks, :]) * scale
                part[0][..., ks, :] += (ds.transpose(-1, -2) @ q[..., qs, :]) * scale
            if pending:      # the accumulator of this block, from the rank that held it last step
                RingPass.finish(pending.pop())
                dkv = incoming[0]
            dkv = dkv + part
            if ring.size > 1:  # a ring of one rank (cp = 1) already holds its own block: nothing to send, to itself
                incoming[0] = torch.empty_like(dkv)
                pending.append(ring.start(dkv, incoming[0], tag=1))  # on to the next rank; home after the last step

        incoming = [None]
        ring.run(torch.stack([k, v]), compute, overlap=ctx.overlap)
        if pending:
            RingPass.finish(pending.pop())
            dkv = incoming[0]
        ctx.stats["backward_bytes"] += ring.sent - before
        return dq, dkv[0], dkv[1], None, None, None, None, None, None


def ring_attention(q, k, v, ring: RingPass, qpos: torch.Tensor, allpos: list[torch.Tensor], causal: bool = True,
                   overlap: bool = True, stats: dict | None = None) -> torch.Tensor:
    """Attention of this rank's queries (positions qpos) over the whole sequence, whose K/V blocks travel the
    ring (allpos[j]: the positions group rank j holds). Differentiable. stats (a dict) collects
    work (chunk pairs computed), forward_bytes and backward_bytes."""
    stats = {} if stats is None else stats
    for key in ("work", "forward_bytes", "backward_bytes"):
        stats.setdefault(key, 0)
    return _Ring.apply(q, k, v, ring, qpos, allpos, causal, overlap, stats)


class _GatherKV(torch.autograd.Function):
    """All-gather forward, reduce-scatter (sum) of the gradient backward."""

    @staticmethod
    def forward(ctx, kv, comm):
        ctx.comm, ctx.shape = comm, kv.shape
        flat = kv.reshape(-1)
        return comm.all_gather(flat, [flat.numel()] * comm.size, kind="all_gather_kv").view(comm.size, *kv.shape)

    @staticmethod
    def backward(ctx, g):
        return ctx.comm.reduce_scatter(g.reshape(-1).contiguous(), kind="reduce_scatter_dkv").view(ctx.shape), None


def all_gather_attention(q, k, v, comm: Comm, qpos, allpos, causal: bool = True) -> torch.Tensor:
    """The same attention with K/V all-gathered first (Llama 3); K/V gradients reduce-scattered backward."""
    kv = _GatherKV.apply(torch.stack([k, v]), comm)          # [cp, 2, b, h, s/cp, d]
    kv = torch.cat(list(kv.unbind(0)), dim=-2)                # [2, b, h, s, d] in the ranks' order
    kpos = torch.cat(allpos)
    s = (q @ kv[0].transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        s = s.masked_fill(~(qpos[:, None] >= kpos[None, :]), float("-inf"))
    return torch.softmax(s, -1) @ kv[1]


def kv_memory(batch: int, seq: int, kv_hidden: int, cp: int, itemsize: int, variant: str = "ring") -> int:
    """Bytes of K/V a rank holds at once in the forward: the ring its own block and the one arriving
    (2 blocks); the all-gather the whole sequence's K/V."""
    block = 2 * batch * (seq // cp) * kv_hidden * itemsize
    return 2 * block if variant == "ring" else cp * block


def reference(q, k, v, causal: bool = True) -> torch.Tensor:
    """One process, the whole sequence: torch's scaled_dot_product_attention."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def attention_flops(batch: int, seq: int, heads: int, head_dim: int, causal: bool = True) -> float:
    """Forward matmul FLOPs of attention: 4 b s^2 h d (QK^T and PV), half of it with a causal mask."""
    return 4 * batch * seq * seq * heads * head_dim * (0.5 if causal else 1.0)

