"""Checkers for chapter 5's exercises (gradient compression): each returns a Verdict and never raises.

    ch5_powersgd_bytes(answer, m=1024, n=4096, rank=4, world_size=8)     # bytes a rank sends, ring all-reduces of P, Q
    ch5_topk_bytes(answer, numel=10**6, fraction=0.01, world_size=16)    # bytes a rank sends, all-gather of pairs
    ch5_crossover(answer, ...)                                           # bandwidth below which PowerSGD pays
    ch5_allreduce_compatible(answer)                                     # which methods survive an all-reduce
"""

from __future__ import annotations

from commlib import _validate as check
from commlib.exercises.answers import Verdict, _missing, _number, close

COMPRESSED = ("fp16", "powersgd", "topk", "int8", "fp8")
COMPATIBLE = frozenset({"fp16", "powersgd"})


def ch5_powersgd_bytes(answer, m: int = 1024, n: int = 4096, rank: int = 4, world_size: int = 8,
                       itemsize: int = 4) -> Verdict:
    """Bytes one rank sends for PowerSGD of one m x n fp32 gradient: ring all-reduces of P (m x r) and Q (n x r),
    2(p-1)/p r(m+n) itemsize."""
    from commlib.compression import bytes_per_rank

    m, n = check.integer("m", m, 1, 2**26), check.integer("n", n, 1, 2**26)
    rank, itemsize = check.integer("rank", rank, 1, min(m, n)), check.integer("itemsize", itemsize, 1, 64)
    world_size = check.integer("world_size", world_size, 1, check.MAX_RANKS)
    x, bad = _number(answer, "the number of bytes")
    if bad is not None:
        return bad
    p, r, ring = world_size, rank, 2 * (world_size - 1) / world_size
    want = bytes_per_rank("powersgd", (m, n), p, itemsize, rank=r)
    if close(x, want, rel=0.01):
        return Verdict(True, f"2(p-1)/p · r(m+n) · {itemsize} = {ring:g} · {r * (m + n):,} · {itemsize} = "
                             f"{want:,.0f} bytes, against {ring * m * n * itemsize:,.0f} for the plain all-reduce "
                             f"({m * n / (r * (m + n)):.0f}x fewer).")
    if close(x, ring * m * n * itemsize, rel=0.01):
        return Verdict(False, "that is the plain all-reduce of the m x n gradient. PowerSGD all-reduces P (m x r) "
                              "and Q (n x r) instead.")
    if close(x, r * (m + n) * itemsize, rel=0.01):
        return Verdict(False, "that is the size of P and Q. A ring all-reduce of s bytes sends 2(p-1)/p · s per rank.")
    if close(x, ring * r * m * itemsize, rel=0.01) or close(x, ring * r * n * itemsize, rel=0.01):
        return Verdict(False, "both factors travel: P (m x r) and then Q (n x r), r(m+n) values in all.")
    if close(x, ring * r * (m + n), rel=0.01):
        return Verdict(False, f"those are values, not bytes: each fp32 value is {itemsize} bytes.")
    if close(x, (p - 1) / p * r * (m + n) * itemsize, rel=0.01) or close(x, (p - 1) * r * (m + n) * itemsize, rel=0.01):
        return Verdict(False, "P and Q are summed by all-reduce (they are linear in the gradient), not gathered: "
                              "the ring's factor is 2(p-1)/p.")
    return Verdict(False, "count the values of P (m x r) and Q (n x r), in bytes, times the ring's 2(p-1)/p.")


def ch5_topk_bytes(answer, numel: int = 10**6, fraction: float = 0.01, world_size: int = 16,
                   itemsize: int = 4) -> Verdict:
    """Bytes one rank sends for top-k of a numel-value fp32 gradient: a ring all-gather of k (int32 index, value)
    pairs from every rank, (p-1) k (4 + itemsize), k = round(fraction numel)."""
    from commlib.compression import bytes_per_rank, topk_count

    numel, itemsize = check.integer("numel", numel, 1, 2**53), check.integer("itemsize", itemsize, 1, 64)
    fraction = check.number("fraction", fraction, 0, strict=True, high=1)
    world_size = check.integer("world_size", world_size, 1, check.MAX_RANKS)
    x, bad = _number(answer, "the number of bytes")
    if bad is not None:
        return bad
    p, k = world_size, topk_count(numel, fraction)
    want = bytes_per_rank("topk", (numel,), p, itemsize, fraction=fraction)
    plain = 2 * (p - 1) / p * numel * itemsize
    if close(x, want, rel=0.01):
        return Verdict(True, f"(p-1) · k · (4 + {itemsize}) = {p - 1} · {k:,} · {4 + itemsize} = {want:,.0f} "
                             f"bytes; the plain all-reduce sends {plain:,.0f}. From p = {round(1 / fraction) + 1} on, "
                             "the all-gather would send more than the whole all-reduce.")
    if close(x, (p - 1) * k * itemsize, rel=0.01):
        return Verdict(False, "the values alone cannot be added up: each rank picked its own coordinates, so every "
                              "value travels with its int32 index (4 more bytes).")
    if close(x, 2 * (p - 1) / p * k * (4 + itemsize), rel=0.01) or close(x, 2 * (p - 1) / p * k * itemsize, rel=0.01):
        return Verdict(False, "that would be an all-reduce of the k pairs, but pairs with different indices cannot be "
                              "added on the way: top-k needs an all-gather, and its bytes grow like p - 1.")
    if close(x, p * k * (4 + itemsize), rel=0.01):
        return Verdict(False, "a rank does not send its own pairs to itself: p - 1 messages of k pairs in the ring.")
    if close(x, k * (4 + itemsize), rel=0.01):
        return Verdict(False, "that is one rank's message. In the ring all-gather each rank forwards the pairs of "
                              "all p - 1 others.")
    return Verdict(False, "k = round(fraction · numel) pairs of (int32 index, fp32 value) per rank, all-gathered "
                          "around the ring: each rank sends the pairs of p - 1 ranks.")


