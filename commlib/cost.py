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
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv")
ALGORITHMS = ("ring", "tree", "recursive_doubling", "rabenseifner", "naive")
# Which (op, algorithm) pairs exist. "ring" for all_to_all: pairwise exchange in ring order.
PAIRS = {
    "all_reduce": ("ring", "tree", "recursive_doubling", "rabenseifner", "naive"),
    "all_gather": ("ring", "recursive_doubling"),
    "reduce_scatter": ("ring", "recursive_doubling"),
    "broadcast": ("tree", "naive"),
    "reduce": ("tree", "naive"),
    "all_to_all": ("ring",),
    "sendrecv": ("ring",),  # every rank sends n bytes to its right neighbour at once: one message, a + n b
}
POWER_OF_TWO_ONLY = {("all_gather", "recursive_doubling"), ("reduce_scatter", "recursive_doubling")}


@dataclass(frozen=True)
class Link:
    """A link: bandwidth in bytes/s *per direction*, latency (alpha) in s per message, and where the numbers come from."""

    name: str
    bandwidth: float
    latency: float
    source: str

    @property
    def beta(self) -> float:
        """Seconds per byte."""
        return 1.0 / self.bandwidth


_LAT_NOTE = "latency: order of magnitude of a small-message NCCL/MPI hop on this kind of link"
LINKS: dict[str, Link] = {
    link.name: link for link in [
        Link("nvlink3", 300e9, 2e-6, "NVIDIA A100: NVLink3 600 GB/s total = 300 GB/s per direction; " + _LAT_NOTE),
        Link("nvlink4", 450e9, 2e-6, "NVIDIA H100 SXM: NVLink4 900 GB/s total = 450 GB/s per direction; " + _LAT_NOTE),
        Link("nvlink5", 900e9, 2e-6, "NVIDIA B200: NVLink5 1.8 TB/s total = 900 GB/s per direction; " + _LAT_NOTE),
        Link("pcie4_x16", 31.5e9, 5e-6, "PCIe Gen4 x16: 16 GT/s x 16 lanes x 128/130 = 31.5 GB/s per direction; " + _LAT_NOTE),
        Link("pcie5_x16", 63e9, 5e-6, "PCIe Gen5 x16: 32 GT/s x 16 lanes x 128/130 = 63 GB/s per direction; " + _LAT_NOTE),
        Link("ib_hdr", 25e9, 5e-6, "InfiniBand HDR: 200 Gb/s = 25 GB/s per direction; " + _LAT_NOTE),
        Link("ib_ndr", 50e9, 5e-6, "InfiniBand NDR: 400 Gb/s = 50 GB/s per direction; " + _LAT_NOTE),
        Link("ib_xdr", 100e9, 5e-6, "InfiniBand XDR: 800 Gb/s = 100 GB/s per direction; " + _LAT_NOTE),
        Link("eth100", 12.5e9, 20e-6, "100 Gigabit Ethernet: 100 Gb/s = 12.5 GB/s per direction; latency: TCP/RoCE order of magnitude"),
        Link("eth400", 50e9, 20e-6, "400 Gigabit Ethernet: 400 Gb/s = 50 GB/s per direction; latency: TCP/RoCE order of magnitude"),
    ]
}


# ------------------------------------------------------------------------------- validation
def _check_op(op: str, algorithm: str) -> None:
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if algorithm not in PAIRS[op]:
        raise ValueError(f"no algorithm {algorithm!r} for {op}; choose one of {PAIRS[op]}")


def _check_p(world_size) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, Integral):
        raise TypeError(f"world_size must be an int >= 1, got {type(world_size).__name__}")
    if world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size}")
    return int(world_size)


def _check_nbytes(nbytes) -> float:
    if isinstance(nbytes, bool) or not isinstance(nbytes, Real):
        raise TypeError(f"nbytes must be a number of bytes >= 0, got {type(nbytes).__name__}")
    if not (math.isfinite(nbytes) and nbytes >= 0):
        raise ValueError(f"nbytes must be a finite number of bytes >= 0, got {nbytes!r}")
    return float(nbytes)


def _check_pow2(op: str, algorithm: str, p: int) -> None:
    if (op, algorithm) in POWER_OF_TWO_ONLY and p & (p - 1):
        raise ValueError(f"{algorithm} {op} needs a power-of-two world_size, got {p}")


