"""Fewer bits per value: FP16 (torch's fp16_compress_hook), and 8-bit codes with a per-bucket scale.

fp16_hook: cast to fp16, divide by p, all-reduce in fp16, cast back (torch 2.13.0,
torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py, _compress_hook). It survives all-reduce
because fp16 values can be added on the way (with the overflow and rounding of chapter 4).

quantize_hook, int8: code = round(delta / s), s = max|delta| / 127; fp8: code = fp8_e4m3(delta / s),
s = max|delta| / 448 (the largest e4m3fn value). Codes do not survive an all-reduce that adds them in
their own type: each rank has its own scale, so codes of different ranks mean different amounts. With one
shared scale, int8's sum of p codes would still need log2(p) more bits than one code (int8_ring_sum shows
the wrap-around); FP8 floats add as floats (NCCL sums ncclFloat8e4m3/e5m2 on SM 90 and newer), rounding at
each hop, so for fp8 the per-rank scale is the whole objection. Done correctly, either all-gather every rank's codes and scale and sum the
dequantised values in fp32 (what quantize_hook does: (p-1)(N + 4) bytes a rank, growing with p), or
dequantise at every hop of the ring, add in fp32 and quantise again for the next hop (2(p-1)/p N bytes,
but a rounding error at every hop that no error feedback sees; not implemented here).

Non-finite gradients (an fp16 overflow under AMP) stay non-finite where they are, as in a plain
all-reduce, so that GradScaler sees them and skips the step: the scale comes from the finite values, and
a NaN or inf is sent as the spare code NOT_FINITE (int8 -128, which no finite value uses; e4m3fn's NaN),
which decodes to NaN. The mean is then NaN exactly where a plain all-reduce's is inf or NaN, and
finite elsewhere. (Raising instead would break AMP, whose first steps overflow on purpose.) The residual
keeps 0 there, so error feedback carries no NaN into later steps.
"""

import math
import time

import torch
import torch.distributed as dist

from commlib import _validate as check
from commlib.compression.comm import HookState
from commlib.precision import sum_in_order

CODES = {"int8": (torch.int8, 127.0), "fp8": (torch.float8_e4m3fn, 448.0)}  # code dtype, largest code
# The smallest scale: fp32's smallest subnormal, 2^-149. For a tiny tensor (max|delta| below 448 * 2^-149, about
# 6e-43) max|delta| / largest underflows to 0 in fp32 and delta / scale is 0 / 0 or inf (fp8: NaN, e4m3fn has no
# inf); a subnormal scale rounds, so delta / scale may pass the largest code, and is clamped to it. The error
# stays below half a code step of the scale, at worst 2^-150: nothing an fp32 value could hold anyway.
TINY = torch.finfo(torch.float32).smallest_normal * 2.0**-23
NOT_FINITE = {"int8": -128, "fp8": math.nan}  # the code of a NaN or inf (decodes to NaN)


def fp16_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """torch's fp16_compress_hook: fp16(g) / p summed over ranks in fp16, copied back into the bucket."""
    t0 = time.perf_counter()
    buffer = bucket.buffer()
    half = state.comm.all_reduce(buffer.to(torch.float16).div_(state.comm.world_size))
    return state.finish(bucket, half, t0)


class QuantState(HookState):
    """State of quantize_hook: code "int8" or "fp8" (float8_e4m3fn), error feedback on or off."""

    def __init__(self, code: str = "int8", error_feedback: bool = True, comm=None):
        code = check.choice("code", code, tuple(CODES))
        super().__init__(error_feedback, comm)
        self.code = code


def quantize(delta: torch.Tensor, code: str = "int8") -> tuple[torch.Tensor, torch.Tensor]:
    """-> (codes, scale): delta ~ codes * scale, one fp32 scale for the whole tensor (max|delta| / largest code,
    over the finite values, at least TINY); a NaN or inf gets the code NOT_FINITE."""
    dtype, largest = CODES[check.choice("code", code, tuple(CODES))]
    check.instance("delta", delta, torch.Tensor, "a torch.Tensor")
    finite = torch.isfinite(delta.detach())
    values = delta.detach().float().where(finite, 0.0)
    amax = values.abs().max() if delta.numel() else torch.zeros((), device=delta.device)
    scale = torch.where(amax > 0, (amax / largest).clamp_min(TINY), torch.ones_like(amax))
    scaled = (values / scale).clamp_(-largest, largest)  # amax / largest rounds: never past the largest code
    codes = scaled.round() if code == "int8" else scaled
    return codes.masked_fill_(~finite, NOT_FINITE[code]).to(dtype), scale


def dequantize(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """codes * scale in fp32; NOT_FINITE codes -> NaN."""
    check.instance("codes", codes, torch.Tensor, "a torch.Tensor of int8 or float8_e4m3fn codes")
    if not isinstance(scale, torch.Tensor) or not scale.is_floating_point():
        raise TypeError(f"scale must be a floating-point torch.Tensor (quantize's), got {type(scale).__name__}")
    out = codes.float() * scale
    return out.masked_fill_(codes == NOT_FINITE["int8"], math.nan) if codes.dtype == torch.int8 else out


def quantize_hook(state: QuantState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """8-bit codes of delta = g + e with one scale per rank; all-gather codes and scales; sum the dequantised
    values in fp32; mean. Sends (p-1)(N + 4) bytes a rank."""
    t0 = time.perf_counter()
    delta = state.with_residual(bucket)
    codes, scale = quantize(delta, state.code)
    mine = dequantize(codes, scale)
    state.remember(bucket, (delta - mine.to(delta.dtype)).nan_to_num_(0.0, 0.0, 0.0))  # no NaN carried on
    payload = torch.cat([scale.reshape(1).view(torch.uint8), codes.view(torch.uint8)])
    table = state.comm.all_gather(payload)                       # (p, 4 + N): each rank's scale, then its codes
    scales = table[:, :4].contiguous().view(torch.float32)       # (p, 1)
    all_codes = table[:, 4:].contiguous().view(codes.dtype)      # (p, N)
    total = dequantize(all_codes, scales).sum(0)                 # fp32: no code is ever added to another code
    return state.finish(bucket, (total / state.comm.world_size).to(delta.dtype), t0)


def int8_ring_sum(codes) -> dict:
    """What adding int8 codes in int8 around a ring gives (each partial sum wraps modulo 256, as int8
    addition does), against the true sum. codes: one int8 tensor (or list of ints) per rank.
    -> {"ring": int8 result, "exact": int64 sum, "wrapped": bool mask where they differ}."""
    if not isinstance(codes, (list, tuple)) or not codes:
        raise ValueError("codes must be a list with one int8 tensor (or list of ints) per rank")
    xs = [torch.as_tensor(c).reshape(-1) for c in codes]
    if any(x.dtype.is_floating_point or x.dtype == torch.bool for x in xs) or len({x.numel() for x in xs}) != 1:
        raise ValueError("codes must hold integers, the same number on every rank")
    xs = [x.to(torch.int64) for x in xs]
    if any(((x < -128) | (x > 127)).any() for x in xs):
        raise ValueError("codes must be ints in [-128, 127] (int8)")
    ring = sum_in_order([x.to(torch.int8) for x in xs], "ring", torch.int8)
    exact = torch.stack(xs).sum(0)
    return {"ring": ring, "exact": exact, "wrapped": ring.to(torch.int64) != exact}
