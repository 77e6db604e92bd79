"""Sharded data parallelism: DDP (stage 0), ZeRO-1, ZeRO-2 and ZeRO-3 / FSDP, with Adam, inside ranks.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (SC 2020).
Every rank trains the same nn.Sequential on its own batch; each nn.Linear is one unit whose weight and
bias live in one flat vector, split into p shards (cost.shard_sizes: uneven allowed). Per step:

    stage 0 (DDP)  all-reduce the full gradient (avg)          Adam on everything          2(p-1)/p P
    stage 1        reduce-scatter the full gradient at step()  Adam on the own shard, then 2(p-1)/p P
                   all-gather the updated parameters
    stage 2        as 1, but each unit's gradient is reduce-scattered in backward, as soon as it exists,
                   and only the shard is kept
    stage 3 (FSDP) only shards are kept: all-gather a unit's parameters before its forward, again before
                   its backward, free them after; reduce-scatter its gradient   3(p-1)/p P
                   prefetch=True starts the next unit's all-gather before computing the current one:
                   the overlap costs one more unit of gathered parameters in memory.

(P: parameter bytes; gradients are averaged, so the loss is each rank's mean over its own batch.)
broadcast_parameters() is what DDP sends when it starts: rank 0's parameters and buffers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from commlib import cost
from commlib.parallel.comm import Comm

STAGES = (0, 1, 2, 3)


def mlp(sizes: list[int], seed: int = 0) -> torch.nn.Sequential:
    """Linear, Tanh, Linear, ... Linear: the toy model every stage trains (same weights for the same seed)."""
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(torch.nn.Tanh())
    return torch.nn.Sequential(*layers)


def broadcast_parameters(module: torch.nn.Module, comm: Comm) -> int:
    """What torch DDP does at construction (_sync_module_states): every parameter and buffer takes rank 0's
    value. One flat broadcast per dtype; -> bytes broadcast (each rank receives them once)."""
    tensors = [t for t in (*module.parameters(), *module.buffers())]
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, []).append(t)
    total = 0
    with torch.no_grad():
        for group in by_dtype.values():
            flat = torch.cat([t.reshape(-1) for t in group])
            comm.broadcast(flat, src=0)
            total += flat.numel() * flat.element_size()
            start = 0
            for t in group:
                t.copy_(flat[start:start + t.numel()].view_as(t))
                start += t.numel()
    return total


class Adam:
    """Adam (Kingma & Ba 2015, algorithm 1) computed as torch.optim.Adam's defaults do (torch/optim/adam.py,
    single-tensor path, no weight decay): m = lerp(m, g, 1-b1); v = b2 v + (1-b2) g^2;
    p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). Written out because a process's first
    torch.optim optimizer imports torch._dynamo (about a second per rank); the tests hold it to torch's."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        for p, (m, v) in zip(self.params, self.state):
            if p.grad is None:
                continue
            m.lerp_(p.grad, 1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            denom = (v.sqrt() / (1 - b2 ** self.t) ** 0.5).add_(self.eps)
            p.addcdiv_(m, denom, value=-self.lr / (1 - b1 ** self.t))


class _Unit:
    """One nn.Linear: its flat parameters (full or this rank's shard), its gradient, its gathers."""

    def __init__(self, linear: torch.nn.Linear, index: int, owner: "ShardedDataParallel"):
        self.index, self.owner = index, owner
        self.out_f, self.in_f = linear.weight.shape
        self.has_bias = linear.bias is not None
        with torch.no_grad():
            full = torch.cat([p.detach().reshape(-1) for p in linear.parameters()]).clone()
        self.numel = full.numel()
        p, r = owner.comm.size, owner.comm.rank
        self.sizes = cost.shard_sizes(self.numel, p)
        start = sum(self.sizes[:r])
        self.full = None if owner.stage == 3 else full  # stages 0-2 keep all the parameters
        # what Adam updates: DDP everything (in place, shared with self.full), ZeRO this rank's shard
        self.shard = torch.nn.Parameter(full if owner.stage == 0 else full[start:start + self.sizes[r]].clone())
        self.grad: torch.Tensor | None = None
        # an input that requires grad, so autograd calls our backward even for the first layer
        self.anchor = torch.empty(0, device=full.device, requires_grad=True)
        self.pending = None  # a prefetched all-gather

    def views(self, flat: torch.Tensor):
        w = flat[:self.out_f * self.in_f].view(self.out_f, self.in_f)
        return w, (flat[self.out_f * self.in_f:] if self.has_bias else None)

    def gather(self, async_op: bool = False, kind: str = "all_gather"):
        return self.owner.comm.all_gather(self.shard.detach(), self.sizes, kind=kind, async_op=async_op)

    def acquire(self) -> torch.Tensor:
        """The full flat parameters: persistent (stages 0-2), else all-gathered now or taken from a prefetch."""
        if self.full is not None:
            return self.full
        if self.pending is None:
            self.owner._hold(self.numel)
            self.pending = self.gather(async_op=True)
        handle, self.pending = self.pending, None
        return handle.wait()

    def prefetch(self) -> None:
        if self.full is None and self.pending is None:
            self.owner._hold(self.numel)
            self.pending = self.gather(async_op=True)

    def release(self) -> None:
        if self.full is None:
            self.owner._hold(-self.numel)

    def add_grad(self, g: torch.Tensor) -> None:
        """Stages 2-3 reduce-scatter each gradient as soon as backward produced it; 0-1 keep it whole."""
        if self.owner.stage >= 2:
            g = self.owner.comm.reduce_scatter(g, op="avg")
        self.grad = g if self.grad is None else self.grad + g


class _Layer(torch.autograd.Function):
    """y = x W^T + b, with W and b acquired (all-gathered in stage 3) before forward and again before backward."""

    @staticmethod
    def forward(ctx, x, anchor, unit: _Unit):
        owner = unit.owner
        full = unit.acquire()
        if owner.prefetch:
            owner.neighbour(unit.index, +1)
        w, b = unit.views(full)
        y = F.linear(x, w, b)
        unit.release()
        ctx.unit = unit
        ctx.save_for_backward(x)
        return y

    @staticmethod
    def backward(ctx, gy):
        unit = ctx.unit
        (x,) = ctx.saved_tensors
        full = unit.acquire()
        if unit.owner.prefetch:
            unit.owner.neighbour(unit.index, -1)
        w, _ = unit.views(full)
        gx = gy @ w if ctx.needs_input_grad[0] else None
        gy2, x2 = gy.reshape(-1, unit.out_f), x.reshape(-1, unit.in_f)
        parts = [(gy2.t() @ x2).reshape(-1)] + ([gy2.sum(0)] if unit.has_bias else [])
        unit.release()
        unit.add_grad(torch.cat(parts))
        return gx, None, None


class ShardedDataParallel:
    """Train `model` (an nn.Sequential: nn.Linear units and parameterless layers) data-parallel over `comm`
    with ZeRO stage 0-3 and Adam. Usage per step: loss_fn(sdp(x)).backward(); sdp.step()."""

    def __init__(self, model: torch.nn.Sequential, comm: Comm, stage: int = 3, lr: float = 1e-3,
                 betas=(0.9, 0.999), eps: float = 1e-8, prefetch: bool = False):
        if isinstance(stage, bool) or stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
        if not isinstance(model, torch.nn.Sequential):
            raise TypeError(f"model must be a torch.nn.Sequential, got {type(model).__name__}")
        for m in model:
            if not isinstance(m, torch.nn.Linear) and any(True for _ in m.parameters()):
                raise ValueError(f"only nn.Linear layers may hold parameters, got {type(m).__name__}")
        self.comm, self.stage, self.prefetch = comm, int(stage), bool(prefetch) and stage == 3
        self.layers = list(model)
        self.units: list[_Unit] = []
        self._slot: dict[int, _Unit] = {}
        for i, m in enumerate(self.layers):
            if isinstance(m, torch.nn.Linear):
                self._slot[i] = _Unit(m, len(self.units), self)
                self.units.append(self._slot[i])
        self.optimizer = Adam([u.shard for u in self.units], lr=lr, betas=betas, eps=eps)
        self.gathered = 0        # full-parameter elements held right now (stage 3)
        self.peak_gathered = 0

    def _hold(self, numel: int) -> None:
        self.gathered += numel
        self.peak_gathered = max(self.peak_gathered, self.gathered)

    def neighbour(self, index: int, direction: int) -> None:
        """Prefetch: start the all-gather of the unit the pass meets next (forward: index+1, backward: index-1)."""
        nxt = index + direction
        if 0 <= nxt < len(self.units):
            self.units[nxt].prefetch()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        for i, m in enumerate(self.layers):
            x = _Layer.apply(x, self._slot[i].anchor, self._slot[i]) if i in self._slot else m(x)
        return x

    def step(self) -> None:
        """Average the gradients as the stage prescribes, Adam on this rank's part, bring parameters back."""
        for u in reversed(self.units):  # backward order, as the gradients became ready
            if self.stage == 0:
                u.grad = self.comm.all_reduce(u.grad, op="avg")
            elif self.stage == 1:
                u.grad = self.comm.reduce_scatter(u.grad, op="avg")
            u.shard.grad = u.grad
        self.optimizer.step()
        for u in self.units:
            u.grad = u.shard.grad = None
            if self.stage in (1, 2):  # the updated shards make the full parameters again
                with torch.no_grad():
                    u.full.copy_(u.gather())

    def parameters(self) -> list[torch.Tensor]:
        """The full parameters of every unit, (weight, bias) in model order (stage 3 gathers them, counted
        apart as "all_gather_inspect")."""
        out = []
        for u in self.units:
            full = u.full if u.full is not None else u.gather(kind="all_gather_inspect")
            w, b = u.views(full)
            out += [w.detach().clone()] + ([b.detach().clone()] if b is not None else [])
        return out

    def memory(self) -> dict:
        """Bytes this rank holds between steps (after backward, before step), and the peak of gathered
        parameters: params (full or shard), grads (full in stages 0-1, shard in 2-3), optimizer (Adam's two
        moments over what this rank updates), gathered_peak (stage 3: one unit, two with prefetch)."""
        item = 4  # fp32 throughout
        full = sum(u.numel for u in self.units)
        shard = sum(u.shard.numel() for u in self.units)
        return {"params": item * (full if self.stage < 3 else shard),
                "grads": item * (full if self.stage < 2 else shard),
                "optimizer": 2 * item * shard,
                "gathered_peak": item * self.peak_gathered}


def torch_fsdp2(model: torch.nn.Sequential, comm: Comm | None = None) -> torch.nn.Sequential:
    """The same sharding with torch's FSDP2 (torch.distributed.fsdp.fully_shard): each nn.Linear one unit,
    then the root; on the world's CPU (Gloo) or CUDA device mesh. Parameters become DTensors sharded on dim 0
    (padded when uneven), unlike the flat per-unit shards here."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    if comm is not None and comm.size != torch.distributed.get_world_size():
        raise ValueError("torch_fsdp2 shards over the whole world; pass comm=None or a whole-world Comm")
    device = "cuda" if next(model.parameters()).is_cuda else "cpu"
    mesh = init_device_mesh(device, (torch.distributed.get_world_size(),))
    for m in model:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def reference_adam(model: torch.nn.Module, batches, loss_fn, lr: float = 1e-3, betas=(0.9, 0.999),
                   eps: float = 1e-8, optimizer=None) -> list[torch.Tensor]:
    """The single-process run the sharded ones must match: Adam on the whole batch (all ranks' data).
    optimizer: torch.optim.Adam (the default) or Adam above, which computes the same bits without the import."""
    opt = (optimizer or torch.optim.Adam)(list(model.parameters()), lr=lr, betas=betas, eps=eps)
    for x, y in batches:
        for p in model.parameters():
            p.grad = None
        loss_fn(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]
