"""Reducing gradients in low precision: FP16 overflow, swamping, underflow, and the usual fixes.

simulate_reduction(grads, strategy, order) averages one tensor per rank the way a collective would,
rounding after every hop exactly as the strategy's dtype would:

    fp16             cast to fp16, sum hop by hop in fp16, divide by p in fp16
    fp32_accumulate  fp16 gradients, but the partial sums are added and forwarded in fp32 (twice the
                     bytes); mean in fp32, cast back to fp16: "reduce in FP32, cast back"
    predivide        cast to fp16, divide by p first (torch DDP's fp16_compress_hook), sum in fp16
    ddp_default      fp16 gradients, multiplied by 1/p while they are copied into the bucket, then summed in
                     fp16: what torch DDP does without a hook when the model is fp16 (reducer.cpp,
                     mark_variable_ready_dense: at::mul_out(bucket_view, grad, 1/div_factor), or
                     bucket_view.div_(div_factor) where the gradient is a view of its bucket: the same for p a
                     power of two); NCCL's ReduceOp.AVG (a pre-multiplication by 1/p in the type) and FSDP2's
                     fp32/bf16 path are the same kind: a pre-division
    pre_post_divide  divide by f before and by p/f after the fp16 sum (FSDP's gradient predivide factor;
                     FSDP1 for every dtype, FSDP2 for every dtype but fp32 and bf16)
    bf16             cast to bf16, sum and divide in bf16 (fp32's range, 8 significant bits)

order: "ring" (the partial sums of a ring reduce-scatter: chunk c starts at rank c+1 and ends at
rank c, as commlib.algorithms.ring_all_reduce does), "tree" (binomial, rank 0 last) or "sequential"
(rank 0 + rank 1 + ... in one running sum). live_reduction() does the same on a Cluster's ranks with
real collectives, and agrees with the simulation.
"""

from __future__ import annotations

import torch

from commlib import _validate as check
from commlib.cost import shard_sizes

STRATEGIES = ("fp16", "fp32_accumulate", "predivide", "ddp_default", "pre_post_divide", "bf16")
ORDERS = ("ring", "tree", "sequential")


def predivide_factor(world_size: int) -> int:
    """FSDP's gradient predivide factor: double f while p % f == 0 and p / f > f (p=8 -> 4, p=16 -> 4)."""
    world_size = check.integer("world_size", world_size, low=1)
    f = 1
    while world_size % f == 0 and world_size / f > f:
        f *= 2
    return f


def _plan(strategy: str, p: int):
    """-> (wire dtype, accumulation dtype, divide before, divide after, dtype of the stored result).
    A negative "divide before" -f means: multiply by 1/f instead (ddp_default)."""
    if strategy == "fp16":
        return torch.float16, torch.float16, 1, p, torch.float16
    if strategy == "fp32_accumulate":
        return torch.float16, torch.float32, 1, p, torch.float16
    if strategy == "predivide":
        return torch.float16, torch.float16, p, 1, torch.float16
    if strategy == "ddp_default":
        return torch.float16, torch.float16, -p, 1, torch.float16
    if strategy == "pre_post_divide":
        f = predivide_factor(p)
        return torch.float16, torch.float16, f, p / f, torch.float16
    if strategy == "bf16":
        return torch.bfloat16, torch.bfloat16, 1, p, torch.bfloat16
    raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")


def _check(grads, strategy: str, order: str) -> list[torch.Tensor]:
    if not isinstance(order, str) or order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    _check_strategy(strategy)
    return _check_grads(grads)


def _check_strategy(strategy: str) -> None:
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")


def _check_grads(grads) -> list[torch.Tensor]:
    if not isinstance(grads, (list, tuple)) or not grads or not all(isinstance(g, torch.Tensor) for g in grads):
        raise TypeError("grads must be a non-empty list of tensors, one per rank")
    if any(g.shape != grads[0].shape for g in grads):
        raise ValueError(f"every rank's gradient must have the same shape, got {[tuple(g.shape) for g in grads]}")
    if not all(g.dtype.is_floating_point for g in grads):
        raise TypeError("grads must be floating-point tensors")
    return [g.detach().reshape(-1) for g in grads]


