"""Our hooks next to torch's own, on one model, the same batches and the same seed (inside ranks).

    pairs = ddp_pair((our_state, our_hook), (torch_state, torch_hook), steps)   # the averaged gradients, per step
    powersgd_vs_torch(rank=4, warm_start=True, steps=6)   # commlib's powersgd_hook against torch's powerSGD_hook
    powersgd_overflow_vs_torch(steps=6, overflow_at=3)    # one inf at one step: which later steps are finite

torch's hooks: torch 2.13.0, torch/distributed/algorithms/ddp_comm_hooks/ (default_hooks.py: allreduce_hook,
fp16_compress_hook; powerSGD_hook.py: PowerSGDState, powerSGD_hook). Where the algorithms are the same the
applied gradients agree to rounding; what differs, and why that changes no update, is in powersgd.py's docstring.
"""

import torch
import torch.distributed as dist

from commlib.compression.powersgd import PowerSGDState, powersgd_hook


def model() -> torch.nn.Module:
    """A 3-layer MLP, the same on every rank. No two weights share a shape, so torch (which draws PowerSGD's first
    Qs grouped by shape) and commlib (in bucket order) draw the same ones."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.ReLU(), torch.nn.Linear(40, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 8))


def train_both(a, b, steps: int, overflow_at: int | None = None) -> list[tuple[list[torch.Tensor], list[torch.Tensor]]]:
    """SGD on two data-parallel wrappers of one model with the same batches -> per step, (a's averaged
    gradients, b's). At step overflow_at rank 0's batch holds an inf (an fp16 overflow); a step whose
    gradients are not all finite is skipped, as AMP's GradScaler skips it."""
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(dist.get_rank())
    out = []
    for step in range(steps):
        x, y = torch.randn(16, 24, generator=g), torch.randn(16, 8, generator=g)
        if step == overflow_at and dist.get_rank() == 0:
            x[0, 0] = float("inf")
        for net, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            (net(x) - y).square().mean().backward()
            if all(torch.isfinite(p.grad).all() for p in net.parameters()):
                opt.step()
        out.append(([p.grad.clone() for p in a.parameters()], [p.grad.clone() for p in b.parameters()]))
    return out


def ddp_pair(ours, theirs, steps: int, overflow_at: int | None = None):
    """Two torch DDPs of model(), ours and theirs as (state, hook) -> (train_both's gradients, our state,
    their state)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    a, b = DDP(model()), DDP(model())
    a.register_comm_hook(*ours)
    b.register_comm_hook(*theirs)
    return train_both(a, b, steps, overflow_at), ours[0], theirs[0]


def powersgd_pair(rank: int, warm_start: bool, steps: int, overflow_at: int | None = None):
    """commlib's PowerSGD and torch's with matching settings (start at iteration 2, min_compression_rate 2, error
    feedback, epsilon 0, seed 0, no batching by shape) -> (per step (ours, theirs) gradients, the sum over ranks
    of our residuals, of theirs), residuals flat in bucket order."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

    orders = {}

    def recording(hook):  # remember each bucket's parameters (in buffer order) to read the residuals
        def recorded(state, bucket):
            orders[hook] = bucket.parameters()
            return hook(state, bucket)
        return recorded

    torch_state = ps.PowerSGDState(process_group=None, matrix_approximation_rank=rank, start_powerSGD_iter=2,
                                   min_compression_rate=2, use_error_feedback=True, warm_start=warm_start,
                                   orthogonalization_epsilon=0, random_seed=0, batch_tensors_with_same_shape=False)
    ours = PowerSGDState(rank=rank, start_iter=2, warm_start=warm_start, seed=0)
    steps_out, ours, torch_state = ddp_pair((ours, recording(powersgd_hook)),
                                            (torch_state, recording(ps.powerSGD_hook)), steps, overflow_at)
    if [p.shape for p in orders[powersgd_hook]] != [p.shape for p in orders[ps.powerSGD_hook]]:
        raise RuntimeError("the two DDPs put the parameters in their buckets in different orders")
    # torch keeps e = input - averaged result, commlib e = input - own share: their sums over ranks agree
    ours_flat = torch.cat([ours.residuals[id(p)] for p in orders[powersgd_hook]])
    theirs_flat = torch_state.error_dict[0].clone()
    dist.all_reduce(ours_flat)
    dist.all_reduce(theirs_flat)
    return steps_out, ours_flat, theirs_flat


def powersgd_vs_torch(rank: int = 4, warm_start: bool = True, steps: int = 6) -> dict:
    """powersgd_pair summarised -> {"max_gradient_difference": largest |ours - theirs| over steps and parameters,
    "max_gradient": largest |gradient| (for scale), "max_residual_sum_difference"}."""
    steps_out, ours_sum, theirs_sum = powersgd_pair(rank, warm_start, steps)
    diffs = [(a - b).abs().max().item() for ours, theirs in steps_out for a, b in zip(ours, theirs)]
    return {"max_gradient_difference": max(diffs),
            "max_gradient": max(a.abs().max().item() for ours, _ in steps_out for a in ours),
            "max_residual_sum_difference": (ours_sum - theirs_sum).abs().max().item()}


def powersgd_overflow_vs_torch(steps: int = 6, overflow_at: int = 3, rank: int = 2) -> dict:
    """powersgd_pair with one inf at step overflow_at (PowerSGD runs from step 2) -> {"ours": [...],
    "torch": [...]}, per step whether every averaged gradient is finite. torch's hook keeps the NaN in its
    warm-start Q and residual; commlib's skips that step and keeps its state (powersgd.py's docstring)."""
    steps_out, _, _ = powersgd_pair(rank, True, steps, overflow_at)
    finite = [[all(bool(torch.isfinite(t).all()) for t in side) for side in step] for step in steps_out]
    return {"ours": [f[0] for f in finite], "torch": [f[1] for f in finite]}