def _validated(op: str, nbytes, world_size, algorithm: str) -> tuple[int, float]:
    """Check an (op, algorithm) pair, the size and the world size together -> (p, n)."""
    _check_op(op, algorithm)
    p = _check_p(world_size)
    n = _check_nbytes(nbytes)
    _check_pow2(op, algorithm, p)
    return p, n


def is_power_of_two(p: int) -> bool:
    return p >= 1 and p & (p - 1) == 0


def shard_sizes(numel: int, world_size: int) -> list[int]:
    """Split numel elements into world_size shards as evenly as possible, the first numel % p one larger."""
    p = _check_p(world_size)
    if isinstance(numel, bool) or not isinstance(numel, Integral) or numel < 0:
        raise ValueError(f"numel must be an int >= 0, got {numel!r}")
    q, r = divmod(int(numel), p)
    return [q + 1 if i < r else q for i in range(p)]


# ------------------------------------------------------------------------------------ bytes
def _binomial_children(vr: int, p: int) -> int:
    """How many children relative rank vr has in a binomial tree of p ranks rooted at 0."""
    k, children = 0, 0
    while (1 << k) < p:
        mask = 1 << k
        if vr < mask and vr + mask < p:
            children += 1
        k += 1
    return children


def fold_to_power_of_two(rank: int, p: int) -> tuple[int | None, int]:
    """MPICH's step for non-powers of two: of the first 2*rem ranks, the even ones hand their data to the
    odd neighbour and sit out. -> (rank among the p' = 2^floor(lg p) ranks that go on, or None; p')."""
    p2 = 1 << (p.bit_length() - 1)
    rem = p - p2
    if rank < 2 * rem:
        return (None if rank % 2 == 0 else rank // 2), p2
    return rank - rem, p2


def halving_ranges(new_rank: int, p2: int) -> list[tuple[int, int, int, int, int]]:
    """Recursive halving over chunk indices 0..p2-1, one round per bit from the highest:
    (partner, send_lo, send_hi, keep_lo, keep_hi). After the last round rank r keeps chunk r.
    Recursive doubling (all-gather) runs the same rounds backwards, sending the kept range."""
    rounds = []
    lo, hi = 0, p2
    mask = p2 >> 1
    while mask:
        mid = (lo + hi) // 2
        partner = new_rank ^ mask
        if new_rank & mask:
            rounds.append((partner, lo, mid, mid, hi))
            lo = mid
        else:
            rounds.append((partner, mid, hi, lo, mid))
            hi = mid
        mask >>= 1
    return rounds


def bytes_sent_by_rank(op: str, nbytes: float, world_size: int, algorithm: str = "ring",
                       itemsize: int = 1, root: int = 0) -> list[float]:
    """Bytes each rank sends, following each algorithm's schedule exactly (uneven shards included).

    Shards are whole elements of `itemsize` bytes (shard_sizes of nbytes / itemsize elements).
    """
    p, n = _validated(op, nbytes, world_size, algorithm)
    if p == 1:
        return [0.0]
    numel = int(round(n / itemsize))
    s = [x * itemsize for x in shard_sizes(numel, p)]
    vr = [(r - root) % p for r in range(p)]
    if (op, algorithm) == ("all_reduce", "ring"):
        return [2 * n - s[r] - s[(r + 1) % p] for r in range(p)]
    if (op, algorithm) == ("reduce_scatter", "ring"):
        return [n - s[r] for r in range(p)]
    if (op, algorithm) == ("all_gather", "ring"):
        return [n - s[(r + 1) % p] for r in range(p)]
    if op == "all_to_all":
        return [n - s[r] for r in range(p)]  # rank r keeps its own 1/p, sends one block to each other rank
    if op == "sendrecv":
        return [n] * p
    if (op, algorithm) == ("all_reduce", "naive"):
        return [(p - 1) * n if r == root else n for r in range(p)]
    if (op, algorithm) == ("broadcast", "naive"):
        return [(p - 1) * n if r == root else 0.0 for r in range(p)]
    if (op, algorithm) == ("reduce", "naive") or (op, algorithm) == ("reduce", "tree"):
        return [0.0 if r == root else n for r in range(p)]
    if (op, algorithm) == ("broadcast", "tree"):
        return [_binomial_children(vr[r], p) * n for r in range(p)]
    if (op, algorithm) == ("all_reduce", "tree"):  # binomial reduce, then binomial broadcast
        return [(0.0 if r == root else n) + _binomial_children(vr[r], p) * n for r in range(p)]
    if algorithm == "recursive_doubling" and op == "all_reduce":
        out = []
        for r in range(p):
            new, p2 = fold_to_power_of_two(r, p)
            if new is None:
                out.append(n)  # hands its data over, gets the result back
            else:
                out.append(int(math.log2(p2)) * n + (n if r < 2 * (p - p2) else 0.0))
        return out
    if algorithm == "recursive_doubling":  # all_gather / reduce_scatter, power of two
        rounds = [halving_ranges(r, p) for r in range(p)]
        return [sum(sum(s[hi_lo[1]:hi_lo[2]]) for hi_lo in rounds[r]) for r in range(p)]
    if algorithm == "rabenseifner":
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
    raise AssertionError((op, algorithm))  # _check_op makes this unreachable


def bytes_sent_per_rank(op: str, nbytes: float, world_size: int, algorithm: str = "ring") -> float:
    """Bytes sent by the busiest rank, closed form (n divisible by p). Ring all_reduce: 2(p-1)/p n;
    ring all_gather / reduce_scatter: (p-1)/p n; binomial broadcast: ceil(lg p) n; naive all_reduce: (p-1) n."""
    p, n = _validated(op, nbytes, world_size, algorithm)
    frac = (p - 1) / p
    lg2 = p.bit_length() - 1            # floor(lg p)
    clg = (p - 1).bit_length()          # ceil(lg p)
    folded = 0 if is_power_of_two(p) else 1
    key = (op, algorithm)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return frac * n
    if op == "sendrecv":
        return n if p > 1 else 0.0
    if key == ("all_reduce", "ring"):
        return 2 * frac * n
    if key == ("all_reduce", "rabenseifner"):  # non-power of two: also hands the result back
        return 2 * (2**lg2 - 1) / 2**lg2 * n + folded * n
    if key == ("all_reduce", "recursive_doubling"):
        return (lg2 + folded) * n
    if key in (("all_reduce", "naive"), ("broadcast", "naive")):
        return (p - 1) * n
    if key in (("broadcast", "tree"), ("all_reduce", "tree")):
        return clg * n
    return n if p > 1 else 0.0  # reduce: every non-root sends its tensor once


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests: busbw = algbw * factor. all_reduce 2(p-1)/p; all_gather, reduce_scatter, all_to_all (p-1)/p;
    broadcast, reduce, sendrecv 1."""
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    p = _check_p(world_size)
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
    """
    p, n = _validated(op, nbytes, world_size, algorithm)
    if p == 1:
        return 0.0, 0.0, 0.0
    lg = math.log2(p)
    clg = (p - 1).bit_length()  # ceil(lg p)
    frac = (p - 1) / p
    key = (op, algorithm)
    if key == ("all_reduce", "ring"):
        return 2 * (p - 1), 2 * frac * n, frac * n
    if key == ("all_reduce", "tree"):
        return 2 * clg, 2 * clg * n, clg * n
    if key == ("all_reduce", "naive"):
        return 2 * (p - 1), 2 * (p - 1) * n, (p - 1) * n
    if key in (("all_reduce", "recursive_doubling"), ("all_reduce", "rabenseifner")):
        lg2 = p.bit_length() - 1  # floor(lg p)
        fold = (0, 0, 0) if is_power_of_two(p) else (2, 2 * n, n)
        if algorithm == "recursive_doubling":
            core = (lg2, lg2 * n, lg2 * n)
        else:
            frac2 = (2**lg2 - 1) / 2**lg2
            core = (2 * lg2, 2 * frac2 * n, frac2 * n)
        return tuple(float(c + f) for c, f in zip(core, fold))
    if key == ("reduce_scatter", "ring"):
        return p - 1, frac * n, frac * n
    if key == ("reduce_scatter", "recursive_doubling"):  # recursive halving
        return lg, frac * n, frac * n
    if key == ("all_gather", "ring"):
        return p - 1, frac * n, 0.0
    if key == ("all_gather", "recursive_doubling"):
        return lg, frac * n, 0.0
    if key == ("broadcast", "tree"):
        return clg, clg * n, 0.0
    if key == ("broadcast", "naive"):
        return p - 1, (p - 1) * n, 0.0
    if key == ("reduce", "tree"):
        return clg, clg * n, clg * n
    if key == ("reduce", "naive"):
        return p - 1, (p - 1) * n, (p - 1) * n
    if key == ("all_to_all", "ring"):
        return p - 1, frac * n, 0.0
    if key == ("sendrecv", "ring"):
        return 1, n, 0.0
    raise AssertionError(key)  # _check_op makes this unreachable


def _link(link) -> Link:
    if isinstance(link, str):
        if link not in LINKS:
            raise ValueError(f"link must be a Link or one of {tuple(LINKS)}, got {link!r}")
        return LINKS[link]
    if not isinstance(link, Link):
        raise TypeError(f"link must be a Link or a preset name, got {type(link).__name__}")
    return link


def _gamma(gamma) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, Real) or not gamma >= 0:
        raise ValueError(f"gamma must be seconds per byte >= 0, got {gamma!r}")
    return float(gamma)


