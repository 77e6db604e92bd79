"""Checkers for chapter 8's exercises (context parallelism, the 2-D mesh, redistributions, the ring's overlap):
each returns a Verdict and answers a wrong answer with a hint naming the likely mistake. They never raise on an
answer; a nonsensical parameter (the notebook author's) is a ValueError naming it."""

from __future__ import annotations

from commlib import _validate as check
from commlib.exercises.answers import Verdict, _choice, close
from commlib.exercises.answers import _number as _value  # (Python number, None) or (None, the hint)

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "none")
PLACEMENTS = ("Shard(0)", "Shard(1)", "Replicate", "Partial")


# --------------------------------------------------------------------------- 8.1 ring attention bytes
def ch8_cp_bytes(answer, batch: int = 1, seq: int = 131072, kv_hidden: int = 1024, cp: int = 8,
                 itemsize: int = 2) -> Verdict:
    """Bytes one rank sends in one layer's forward ring attention: (cp-1) 2 b (s/cp) h_kv itemsize."""
    from commlib import plan

    want = plan.cp_bytes_per_rank(batch, seq, kv_hidden, cp, itemsize)
    x, bad = _value(answer, "the number of bytes")
    if bad is not None:
        return bad
    block = 2 * batch * (seq // cp) * kv_hidden * itemsize
    if close(x, want, rel=0.01):
        return Verdict(True, f"its K and V block, 2 x {batch} x {seq // cp} x {kv_hidden} x {itemsize} = "
                             f"{block / 2**20:g} MiB, leaves it {cp - 1} times: {want / 2**20:g} MiB per layer.")
    mistakes = [(want / 2, "K *and* V travel: 2 b (s/cp) h_kv per block."),
                (cp * block, "a block needs cp - 1 hops to reach every other rank; the last rank does not send it "
                             "back home in the forward."),
                (want / itemsize, f"that counts elements; each is {itemsize} bytes."),
                (want * cp, "each rank holds s/cp tokens, not the whole sequence."),
                (block, "that is one block; it is sent on at every step but the last."),
                (plan.cp_backward_bytes_per_rank(batch, seq, kv_hidden, cp, itemsize) + want,
                 "that adds the backward; the question is the forward.")]
    for value, hint in mistakes:
        if close(x, value, rel=0.01):
            return Verdict(False, hint)
    return Verdict(False, "one block holds K and V of s/cp tokens (2 b (s/cp) h_kv elements); count how many "
                          "times it leaves the rank.")


# ---------------------------------------------------------------------------- 8.2 the busiest rank
def ch8_busiest(answer, cp: int = 8, balance: str = "contiguous") -> Verdict:
    """Chunk pairs the busiest rank computes in causal ring attention: 4cp-1 (contiguous), 2cp+1 (zig-zag)."""
    from commlib.parallel.context import BALANCES, work_per_rank

    c = check.integer("cp", cp, 1, 2**10)  # work_per_rank walks cp^2 chunk pairs
    balance = check.choice("balance", balance, BALANCES)
    want = max(work_per_rank(c, True, balance))
    x, bad = _value(answer, "the number of chunk pairs")
    if bad is not None:
        return bad
    total = c * (2 * c + 1)
    if x == want:
        other = "zigzag" if balance == "contiguous" else "contiguous"
        return Verdict(True, f"{want} of the {total} pairs the mask leaves ({balance}); {other}: "
                             f"{max(work_per_rank(c, True, other))}. The ring's step waits for the busiest.")
    if balance == "contiguous":
        mistakes = [(2 * c + 1, "that is zig-zag's, where every rank has the same work (the average)."),
                    (3, "that is the first rank, which sees only itself; the last rank sees everyone.")]
    else:
        mistakes = [(4 * c - 1, "that is the contiguous layout's last rank; zig-zag pairs an early chunk with a "
                                "late one.")]
    mistakes += [(4 * c, "the mask hides the upper half of the diagonal blocks: one of the 4 pairs a rank's own "
                         "chunks make with each other."),
                 (total / c, "that is the average; the question asks for the busiest rank."),
                 (total, "that is all ranks together."),
                 (4 * c * c, "that is every pair of the 2cp x 2cp grid, mask or not.")]
    for value, hint in mistakes:
        if close(x, value, rel=1e-9):
            return Verdict(False, hint)
    return Verdict(False, "draw the 2cp x 2cp grid of chunk pairs, hide those above the diagonal, and count a "
                          "rank's rows.")


# ------------------------------------------------------------------------- 8.3 which collective
_ISSUED = {("Partial", "Replicate"): "all_reduce", ("Partial", "Shard(0)"): "reduce_scatter",
           ("Partial", "Shard(1)"): "reduce_scatter", ("Shard(0)", "Replicate"): "all_gather",
           ("Shard(1)", "Replicate"): "all_gather", ("Shard(0)", "Shard(1)"): "all_to_all",
           ("Shard(1)", "Shard(0)"): "all_to_all"}


def ch8_redistribute(answer, src: str = "Partial", dst: str = "Shard(0)") -> Verdict:
    """The collective DTensor issues (NCCL; on CPU, Shard -> Shard falls back to an all-gather) to move a tensor
    from placement src to dst along one mesh dimension; "none" where it moves nothing."""
    for name, value in (("src", src), ("dst", dst)):
        if value not in PLACEMENTS:
            raise ValueError(f"{name} must be one of {PLACEMENTS}, got {value!r}")
    if dst == "Partial":
        raise ValueError("dst must not be 'Partial': DTensor refuses it (for internal use only)")
    want = _ISSUED.get((src, dst), "none")
    got, bad = _choice(answer, COLLECTIVES)
    if bad is not None:
        return bad
    if got == want:
        extra = {"all_to_all": " (on CPU, Gloo has no all-to-all here: torch gathers everything, then keeps its "
                               "chunk)", "none": ": each rank keeps its piece of what it already holds"}
        return Verdict(True, f"{src} -> {dst}: {want}{extra.get(want, '')}.")
    if src == "Partial" and got == "all_reduce":
        return Verdict(False, "an all-reduce would leave the whole sum on every rank; the target keeps only a "
                              "shard of it: half the work.")
    if src.startswith("Shard") and got in ("all_reduce", "reduce_scatter"):
        return Verdict(False, "a shard holds different elements on every rank, not summands: nothing to add.")
    if src == "Replicate":
        return Verdict(False, "every rank already holds everything: it just takes its piece.")
    if got == "all_gather" and dst.startswith("Shard"):
        return Verdict(False, "each rank needs only its new shard: the pieces it lacks come from every other rank, "
                              "one piece each.")
    return Verdict(False, "ask what each rank holds before (a piece, a summand, everything) and what it must "
                          "hold after.")


# ------------------------------------------------------------------------- 8.4 the ring's overlap
def ch8_ring_exposed(answer, cp: int = 8, transfer_s: float = 0.004, compute_s: float = 0.003) -> Verdict:
    """Seconds a forward ring pass adds to its compute, every step alike: (cp-1) max(0, transfer - compute)."""
    from commlib import plan

    c = check.integer("cp", cp, 2, check.MAX_RANKS)
    m = check.number("transfer_s", transfer_s, 0, high=1e9)
    k = check.number("compute_s", compute_s, 0, high=1e9)
    want = plan.ring_exposed_s(c, m, k)
    x, bad = _value(answer, "the exposed time in seconds")
    if bad is not None:
        return bad
    if close(x, want, rel=0.01, atol=1e-12):
        return Verdict(True, f"{c - 1} transfers, each {1e3 * m:g} ms behind a {1e3 * k:g} ms block of attention: "
                             f"{1e3 * want:g} ms exposed. The first block is the rank's own: nothing to wait for.")
    if close(x, 1e3 * want, rel=0.01):
        return Verdict(False, "give seconds, not milliseconds.")
    mistakes = [((c - 1) * m, "that is the ring without overlap: each block's attention hides part of the next "
                              "transfer."),
                (c * max(0.0, m - k), "cp - 1 transfers: the first step uses the rank's own block."),
                (max(0.0, m - k), "that is one step; the ring has cp - 1 transfers."),
                (c * m, "cp - 1 transfers, and each hides behind a block's attention.")]
    for value, hint in mistakes:
        if close(x, value, rel=0.01, atol=1e-12):
            return Verdict(False, hint)
    return Verdict(False, "a step lasts max(transfer, attention): what the transfer takes beyond the attention "
                          "is exposed, once per transfer.")
