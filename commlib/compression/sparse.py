"""Top-k sparsification with error feedback (Lin et al., "Deep Gradient Compression", ICLR 2018).

Each rank sends only the k = round(fraction * N) entries of delta = g + e largest in magnitude and keeps
the rest in its residual e, to be sent once it has grown (DGC's "gradient accumulation"). Ranks pick
different coordinates, so their messages cannot be added on the way: this is not all-reduce compatible.
Every rank all-gathers every rank's (int32 index, value) pairs and adds them up, sending
(p-1) * k * (4 + itemsize) bytes: unlike an all-reduce's 2(p-1)/p * N * itemsize, this grows with p.
DGC's momentum correction, local gradient clipping, momentum factor masking and warm-up are left out.
"""

import time

import torch
import torch.distributed as dist

from commlib import _validate as check
from commlib.compression.closed_form import check_fraction, topk_count
from commlib.compression.comm import HookState


class TopKState(HookState):
    """State of topk_hook: the fraction of each bucket's values sent, error feedback on or off."""

    def __init__(self, fraction: float, error_feedback: bool = True, comm=None):
        super().__init__(error_feedback, comm)
        self.fraction = check_fraction(fraction)


def topk(delta: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (indices, values) of the k entries of delta largest in magnitude."""
    check.instance("delta", delta, torch.Tensor, "a torch.Tensor")
    k = check.integer("k", k, 0, delta.numel())
    idx = delta.abs().topk(k, sorted=False).indices
    return idx, delta[idx]


def topk_hook(state: TopKState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Send the top k of delta = g + e as (index, value) pairs by all-gather; add up every rank's; mean."""
    t0 = time.perf_counter()
    delta = state.with_residual(bucket)
    if not delta.numel():  # an empty bucket: nothing to send (the closed form's k = 0), the same on every rank
        return state.finish(bucket, delta.clone(), t0)
    idx, vals = topk(delta, topk_count(delta.numel(), state.fraction))
    residual = delta.clone()
    residual[idx] = 0  # what was not sent stays for later
    state.remember(bucket, residual)
    k, size = idx.numel(), vals.element_size()
    payload = torch.cat([vals.view(torch.uint8), idx.to(torch.int32).view(torch.uint8)])
    table = state.comm.all_gather(payload)                           # (p, k * (itemsize + 4))
    all_vals = table[:, :k * size].contiguous().view(vals.dtype).reshape(-1)
    all_idx = table[:, k * size:].contiguous().view(torch.int32).reshape(-1).long()
    total = torch.zeros(delta.numel(), dtype=torch.float32, device=delta.device)
    total.index_add_(0, all_idx, all_vals.float())                   # rank by rank, in fp32
    return state.finish(bucket, (total / state.comm.world_size).to(delta.dtype), t0)
