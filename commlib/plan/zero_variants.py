"""What each implementation of sharded data parallelism sends per step, where it departs from the ZeRO paper's
collectives (planner.dp_bytes_per_rank: reduce-scatter the gradients, all-gather the parameters). Bytes each rank
sends over ring (NCCL) collectives; P = params x bytes, N = dp.

ZeRO-1/2 (zero12_collectives):
    "paper"     the ZeRO paper, Megatron-LM's distributed optimizer, FSDP's SHARD_GRAD_OP: reduce-scatter
                (N-1)/N P, then all-gather (N-1)/N P: DDP's 2(N-1)/N P.
    "deepspeed" DeepSpeed's own ZeRO-1/2 (deepspeed/runtime/zero/stage_1_and_2.py, average_tensor), by default
                (use_multi_rank_bucket_allreduce = True, runtime/zero/config.py): each gradient bucket is
                all-reduced (allreduce_and_scatter -> allreduce_bucket) and every rank keeps only the slices it
                owns, 2(N-1)/N P; then the all-gather of the updated parameters: 3(N-1)/N P, 1.5 x DDP's bytes.
                With reduce_scatter = False in its config, the same all-reduce of the whole bucket.
    "deepspeed_reduce"  the same with use_multi_rank_bucket_allreduce = False: one dist.reduce per owning rank
                of each bucket (allreduce_no_retain -> allreduce_bucket(rank=...)). NCCL's reduce runs along a
                ring, each rank but the root sending the slice once: (N-1)/N P in all, then the all-gather: DDP's
                2(N-1)/N P, in N reduces per bucket.
    Neither DeepSpeed path issues a reduce-scatter.

ZeRO-3 / FSDP (fsdp_bytes_per_rank): the parameters are all-gathered before forward and again before backward,
3(N-1)/N P, except those of units that stay gathered from forward to backward (kept_params): FSDP2's default
reshard_after_forward=None keeps the root module's own parameters (torch 2.13,
torch/distributed/fsdp/_fully_shard/_fully_shard.py); reshard_after_forward=False keeps every unit's, as Llama 3
did (Dubey et al. 2024, section 3.3.2): 2(N-1)/N P, at the memory of unsharded parameters.
"""

from __future__ import annotations

from commlib import _validate as check

ZERO12 = ("paper", "deepspeed", "deepspeed_reduce")


def _sizes(params, dp, grad_bytes, param_bytes) -> tuple[float, float, float, float]:
    """(params, (N-1)/N, grad_bytes, param_bytes) validated; param_bytes defaults to grad_bytes."""
    p = check.number("params", params, 0)
    n = check.integer("dp", dp, 1, check.MAX_RANKS)
    g = check.number("grad_bytes", grad_bytes, 0, strict=True)
    w = g if param_bytes is None else check.number("param_bytes", param_bytes, 0, strict=True)
    return p, (n - 1) / n, g, w


def zero12_collectives(params, dp, implementation="deepspeed", grad_bytes=2, param_bytes=None
                       ) -> list[tuple[str, float]]:
    """[(collective, bytes each rank sends)] per step of ZeRO-1/2 as `implementation` runs it (see the module)."""
    impl = check.choice("implementation", implementation, ZERO12)
    p, frac, g, w = _sizes(params, dp, grad_bytes, param_bytes)
    grads = {"paper": ("reduce_scatter", frac * p * g), "deepspeed": ("all_reduce", 2 * frac * p * g),
             "deepspeed_reduce": ("reduce", frac * p * g)}[impl]
    return [grads, ("all_gather", frac * p * w)]


def zero12_bytes_per_rank(params, dp, implementation="deepspeed", grad_bytes=2, param_bytes=None) -> float:
    """Bytes each rank sends per step for ZeRO-1/2 as `implementation` runs it: "paper" and "deepspeed_reduce"
    2(N-1)/N P, DeepSpeed's default ("deepspeed") 3(N-1)/N P."""
    return sum(b for _, b in zero12_collectives(params, dp, implementation, grad_bytes, param_bytes))


def fsdp_bytes_per_rank(params, dp, kept_params=0, grad_bytes=2, param_bytes=None) -> float:
    """Bytes each rank sends per step for ZeRO-3 / FSDP: (N-1)/N x (all-gathers of params before forward and of
    params - kept_params before backward, reduce-scatter of the gradients); kept_params: parameters of the units
    that stay gathered between forward and backward (FSDP2's default: the root's own)."""
    p, frac, g, w = _sizes(params, dp, grad_bytes, param_bytes)
    kept = check.number("kept_params", kept_params, 0, high=p)
    return frac * ((2 * p - kept) * w + p * g)