def sum_in_order(xs: list[torch.Tensor], order: str, acc_dtype) -> torch.Tensor:
    """Sum one tensor per rank in the collective's order, rounding every partial sum to acc_dtype."""
    p = len(xs)
    xs = [x.to(acc_dtype) for x in xs]
    if order == "sequential":
        acc = xs[0].clone()
        for x in xs[1:]:
            acc = x + acc  # one hop: the receiver adds its own value to the partial sum it received
        return acc
    if order == "tree":  # binomial reduce to rank 0: at round k, rank r (bit k clear) adds rank r + 2^k
        partial = [x.clone() for x in xs]
        mask = 1
        while mask < p:
            for r in range(0, p, 2 * mask):
                if r + mask < p:
                    partial[r] = partial[r] + partial[r + mask]
            mask <<= 1
        return partial[0]
    # ring: chunk c travels c+1 -> c+2 -> ... -> c, each rank adding its own chunk to the partial sum
    out = torch.empty_like(xs[0])
    start = 0
    for c, size in enumerate(shard_sizes(xs[0].numel(), p)):
        sl = slice(start, start + size)
        acc = xs[(c + 1) % p][sl].clone()
        for step in range(2, p + 1):
            acc = xs[(c + step) % p][sl] + acc
        out[sl] = acc
        start += size
    return out


def _predivide(x: torch.Tensor, before) -> torch.Tensor:
    """Divide by `before` (or multiply by 1/|before| when negative) in x's dtype: this is where small
    gradients underflow."""
    if before == 1:
        return x
    return x * (1.0 / -before) if before < 0 else x / before


def simulate_reduction(grads, strategy: str, order: str = "ring") -> torch.Tensor:
    """The mean of one gradient per rank, as `strategy` computes it in a collective of the given order;
    float32, with every intermediate rounded to the strategy's dtypes (inf where fp16 overflows)."""
    xs = _check(grads, strategy, order)
    p = len(xs)
    wire, acc, before, after, stored = _plan(strategy, p)
    sent = [_predivide(x.to(wire), before) for x in xs]
    total = sum_in_order(sent, order, acc)
    mean = total / after if after != 1 else total
    return mean.to(stored).to(torch.float32).reshape(grads[0].shape)


def exact_mean(grads) -> torch.Tensor:
    """The mean in float64, the reference every strategy is compared with."""
    return torch.stack([g.detach().to(torch.float64) for g in grads]).mean(0)


def report(result: torch.Tensor, grads) -> dict:
    """How a reduced mean compares with the exact one: inf/nan count, values flushed to zero, errors.
    result has the shape of each rank's gradient."""
    _check_grads(grads)
    shape = grads[0].shape
    if not isinstance(result, torch.Tensor):
        raise TypeError(f"result must be a tensor (the reduced mean), got {type(result).__name__}")
    if result.shape != shape:
        raise ValueError(f"result must have the shape of each rank's gradient, {tuple(shape)}, "
                         f"got {tuple(result.shape)}")
    exact = exact_mean(grads).reshape(-1)
    r = result.detach().to(torch.float64).reshape(-1)
    finite = torch.isfinite(r)
    nonzero = exact != 0
    err = (r - exact).abs()
    rel = err[finite & nonzero] / exact[finite & nonzero].abs()
    return {
        "inf": int(torch.isinf(r).sum()),
        "nan": int(torch.isnan(r).sum()),
        "flushed_to_zero": int(((r == 0) & nonzero).sum()),
        "max_abs_error": float(err[finite].max()) if finite.any() else float("nan"),
        "max_rel_error": float(rel.max()) if rel.numel() else 0.0,
        "mean_rel_error": float(rel.mean()) if rel.numel() else 0.0,
    }


def sequential_sum_of_ones(count: int, dtype=torch.float16) -> float:
    """1 + 1 + ... (count times) with every partial sum rounded to dtype: fp16 stalls at 2048 (swamping)."""
    count = check.integer("count", count, low=0)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    one = torch.ones((), dtype=dtype)
    acc = torch.zeros((), dtype=dtype)
    for _ in range(count):
        acc = acc + one
    return float(acc)