def ch5_crossover(answer, shape=(4096, 4096), rank: int = 4, world_size: int = 8, compress_s: float = 2e-3,
                  link="tcp100") -> Verdict:
    """The link bandwidth (bytes/s) below which PowerSGD of one fp32 gradient of `shape` beats its plain ring
    all-reduce, compressing costing compress_s, on a link with `link`'s latencies
    (compression.crossover_bandwidth)."""
    from commlib import cost
    from commlib.compression import closed_form

    # no compression time: PowerSGD would pay on every link (the crossover is infinite), nothing to compute
    compress_s = check.number("compress_s", compress_s, 0, strict=True, unit="seconds", high=1e9)
    world_size = check.integer("world_size", world_size, 1, check.MAX_RANKS)
    x, bad = _number(answer, "the bandwidth in bytes/s")
    if bad is not None:
        return bad
    link = cost.as_link(link)
    p = world_size
    want = closed_form.crossover_bandwidth("powersgd", shape, p, compress_s, link, rank=rank)
    saved = (closed_form.bytes_per_rank("none", shape, p) - closed_form.bytes_per_rank("powersgd", shape, p, rank=rank))
    if close(x, want):
        return Verdict(True, f"bw* = saved bytes / (compression time + extra latency) = {saved:,.0f} B / "
                             f"{saved / want * 1e3:.3f} ms = {want / 1e9:.3g} GB/s. {link.name} carries "
                             f"{link.bandwidth / 1e9:g} GB/s: PowerSGD {'pays' if link.bandwidth < want else 'loses'} "
                             "there.")
    if close(x, want / 1e9) or close(x, want / 1e6):
        return Verdict(False, "give bytes per second (not GB/s or MB/s).")
    if close(x, want * 8):
        return Verdict(False, "that is bits per second: give bytes per second.")
    if close(x, saved / compress_s):
        return Verdict(False, "close: you priced the compression time, but PowerSGD also makes two all-reduces "
                              "(P, then Q) instead of one, and each pays the link's latencies again.")
    return Verdict(False, "set the two times equal: compress_s + the latency and the bytes/bw of PowerSGD's "
                          "all-reduces = the latency and the bytes/bw of the plain one; solve for bw.")


def ch5_allreduce_compatible(answer) -> Verdict:
    """Which of the compressed methods (fp16, powersgd, topk, int8, fp8), as commlib's hooks encode them (int8 and
    fp8 codes with one scale per rank), can be summed by an all-reduce as they travel: fp16 and powersgd."""
    missing = _missing(answer)
    if missing is not None:
        return missing
    try:
        chosen = {answer} if isinstance(answer, str) else {a for a in answer}
        chosen = {a.strip().lower() if isinstance(a, str) else a for a in chosen}
    except Exception:  # noqa: BLE001  (a learner's object: anything can happen when iterating it)
        return Verdict(False, "answer with a list of method names, e.g. [\"fp16\", \"topk\"].")
    chosen.discard("none")  # the plain all-reduce is compatible by definition; not a mistake to name it
    unknown = sorted(str(a) for a in chosen - set(COMPRESSED))
    if unknown:
        return Verdict(False, f"choose among {list(COMPRESSED)}; unknown: {unknown}.")
    if "topk" in chosen:
        return Verdict(False, "top-k: each rank keeps different coordinates. Two sparse messages add up to up to 2k "
                              "entries, so a hop cannot add them and forward k: top-k needs an all-gather.")
    if "int8" in chosen:
        return Verdict(False, "int8 codes: each rank has its own scale, so codes of different ranks mean different "
                              "amounts; and even with one scale, the sum of p codes needs log2(p) more bits "
                              "(int8_ring_sum). They are all-gathered, or dequantised at every hop.")
    if "fp8" in chosen:
        return Verdict(False, "fp8 codes: FP8 floats themselves add (NCCL sums ncclFloat8e4m3 and ncclFloat8e5m2 "
                              "on sm90 and later, rounding every partial sum to 3 or 2 mantissa bits), but this "
                              "chapter's fp8 codes carry one scale per rank, so the same code means different "
                              "amounts on different ranks. They are all-gathered with their scales.")
    if "powersgd" not in chosen:
        return Verdict(False, "PowerSGD: P = M Q is linear in M, with the same Q on every rank, so the sum of the "
                              "ranks' P is (sum of M) Q: P (and then Q) are all-reduced.")
    if "fp16" not in chosen:
        return Verdict(False, "fp16 values add up like any floats (with chapter 4's rounding and overflow): torch's "
                              "fp16_compress_hook all-reduces them.")
    return Verdict(True, "fp16 (floats add) and PowerSGD (P and Q are linear in the gradient). Top-k and the 8-bit "
                         "codes, one scale per rank, are all-gathered, so their bytes grow with p.")
