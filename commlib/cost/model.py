"""The alpha-beta(-gamma) cost model of collectives: links, times, bytes per rank, bus factors, fitting.

A message of n bytes over a link costs alpha + n*beta seconds (beta = 1 / bandwidth per direction);
reducing n bytes costs n*gamma. Formulas: Thakur, Rabenseifner, Gropp, "Optimization of Collective
Communication Operations in MPICH" (IJHPCA 2005); bus factors: nccl-tests doc/PERFORMANCE.md.
Sizes follow the MPICH / nccl-tests convention: nbytes is the full tensor for all_reduce, broadcast
and reduce, the gathered total for all_gather, and the full input for reduce_scatter and all_to_all.
Pure Python and numpy: no torch here.
"""

from __future__ import annotations

import math

import numpy as np

from commlib import _validate as check
from commlib.cost.links import LINKS, Link
from commlib.cost.registry import REGISTRY, algorithms
from commlib.cost.schedules import check_p, shard_sizes

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv")
# Read from the one registry (commlib.cost.registry). "ring" for all_to_all: pairwise exchange in ring order;
# for broadcast and reduce: NCCL's pipelined chain from (to) the root. Who implements what: NCCL has neither
# recursive doubling nor Rabenseifner; it chooses per call among Ring, Tree (the pipelined double binary tree),
# NVLS, CollNet and PAT, and a protocol (LL, LL128, Simple), from its tuning model (NCCL 2.30.7
# src/graph/tuning.cc). MPI libraries (MPICH: Thakur et al. 2005) switch between the textbook algorithms by size.
ALGORITHMS = algorithms("link")
PAIRS = {op: algorithms("link", op) for op in OPS}
POWER_OF_TWO_ONLY = {key for key, a in REGISTRY.items() if a.power_of_two}
FAMILY = {name: next(a.family for a in REGISTRY.values() if a.name == name) for name in ALGORITHMS}


# ------------------------------------------------------------------------------- validation
def _check_op(op: str, algorithm: str, name: str = "algorithm") -> None:
    if not isinstance(op, str) or op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise ValueError(f"{name} must be one of {ALGORITHMS}, got {algorithm!r}")
    if algorithm not in PAIRS[op]:
        raise ValueError(f"no {name} {algorithm!r} for {op}; choose one of {PAIRS[op]}")


def check_nbytes(nbytes) -> float:
    return check.number("nbytes", nbytes, low=0, unit="bytes")


def _check_pow2(op: str, algorithm: str, p: int) -> None:
    if (op, algorithm) in POWER_OF_TWO_ONLY and p & (p - 1):
        raise ValueError(f"{algorithm} {op} needs a power-of-two world_size, got {p}")


def _validated(op: str, nbytes, world_size, algorithm: str) -> tuple[int, float]:
    """Check an (op, algorithm) pair, the size and the world size together -> (p, n)."""
    _check_op(op, algorithm)
    p = check_p(world_size)
    n = check_nbytes(nbytes)
    _check_pow2(op, algorithm, p)
    return p, n


# ------------------------------------------------------------------------------------ bytes
def bytes_sent_by_rank(op: str, nbytes: float, world_size: int, algorithm: str = "ring",
                       itemsize: int = 1, root: int = 0) -> list[float]:
    """Bytes each rank sends, following each algorithm's schedule exactly (uneven shards included).

    Shards are whole elements of `itemsize` bytes (shard_sizes of nbytes / itemsize elements).
    """
    p, n = _validated(op, nbytes, world_size, algorithm)
    itemsize = check.integer("itemsize", itemsize, low=1)
    root = check.integer("root", root, low=0, high=p - 1)
    if p == 1:
        return [0.0]
    numel = int(round(n / itemsize))
    s = [x * itemsize for x in shard_sizes(numel, p)]
    return REGISTRY[op, algorithm].sent(n, p, s, root, numel, itemsize)


