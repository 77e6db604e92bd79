"""PowerSGD (Vogels, Karimireddy, Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for
Distributed Optimization", NeurIPS 2019): one step of power iteration per training step, rank r.

For each weight viewed as an m x n matrix M (this rank's gradient plus its residual), with Q (n x r)
shared by all ranks (random at first, then last step's: warm start):

    P = M Q;          all-reduce P (sum);   P^ = orthonormal columns of P (Gram-Schmidt)
    Q = M^T P^;       all-reduce Q (mean);  applied update = P^ Q^T          r(m+n) values instead of mn

P and Q are linear in M, so their sums over ranks are the sums of each rank's share: all-reduce
compatible. Each rank keeps e = M - P^ (M^T P^)^T, what its share lost (Algorithm 2, line 9). Vectors
(biases) and matrices that would not shrink by min_compression_rate are all-reduced as they are.

Same as torch's powerSGD_hook (torch 2.13.0, torch/distributed/algorithms/ddp_comm_hooks/
powerSGD_hook.py) with matching PowerSGDState settings, except (neither changes the applied
update in exact arithmetic; tests/test_compression.py compares the two):
- torch keeps e = (M) - (P^ Q_mean^T), this rank's input minus the averaged result (decompress:
  `input_tensor_cp - input_tensor`), also for uncompressed tensors; the residuals' sum over
  ranks, and so every update, is the same;
- torch orthogonalizes with QR (torch.linalg.qr) for r > 2; Gram-Schmidt here for every r (the
  same columns up to sign, and P^ P^^T M does not depend on the sign);
- torch draws the first Qs of a bucket grouped by shape; here in bucket order (the same Qs when
  no two matrices of a bucket share a shape); its state is per bucket, and DDP rebuilds its
  buckets after the first iteration, so PowerSGDState requires start_powerSGD_iter > 1 when
  use_error_feedback or warm_start is on (a ValueError; torch 2.13 powerSGD_hook.py,
  PowerSGDState.__init__), not otherwise; the state here is kept per parameter, so
  start_iter=0 works with both;
- torch views a vector as an n x 1 matrix, which min_compression_rate >= 1 never compresses (the
  default 2 does not); here vectors are never compressed, whatever the rate.

One difference is on purpose, after an overflow. A NaN or inf in one rank's gradient (fp16
under AMP, whose dynamic loss scale overflows now and then by design) spreads in torch's hook
through P and Q into its warm-start Q and its residual, so every later step is NaN too, and
training never recovers (against_torch.powersgd_overflow_vs_torch runs both). Here a matrix
whose summed P or averaged Q is not finite (the same on every rank: both are all-reduced) comes
out all NaN, so GradScaler skips the step as after a plain all-reduce, and its Q and residual
stay as they were, as if the step had not happened. All of the matrix is NaN: P and Q mix all
of M, so PowerSGD cannot say where it overflowed.
"""

import time

import numpy as np
import torch
import torch.distributed as dist

from commlib import _validate as check
from commlib.compression.closed_form import (MIN_COMPRESSION_RATE, check_min_compression_rate, check_rank,
                                             matrix_view, powersgd_compresses)
from commlib.compression.comm import HookState, split


class PowerSGDState(HookState):
    """State of powersgd_hook. rank: r; start_iter: plain all-reduce before that iteration (torch's
    start_powerSGD_iter); epsilon: added to column norms (torch's orthogonalization_epsilon); seed: of the
    numpy generator that draws one torch seed per bucket needing fresh Qs (the same on every rank)."""

    def __init__(self, rank: int = 1, error_feedback: bool = True, warm_start: bool = True, start_iter: int = 0,
                 min_compression_rate: float = MIN_COMPRESSION_RATE, epsilon: float = 0.0, seed: int = 0,
                 comm=None):
        super().__init__(error_feedback, comm)
        self.rank = check_rank(rank)
        self.min_compression_rate = check_min_compression_rate(min_compression_rate)
        self.start_iter = check.integer("start_iter", start_iter, 0)
        self.epsilon = check.number("epsilon", epsilon, 0, high=1.0)
        self.warm_start = bool(warm_start)
        self.rng = np.random.RandomState(check.integer("seed", seed, 0, 2**32 - 1))
        self.qs: dict[int, torch.Tensor] = {}  # id(parameter) -> Q (n x r), kept for warm start