def formats(dtypes=(torch.float16, torch.bfloat16, torch.float32)) -> list[dict]:
    """Facts about each floating-point format, read from torch.finfo."""
    rows = []
    for d in dtypes:
        fi = torch.finfo(d)
        rows.append({"dtype": str(d).replace("torch.", ""), "bits": fi.bits, "max": fi.max, "eps": fi.eps,
                     "min_normal": fi.tiny, "min_subnormal": fi.smallest_normal * fi.eps,
                     "mantissa_bits": int(round(-torch.log2(torch.tensor(fi.eps)).item()))})
    return rows


# --------------------------------------------------------------------------------- live, in a rank
def live_reduction(grad: torch.Tensor, strategy: str, algorithm: str = "ring") -> torch.Tensor:
    """Inside a rank: this rank's gradient -> the mean over ranks, by `strategy`, with real collectives.

    algorithm "ring": commlib's ring all-reduce on fp16/bf16 tensors (or fp32 for the accumulation),
    which rounds every hop like simulate_reduction(order="ring"); "builtin": torch.distributed's own
    all_reduce (Gloo's for CPU tensors), whose summation order is its own."""
    import torch.distributed as dist

    from commlib import algorithms as alg

    if algorithm not in ("ring", "builtin"):
        raise ValueError(f"algorithm must be 'ring' or 'builtin', got {algorithm!r}")
    p = dist.get_world_size()
    wire, acc, before, after, stored = _plan(strategy, p)
    x = _predivide(grad.detach().reshape(-1).to(wire), before)
    x = x.to(acc)  # fp32_accumulate: every hop adds in fp32 (the bytes on the wire double, the sums are exact)
    if algorithm == "ring":
        alg.ring_all_reduce(x)
    else:
        dist.all_reduce(x)
    if after != 1:
        x = x / after
    return x.to(stored).to(torch.float32).reshape(grad.shape)


# ------------------------------------------------------------------------------- experiments
def data_parallel_grads(world_size: int, magnitude: float, numel: int = 4096, spread: float = 0.5,
                        seed: int = 0) -> list[torch.Tensor]:
    """Gradients as data parallelism produces them: one shared direction plus per-rank noise,
    g_r = magnitude * (d + spread * noise_r), d and noise standard normal. Their sum grows like p."""
    world_size, numel = check.integer("world_size", world_size, low=1), check.integer("numel", numel, low=1)
    magnitude = check.number("magnitude", magnitude, low=0, strict=True)
    spread = check.number("spread", spread, low=0)
    g = torch.Generator().manual_seed(check.integer("seed", seed))
    d = torch.randn(numel, generator=g, dtype=torch.float64)
    return [(magnitude * (d + spread * torch.randn(numel, generator=g, dtype=torch.float64))).float()
            for _ in range(world_size)]


def experiment(world_size: int, magnitude: float, strategy: str, order: str = "ring", numel: int = 4096,
               seed: int = 0) -> dict:
    """report() for data_parallel_grads(world_size, magnitude) reduced by `strategy`."""
    grads = data_parallel_grads(world_size, magnitude, numel, seed=seed)
    return report(simulate_reduction(grads, strategy, order), grads)


def error_vs_world_size(world_sizes, magnitude: float, strategies=STRATEGIES, numel: int = 4096) -> dict:
    """strategy -> list of (share of values lost to inf/nan/zero, mean relative error of the rest), per p."""
    world_sizes = [check.integer(f"world_sizes[{i}]", p, low=1)
                   for i, p in enumerate(check.listed("world_sizes", world_sizes, "world size"))]
    for s in check.listed("strategies", strategies, "strategy"):
        _check_strategy(s)
    check.number("magnitude", magnitude, low=0, strict=True)
    numel = check.integer("numel", numel, low=1)
    out = {}
    for s in strategies:
        rows = []
        for p in world_sizes:
            r = experiment(p, magnitude, s, numel=numel)
            rows.append(((r["inf"] + r["nan"] + r["flushed_to_zero"]) / numel, r["mean_rel_error"]))
        out[s] = rows
    return out
