"""What each compression method sends, in closed form, and on which links compressing pays. Pure: no torch.

For one bucket (a tensor of N values, or PowerSGD's m x n matrices), p ranks, `itemsize` bytes a value:

    none      ring all-reduce of the bucket                      2(p-1)/p * N * itemsize
    fp16      ring all-reduce of the bucket cast to fp16          2(p-1)/p * N * 2
    powersgd  ring all-reduce of P (m x r), then of Q (n x r)     2(p-1)/p * r(m+n) * itemsize   per matrix
    topk      ring all-gather of k (int32 index, value) pairs     (p-1) * k * (4 + itemsize),    k = round(fraction N)
    int8/fp8  ring all-gather of N one-byte codes + a fp32 scale  (p-1) * (N + 4)

An all-reduce's bytes per rank stay below 2N itemsize whatever p; an all-gather's grow like p - 1, because
ranks that picked different coordinates (top-k) or scales (int8) cannot add their messages on the way.
Vectors (biases) and matrices that PowerSGD would not shrink by min_compression_rate are all-reduced
uncompressed, as torch's powerSGD_hook does (_should_compress, torch 2.13.0).
"""

from __future__ import annotations

import math
from numbers import Integral

from commlib import _validate as check
from commlib import cost

METHODS = ("none", "fp16", "powersgd", "topk", "int8", "fp8")
PARAMS = {"none": (), "fp16": (), "powersgd": ("rank", "min_compression_rate"), "topk": ("fraction",),
          "int8": (), "fp8": ()}
INDEX_BYTES = 4   # top-k sends int32 indices (a bucket holds fewer than 2^31 values)
SCALE_BYTES = 4   # int8/fp8: one fp32 scale per bucket and rank
MIN_COMPRESSION_RATE = 2.0  # torch's PowerSGDState default
MAX_NUMEL = 2**53           # values in a bucket; each dimension of a shape at most this too
MAX_WORLD = 2**32           # ranks
MAX_SECONDS = 1e9           # compress_s


# ------------------------------------------------------------------------------------ validation
def check_method(method) -> str:
    return check.choice("method", method, METHODS)


def check_rank(rank) -> int:
    return check.integer("rank", rank, 1, MAX_NUMEL)


def check_fraction(fraction) -> float:
    return check.number("fraction", fraction, 0, strict=True, high=1)


def check_min_compression_rate(rate) -> float:
    return check.number("min_compression_rate", rate, 0, strict=True, high=MAX_NUMEL)


def _check_itemsize(itemsize) -> int:
    return check.integer("itemsize", itemsize, 1, 64)


def _check_world(world_size) -> int:
    return check.integer("world_size", world_size, 1, MAX_WORLD)


def _shape(s, shape) -> tuple[int, ...]:
    s = (s,) if isinstance(s, Integral) and not isinstance(s, bool) else s
    if not isinstance(s, (tuple, list)) or not all(isinstance(d, Integral) and not isinstance(d, bool)
                                                   and 0 <= d <= MAX_NUMEL for d in s):
        raise ValueError(f"shape must be a tuple of ints in [0, {MAX_NUMEL}], or a list of such tuples, "
                         f"got {check.shown_safely(shape)}")
    return tuple(int(d) for d in s)


def _shapes(shape) -> list[tuple[int, ...]]:
    """One shape (a tuple of ints) or a bucket of them (a list of tuples) -> a list of shapes."""
    out = [_shape(s, shape) for s in (list(shape) if isinstance(shape, list) else [shape])]
    if sum(math.prod(s) for s in out) > MAX_NUMEL:
        raise ValueError(f"shape must hold at most {MAX_NUMEL} values, got {check.shown_safely(shape)}")
    return out


def _params(method: str, params: dict) -> dict:
    unknown = set(params) - set(PARAMS[method])
    if unknown:
        raise ValueError(f"method {method!r} takes {PARAMS[method] or 'no parameters'}, got {sorted(unknown)}")
    if method == "powersgd" and "rank" not in params:
        raise ValueError("method 'powersgd' needs rank=, an int >= 1")
    if method == "topk" and "fraction" not in params:
        raise ValueError("method 'topk' needs fraction=, a number in (0, 1]")
    return params


# ------------------------------------------------------------------------------------ methods
def matrix_view(shape: tuple[int, ...]) -> tuple[int, int] | None:
    """PowerSGD's matrix for a parameter of this shape: (shape[0], the rest), as torch views it; None for vectors."""
    shape = _shapes(shape)[0] if not isinstance(shape, list) else _shape(shape, shape)
    if len(shape) < 2:
        return None
    return shape[0], math.prod(shape[1:])


def powersgd_compresses(m: int, n: int, rank: int, min_compression_rate: float = MIN_COMPRESSION_RATE) -> bool:
    """torch's _should_compress (powerSGD_hook.py, torch 2.13.0): r(m+n) * min_compression_rate < m n,
    with r = min(m, n, rank)."""
    m, n = check.integer("m", m, 0, MAX_NUMEL), check.integer("n", n, 0, MAX_NUMEL)
    rank, min_compression_rate = check_rank(rank), check_min_compression_rate(min_compression_rate)
    r = min(m, n, rank)
    return r * (m + n) * min_compression_rate < m * n