def orthogonalize_(a: torch.Tensor, epsilon: float = 0.0) -> torch.Tensor:
    """Gram-Schmidt in place: the columns of a (m x r) become orthonormal, spanning the same space."""
    if not isinstance(a, torch.Tensor) or a.dim() != 2 or not a.is_floating_point():
        raise TypeError(f"a must be a 2-D floating-point torch.Tensor (m x r), got {type(a).__name__}")
    epsilon = check.number("epsilon", epsilon, 0, high=1.0)
    for i in range(a.shape[1]):
        col = a[:, i:i + 1]
        col /= col.norm() + epsilon
        if i + 1 < a.shape[1]:  # remove this direction from the columns still to come
            rest = a[:, i + 1:]
            rest -= (col * rest).sum(0, keepdim=True) * col
    return a


def _initial_qs(state: PowerSGDState, params, mats: list[torch.Tensor]) -> list[torch.Tensor]:
    """Q for each matrix: last step's (warm start) or fresh normal draws from one seed for this bucket."""
    fresh = [i for i, p in enumerate(params) if not state.warm_start or id(p) not in state.qs]
    gen = torch.Generator().manual_seed(int(state.rng.randint(1_000_000_000))) if fresh else None
    qs = []
    for i, (p, m) in enumerate(zip(params, mats)):
        r = min(*m.shape, state.rank)
        q = torch.randn(m.shape[1], r, generator=gen, dtype=m.dtype).to(m.device) if i in fresh else state.qs[id(p)]
        qs.append(orthogonalize_(q, state.epsilon))  # keeps Q's scale bounded; no change to P^ (see module doc)
    return qs


def powersgd_hook(state: PowerSGDState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """PowerSGD of the bucket's matrices, plain all-reduce of its vectors; -> the mean over ranks."""
    t0 = time.perf_counter()
    p_world = state.comm.world_size
    buffer = bucket.buffer()
    if state.iter < state.start_iter:
        state.comm.all_reduce(buffer.div_(p_world))
        return state.finish(bucket, buffer, t0)
    params = bucket.parameters()
    delta = state.with_residual(bucket)
    views = split(delta, params)
    squeeze = [i for i, p in enumerate(params) if matrix_view(tuple(p.shape)) is not None
               and powersgd_compresses(*matrix_view(tuple(p.shape)), state.rank, state.min_compression_rate)]
    plain = [i for i in range(len(params)) if i not in squeeze]
    out, residual = torch.empty_like(delta), torch.zeros_like(delta)
    out_views, residual_views = split(out, params), split(residual, params)

    if plain:  # vectors and small matrices: one all-reduce of all of them, as they are
        flat = state.comm.all_reduce(torch.cat([views[i].reshape(-1) for i in plain])).div_(p_world)
        for i, part in zip(plain, split(flat, [params[i] for i in plain])):
            out_views[i].copy_(part)
    if squeeze:
        mats = [views[i].reshape(views[i].shape[0], -1) for i in squeeze]
        q_in = _initial_qs(state, [params[i] for i in squeeze], mats)
        ps = [m @ q for m, q in zip(mats, q_in)]
        state.comm.all_reduce(_cat_into(ps))                      # P summed: it is normalised next anyway
        finite = [bool(torch.isfinite(p).all()) for p in ps]     # the same on every rank (see module doc)
        for p in ps:
            orthogonalize_(p, state.epsilon)
        qs = [m.t() @ p for m, p in zip(mats, ps)]                # this rank's Q for the shared P^
        for i, m, p, q in zip(squeeze, mats, ps, qs):
            residual_views[i].copy_((m - p @ q.t()).view_as(residual_views[i]))
        state.comm.all_reduce(_cat_into(qs)).div_(p_world)       # Q averaged over ranks
        for k, (i, p, q) in enumerate(zip(squeeze, ps, qs)):
            if not (finite[k] and torch.isfinite(q).all()):      # an overflow: skipped, state kept
                out_views[i].fill_(float("nan"))
                before = state.residuals.get(id(params[i]))          # none at first, or without error feedback
                residual_views[i].copy_(before.view_as(residual_views[i]) if before is not None else 0.0)
                q = q_in[k]
            else:
                out_views[i].copy_((p @ q.t()).view_as(out_views[i]))
            if state.warm_start:
                state.qs[id(params[i])] = q
    state.remember(bucket, residual)
    return state.finish(bucket, out, t0)


def _cat_into(mats: list[torch.Tensor]) -> torch.Tensor:
    """One flat tensor holding all mats, which become views of it (one collective for all of them)."""
    flat = torch.cat([m.reshape(-1) for m in mats])
    offset = 0
    for i, m in enumerate(mats):
        mats[i] = flat[offset:offset + m.numel()].view(m.shape)
        offset += m.numel()
    return flat