def bytes_sent_per_rank(op: str, nbytes: float, world_size: int, algorithm: str = "ring") -> float:
    """Bytes sent by the busiest rank, closed form (n divisible by p). Ring all_reduce: 2(p-1)/p n;
    ring all_gather / reduce_scatter: (p-1)/p n; binomial broadcast: ceil(lg p) n; naive all_reduce: (p-1) n."""
    p, n = _validated(op, nbytes, world_size, algorithm)
    return REGISTRY[op, algorithm].busiest(n, p)


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests: busbw = algbw * factor. all_reduce 2(p-1)/p; all_gather, reduce_scatter, all_to_all (p-1)/p;
    broadcast, reduce, sendrecv 1."""
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    p = check_p(world_size)
    if op == "all_reduce":
        return 2 * (p - 1) / p
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (p - 1) / p
    return 1.0


# ------------------------------------------------------------------------------------- time
def critical_path(op: str, nbytes: float, world_size: int, algorithm: str = "ring") -> tuple[float, float, float]:
    """-> (messages, bytes, reduced bytes) along the slowest rank's path: time = messages*a + bytes*b + reduced*g.

    ring all_reduce: (2(p-1), 2(p-1)/p n, (p-1)/p n); recursive doubling: (lg p, lg p n, lg p n);
    rabenseifner: (2 lg p, 2(p-1)/p n, (p-1)/p n); binomial broadcast: (ceil lg p, ceil lg p n, 0).
    Non-powers of two (recursive doubling, rabenseifner) add MPICH's fold and unfold: (2, 2n, n).
    NCCL's pipelined algorithms, in the large-message limit (the pipeline full, NCCL's own tuning model):
    double binary tree (2 h, 2n, n) with h the trees' height (floor(lg p) + at most 1), i.e. ring bandwidth
    and logarithmic latency; ring (chain) broadcast (p-1, n, 0). MPICH's long broadcast, scatter + ring
    all-gather: (ceil lg p + p-1, 2(p-1)/p n, 0).
    """
    p, n = _validated(op, nbytes, world_size, algorithm)
    if p == 1:
        return 0.0, 0.0, 0.0
    return REGISTRY[op, algorithm].path(n, p)


def as_link(link) -> Link:
    if isinstance(link, str):
        if link not in LINKS:
            raise ValueError(f"link must be a Link or one of {tuple(LINKS)}, got {link!r}")
        return LINKS[link]
    if not isinstance(link, Link):
        raise TypeError(f"link must be a Link or a preset name, got {type(link).__name__}")
    return link


def check_gamma(gamma) -> float:
    return check.number("gamma", gamma, low=0, unit="seconds per byte")


def collective_time(op: str, nbytes: float, world_size: int, link: Link | str,
                    algorithm: str = "ring", gamma: float = 0.0) -> float:
    """Seconds for one collective under the alpha-beta-gamma model (Thakur et al. 2005), plus the link's
    call latency c once per call (NCCL's base latency; 0 for a fitted link):

    ring all_reduce: c + 2(p-1) a + 2(p-1)/p n b + (p-1)/p n g;  recursive doubling: c + lg p (a + n b + n g);
    rabenseifner: c + 2 lg p a + 2(p-1)/p n b + (p-1)/p n g;  binomial broadcast: c + ceil(lg p)(a + n b);
    double binary tree (NCCL's Tree): c + 2 h a + 2 n b + n g.
    """
    return breakdown(op, nbytes, world_size, link, algorithm, gamma)["time_s"]


def breakdown(op: str, nbytes: float, world_size: int, link: Link | str, algorithm: str = "ring",
              gamma: float = 0.0) -> dict:
    """The model's answer term by term: latency_s (the link's call latency, once, plus alpha per message on the
    path), bandwidth_s, reduction_s, time_s, bytes_per_rank (busiest rank), algbw_GBps and busbw_GBps as
    nccl-tests would report them, and the bottleneck term."""
    link, g = as_link(link), check_gamma(gamma)
    messages, nb, reduced = critical_path(op, nbytes, world_size, algorithm)
    call = link.call_latency if messages else 0.0
    terms = {"latency_s": call + messages * link.latency, "bandwidth_s": nb * link.beta, "reduction_s": reduced * g}
    total = sum(terms.values())
    algbw = float(nbytes) / total / 1e9 if total > 0 else float("inf")  # numpy sizes give Python floats too
    return {**terms, "time_s": total,
            "bytes_per_rank": bytes_sent_per_rank(op, nbytes, world_size, algorithm),
            "algbw_GBps": algbw, "busbw_GBps": algbw * bus_factor(op, world_size),
            "bottleneck": max(terms, key=terms.get).removesuffix("_s") if total > 0 else "none"}


def pipelined_ring_time(op: str, nbytes: float, world_size: int, link: Link | str, segment_bytes: float,
                        gamma: float = 0.0) -> float:
    """A ring that moves each chunk in segments of at most segment_bytes, every segment a message paying alpha:
    all_reduce c + 2(p-1) m a + 2(p-1)/p n b + (p-1)/p n g with m = ceil(n / p / segment_bytes) segments per
    chunk (reduce_scatter / all_gather: p-1 steps instead of 2(p-1)). Big segments: the plain ring. Small
    ones: the alpha term grows like 1 / segment_bytes and the bandwidth falls (chapter 9; NCCL's smaller
    NCCL_BUFFSIZE has the same effect through smaller slices of its FIFO)."""
    if op not in ("all_reduce", "reduce_scatter", "all_gather"):
        raise ValueError(f"op must be all_reduce, reduce_scatter or all_gather for a pipelined ring, got {op!r}")
    p, n = _validated(op, nbytes, world_size, "ring")
    segment_bytes = check.number("segment_bytes", segment_bytes, low=0, strict=True, unit="bytes")
    link, g = as_link(link), check_gamma(gamma)
    if p == 1 or n == 0:
        return 0.0
    steps = 2 * (p - 1) if op == "all_reduce" else p - 1
    m = math.ceil(n / p / segment_bytes)
    frac = (p - 1) / p
    moved = 2 * frac * n if op == "all_reduce" else frac * n
    reduced = 0.0 if op == "all_gather" else frac * n
    return link.call_latency + steps * m * link.latency + moved * link.beta + reduced * g


def crossover_bytes(op: str, algorithm_a: str, algorithm_b: str, world_size: int, link: Link | str,
                    gamma: float = 0.0) -> float | None:
    """The size n at which two algorithms take equal time (both are a + n*slope in n), or None if they never
    cross for n > 0. Below it, the one with fewer messages wins; above it, the one with fewer bytes."""
    link, g = as_link(link), check_gamma(gamma)
    _check_op(op, algorithm_a, "algorithm_a")
    _check_op(op, algorithm_b, "algorithm_b")
    ma, ba, ra = critical_path(op, 1.0, world_size, algorithm_a)  # per-byte coefficients at n = 1
    mb, bb, rb = critical_path(op, 1.0, world_size, algorithm_b)
    d_fixed = (mb - ma) * link.latency
    d_slope = (ba - bb) * link.beta + (ra - rb) * g
    if d_slope == 0 or d_fixed / d_slope <= 0:
        return None
    return d_fixed / d_slope


# -------------------------------------------------------------------------------------- fit
def fit_alpha_beta(nbytes_list, seconds_list, iterations: int = 20) -> tuple[float, float]:
    """Fit t = alpha + n * beta -> (alpha s, beta s/byte), robust to noisy points.

    Sizes span decades, so residuals are taken relative to t (a plain least-squares fit would ignore
    the small messages that determine alpha); outliers are down-weighted (Huber, IRLS); alpha, beta >= 0.
    """
    iterations = check.integer("iterations", iterations, low=1)
    n, t = _as_floats("nbytes_list", nbytes_list), _as_floats("seconds_list", seconds_list)
    if n.ndim != 1 or n.shape != t.shape:
        raise ValueError(f"nbytes_list and seconds_list must be 1-D and of equal length, got {n.shape} and {t.shape}")
    if not (np.all(np.isfinite(n)) and np.all(n >= 0)):
        raise ValueError("nbytes_list must hold finite sizes in bytes >= 0")
    if not (np.all(np.isfinite(t)) and np.all(t > 0)):
        raise ValueError("seconds_list must hold finite times in seconds > 0")
    if len(n) < 2 or len(np.unique(n)) < 2:
        raise ValueError("fit_alpha_beta needs at least two different sizes")
    # Fit in units of the largest size and time: the relative residuals do not change, and times of any
    # magnitude (even subnormal ones) stay far from overflow in 1/t.
    n_unit, t_unit = float(n.max()), float(t.max())
    n, t = n / n_unit, t / t_unit
    w = np.ones_like(t)
    alpha = beta = 0.0
    for _ in range(iterations):
        sw = w / t  # weighted relative residuals: (alpha + n beta - t) / t
        A = np.stack([sw, n * sw], axis=1)
        (alpha, beta), *_ = np.linalg.lstsq(A, t * sw, rcond=None)
        if alpha < 0:
            alpha, beta = 0.0, float(np.sum(sw**2 * n * t) / np.sum((sw * n) ** 2))
        if beta < 0:
            alpha, beta = float(np.sum(sw**2 * t) / np.sum(sw**2)), 0.0
        r = (alpha + n * beta - t) / t
        scale = 1.4826 * np.median(np.abs(r - np.median(r))) or 1e-12
        k = 1.345 * scale
        w = k / np.maximum(np.abs(r), k)  # Huber: 1 within k, k/|r| beyond
    return float(alpha) * t_unit, float(beta) * t_unit / n_unit


def _as_floats(name: str, values) -> np.ndarray:
    try:
        return np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a list of numbers") from None