def topk_count(numel: int, fraction: float) -> int:
    """k, the values top-k keeps of numel: round(fraction * numel), at least 1."""
    numel, fraction = check.integer("numel", numel, 0, MAX_NUMEL), check_fraction(fraction)
    return max(1, round(fraction * numel)) if numel else 0


def collectives(method: str, shape, world_size: int, itemsize: int = 4, **params) -> list[tuple[str, float]]:
    """The collectives the method's hook calls for one bucket, in order: (op, nbytes) with nbytes in
    commlib.cost's convention (the full tensor for all_reduce, the gathered total for all_gather).
    shape: one tensor's shape, or a list of shapes (the parameters of one bucket)."""
    method = check_method(method)
    params = _params(method, params)
    p = _check_world(world_size)
    itemsize = _check_itemsize(itemsize)
    shapes = _shapes(shape)
    numel = sum(math.prod(s) for s in shapes)
    if method == "none":
        return [("all_reduce", numel * itemsize)]
    if method == "fp16":
        return [("all_reduce", numel * 2)]
    if method == "topk":
        k = topk_count(numel, check_fraction(params["fraction"]))
        return [("all_gather", p * k * (INDEX_BYTES + itemsize))]
    if method in ("int8", "fp8"):
        return [("all_gather", p * (numel + SCALE_BYTES))]
    rank = check_rank(params["rank"])
    rate = check_min_compression_rate(params.get("min_compression_rate", MIN_COMPRESSION_RATE))
    plain = ps = qs = 0
    for s in shapes:
        mat = matrix_view(s)
        if mat is not None and not isinstance(shape, list) and rank > min(mat):
            raise ValueError(f"rank must be <= min(m, n) = {min(mat)} for a {mat[0]} x {mat[1]} matrix, got {rank}")
        if mat is not None and powersgd_compresses(*mat, rank, rate):
            r = min(*mat, rank)
            ps, qs = ps + mat[0] * r, qs + mat[1] * r
        else:
            plain += math.prod(s)
    calls = [("all_reduce", plain * itemsize)] if plain else []
    return calls + ([("all_reduce", ps * itemsize), ("all_reduce", qs * itemsize)] if ps else [])


def bytes_per_rank(method: str, shape, world_size: int, itemsize: int = 4, **params) -> float:
    """Bytes one rank sends to reduce one bucket (the busiest rank, shards of equal size; module docstring).
    method: none | fp16 | powersgd (rank=, min_compression_rate=2) | topk (fraction=) | int8 | fp8.
    shape: a tensor's shape, or a list of shapes (a bucket; PowerSGD decides per matrix)."""
    p = _check_world(world_size)
    return float(sum(cost.bytes_sent_per_rank(op, nbytes, p) for op, nbytes in
                     collectives(method, shape, p, itemsize, **params)))


# ------------------------------------------------------------------------------------ when it pays
def comm_time(method: str, shape, world_size: int, link, itemsize: int = 4, compress_s: float = 0.0,
              **params) -> float:
    """Seconds to reduce one bucket: compress_s (measured compression and decompression) plus the
    alpha-beta time of each collective the method calls (commlib.cost, ring algorithms)."""
    compress_s = check.number("compress_s", compress_s, 0, unit="seconds", high=MAX_SECONDS)
    return compress_s + sum(cost.collective_time(op, nbytes, world_size, link)
                            for op, nbytes in collectives(method, shape, world_size, itemsize, **params))


def crossover_bandwidth(method: str, shape, world_size: int, compress_s: float, link, itemsize: int = 4,
                        **params) -> float:
    """The link bandwidth (bytes/s per direction) below which compressing pays, on a link with `link`'s
    latencies: where comm_time(method) = comm_time("none"). With L the latency terms (per collective: the
    link's call latency plus alpha per message on the critical path) and B the bytes on that path,

        compress_s + L_c + B_c / bw  =  L_0 + B_0 / bw   ->   bw* = (B_0 - B_c) / (compress_s + L_c - L_0)

    inf: compressing is faster on any link; 0.0: it is faster on no link slower than some bandwidth."""
    compress_s = check.number("compress_s", compress_s, 0, unit="seconds", high=MAX_SECONDS)
    link = cost.as_link(link)
    p = _check_world(world_size)

    def latency_and_bytes(m, kw):
        parts = [cost.breakdown(op, nb, p, link) for op, nb in collectives(m, shape, p, itemsize, **kw)]
        return sum(x["latency_s"] for x in parts), sum(x["bandwidth_s"] for x in parts) * link.bandwidth

    l0, b0 = latency_and_bytes("none", {})
    lc, bc = latency_and_bytes(method, params)
    saved, extra = b0 - bc, compress_s + lc - l0
    if saved <= 0:
        return 0.0
    return math.inf if extra <= 0 else saved / extra