def collective_time(op: str, nbytes: float, world_size: int, link: Link | str,
                    algorithm: str = "ring", gamma: float = 0.0) -> float:
    """Seconds for one collective under the alpha-beta-gamma model (Thakur et al. 2005).

    ring all_reduce: 2(p-1) a + 2(p-1)/p n b + (p-1)/p n g;  recursive doubling: lg p (a + n b + n g);
    rabenseifner: 2 lg p a + 2(p-1)/p n b + (p-1)/p n g;  binomial broadcast: ceil(lg p)(a + n b).
    """
    return breakdown(op, nbytes, world_size, link, algorithm, gamma)["time_s"]


def breakdown(op: str, nbytes: float, world_size: int, link: Link | str, algorithm: str = "ring",
              gamma: float = 0.0) -> dict:
    """The model's answer term by term: latency_s, bandwidth_s, reduction_s, time_s, bytes_per_rank
    (busiest rank), algbw_GBps and busbw_GBps as nccl-tests would report them, and the bottleneck term."""
    link, g = _link(link), _gamma(gamma)
    messages, nb, reduced = critical_path(op, nbytes, world_size, algorithm)
    terms = {"latency_s": messages * link.latency, "bandwidth_s": nb * link.beta, "reduction_s": reduced * g}
    total = sum(terms.values())
    algbw = nbytes / total / 1e9 if total > 0 else float("inf")
    return {**terms, "time_s": total,
            "bytes_per_rank": bytes_sent_per_rank(op, nbytes, world_size, algorithm),
            "algbw_GBps": algbw, "busbw_GBps": algbw * bus_factor(op, world_size),
            "bottleneck": max(terms, key=terms.get).removesuffix("_s") if total > 0 else "none"}


def crossover_bytes(op: str, algorithm_a: str, algorithm_b: str, world_size: int, link: Link | str,
                    gamma: float = 0.0) -> float | None:
    """The size n at which two algorithms take equal time (both are a + n*slope in n), or None if they never
    cross for n > 0. Below it, the one with fewer messages wins; above it, the one with fewer bytes."""
    link, g = _link(link), _gamma(gamma)
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
    n = np.asarray(nbytes_list, dtype=float)
    t = np.asarray(seconds_list, dtype=float)
    if n.ndim != 1 or n.shape != t.shape:
        raise ValueError(f"nbytes_list and seconds_list must be 1-D and of equal length, got {n.shape} and {t.shape}")
    if len(n) < 2 or len(np.unique(n)) < 2:
        raise ValueError("fit_alpha_beta needs at least two different sizes")
    if not (np.all(np.isfinite(n)) and np.all(n >= 0) and np.all(np.isfinite(t)) and np.all(t > 0)):
        raise ValueError("sizes must be finite and >= 0, times finite and > 0")
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
        w = np.where(np.abs(r) <= k, 1.0, k / np.abs(r))
    return float(alpha), float(beta)
