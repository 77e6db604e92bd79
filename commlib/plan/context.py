"""Context parallelism in the planner: the bytes of ring attention and how much of them the attention hides.

Pure Python. The sequence is split over cp ranks (zig-zag, so causal work balances: commlib.parallel.context).
Per layer and micro-batch, each rank's K/V block (2 b (s/cp) h_kv / tp bytes; h_kv = kv_heads * head_dim, split
over the tensor-parallel ranks by heads) goes around the ring:

    forward   cp-1 transfers, each hidden behind the attention of the block that arrived before it
    backward  cp-1 transfers of K/V and cp of their gradients' accumulator (the last one ends at its owner)

A step of the ring takes max(transfer, attention of one block): what a transfer takes beyond the attention
of its step stays exposed (commlib.parallel.collective_matmul.ring_timelines is the same rule per rank and
step). The attention of one block, forward, is 4 b (s/cp)^2 h / tp FLOPs halved by the causal mask (the
diagonal blocks are half masked; zig-zag spreads the rest evenly), twice that backward. The planner's compute
counts these FLOPs (plan.attention_flops), so the window that hides the ring is inside the step it reports.
"""

from __future__ import annotations

from commlib import _validate as check
from commlib.plan.hardware_model import Hardware, group_shape, p2p_s


_int = check.count


def cp_bytes_per_rank(batch, seq, kv_hidden, cp, itemsize=2) -> float:
    """Bytes each rank sends in the forward of ring attention, per layer: its K/V block goes around the ring of
    cp ranks, cp-1 sends of 2 b (s/cp) h_kv: (cp-1) 2 b (s/cp) h_kv itemsize (Liu et al., "Ring Attention", 2023).
    h_kv = kv_heads * head_dim (less than hidden with grouped-query attention). The all-gather variant (Llama 3)
    sends the same bytes as one all-gather, (cp-1)/cp of the whole K/V."""
    b, s, h, c = (_int(n, v) for n, v in (("batch", batch), ("seq", seq), ("kv_hidden", kv_hidden), ("cp", cp)))
    size = _int("itemsize", itemsize)
    if s % c:
        raise ValueError(f"seq ({s}) must be divisible by cp={c}")
    return (c - 1) * 2 * b * (s // c) * h * size


def cp_backward_bytes_per_rank(batch, seq, kv_hidden, cp, itemsize=2) -> float:
    """Bytes each rank sends in the backward of ring attention, per layer: the K/V blocks travel again (cp-1 sends)
    with the accumulator of their gradients, which ends back at its owner (cp sends): (2cp-1) 2 b (s/cp) h_kv."""
    fwd = cp_bytes_per_rank(batch, seq, kv_hidden, cp, itemsize)
    c = _int("cp", cp)
    return 0.0 if c == 1 else fwd * (2 * c - 1) / (c - 1)


def ring_exposed_s(steps: int, transfer_s: float, compute_s: float) -> float:
    """What a ring of `steps` steps leaves exposed when every step but the last sends one block (transfer_s)
    while computing one (compute_s): (steps-1) max(0, transfer - compute)."""
    return (steps - 1) * max(0.0, transfer_s - compute_s)


def cp_layer_times(batch, seq, hidden, kv_hidden, cp, tp, hw: Hardware, mfu: float = 0.4, act_bytes=2,
                   stride: int | None = None) -> dict:
    """One layer's ring attention on one micro-batch, forward plus backward, per rank -> {bytes, comm_s (all
    transfers), exposed_s (what the attention does not hide), block_s (one transfer), attention_s (one block's
    forward attention)}. The cp group has stride tp (TP innermost, as torchtitan lays out its mesh)."""
    b, s, h, hkv, c, t = (_int(n, v) for n, v in (("batch", batch), ("seq", seq), ("hidden", hidden),
                                                  ("kv_hidden", kv_hidden), ("cp", cp), ("tp", tp)))
    if c == 1:
        return {"bytes": 0.0, "comm_s": 0.0, "exposed_s": 0.0, "block_s": 0.0, "attention_s": 0.0}
    if s % (2 * c):
        raise ValueError(f"seq ({s}) must be divisible by 2*cp = {2 * c} (zig-zag: two chunks per rank)")
    block = 2 * b * (s // c) * hkv * act_bytes / t
    nodes, _ = group_shape(hw, c, t if stride is None else stride)
    block_s = p2p_s(block, nodes > 1, hw)
    attention_s = 4 * b * (s // c) ** 2 * h / t * 0.5 / (hw.peak_flops * mfu)
    fwd = ring_exposed_s(c, block_s, attention_s)
    bwd = ring_exposed_s(c, 2 * block_s, 2 * attention_s) + block_s   # K/V and their gradients; the last one home
    return {"bytes": (cp_bytes_per_rank(b, s, hkv, c, 1) + cp_backward_bytes_per_rank(b, s, hkv, c, 1))
            * act_bytes / t,
            "comm_s": (3 * c - 2) * block_s, "exposed_s": fwd + bwd, "block_s": block_s, "attention_s": attention_s}
