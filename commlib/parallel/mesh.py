"""A 2-D device mesh with torch's own tools: FSDP2 on the data-parallel dimension, DTensor TP on the other.

    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    parallelize_module(block, mesh["tp"], tp_plan())     # Megatron's split, written as DTensor placements
    fully_shard(block.attn, mesh=mesh["dp"]); ...        # FSDP2: each unit's parameters sharded over dp

This is how torchtitan composes FSDP2 x TP (x CP x PP): one DeviceMesh, one dimension per parallelism,
every group a slice of it. MeshCounter is torch's CommDebugMode (which counts collectives by kind) that
also files each collective under the mesh dimension whose process group issued it, with the bytes a
ring would send for it (all-gather and reduce-scatter (p-1)/p n, all-reduce 2(p-1)/p n, n the larger
buffer). redistribution_table lists what DTensor issues to move a tensor between placements, next to
torch's own cost model, redistribute_cost (torch/distributed/tensor/_collective_utils.py, torch 2.13).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import warnings
from collections import Counter

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

OPS = {"allgather": "all_gather", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
       "allreduce": "all_reduce", "all_reduce": "all_reduce", "alltoall": "all_to_all", "all_to_all": "all_to_all",
       "broadcast": "broadcast"}


# --------------------------------------------------------------------------------------- the block
class Attention(nn.Module):
    """Causal self-attention with one fused qkv projection whose output rows go head by head (q, k, v of
    head 0, then head 1, ...), so a column split hands each TP rank whole heads."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.head_dim = hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(x).view(b, s, -1, 3, self.head_dim)      # -1: the heads this rank holds
        q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """A pre-norm transformer block (LayerNorms without parameters, so every parameter is a TP weight)."""

    def __init__(self, hidden: int = 16, heads: int = 4, ffn: int = 32, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.hidden = hidden
        self.attn, self.mlp = Attention(hidden, heads), MLP(hidden, ffn)

    def forward(self, x):
        x = x + self.attn(F.layer_norm(x, (self.hidden,)))
        return x + self.mlp(F.layer_norm(x, (self.hidden,)))


def tp_plan() -> dict:
    """Megatron's split as DTensor styles: column-parallel in (its input's gradient all-reduced backward),
    row-parallel out (its output all-reduced forward)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {"attn.qkv": ColwiseParallel(), "attn.proj": RowwiseParallel(),
            "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel()}


UNITS = ("attn", "mlp")   # FSDP2 units: each all-gathers its parameters forward and backward, reduce-scatters once


def parallelize(block: Block, mesh) -> Block:
    """TP on mesh["tp"], then FSDP2 on mesh["dp"] per unit and at the root (in place) -> the block."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    parallelize_module(block, mesh["tp"], tp_plan())
    for name in UNITS:
        fully_shard(getattr(block, name), mesh=mesh["dp"])
    fully_shard(block, mesh=mesh["dp"])
    return block


# ------------------------------------------------------------------------------------ counting
def _flat(args) -> list:
    out = []
    for a in args:
        out.extend(_flat(a) if isinstance(a, (list, tuple)) else [a])
    return out


def _group_of(args, names) -> str | None:
    """The name of the process group among a collective's arguments: functional collectives pass it by name,
    the c10d ops (FSDP2's) pass the group object."""
    for a in _flat(args):
        if isinstance(a, str) and a in names:
            return a
        if isinstance(a, torch.ScriptObject) and hasattr(dist.ProcessGroup, "unbox"):
            a = dist.ProcessGroup.unbox(a)
        name = getattr(a, "group_name", None)
        if isinstance(name, str):
            return name
    return None


def _sizes(args) -> list[int]:
    return [a.numel() * a.element_size() for a in _flat(args) if isinstance(a, torch.Tensor)]


def ring_bytes(op: str, args, p: int) -> int:
    """What this rank sends for one collective over a ring of p ranks: all-gather (p-1) x its shard (the smaller
    buffer), reduce-scatter and all-to-all (p-1)/p of the whole (the larger), all-reduce 2(p-1)/p of it."""
    sizes = _sizes(args) or [0]
    if op == "all_gather":
        return (p - 1) * min(sizes)
    return int((2 if op == "all_reduce" else 1) * (p - 1) / p * max(sizes))


def MeshCounter(mesh):  # noqa: N802  (its callers use it as the class it makes: `with MeshCounter(mesh) as c`)
    """A counter for this mesh (_mesh_counter's class: CommDebugMode, plus per mesh dimension). The class is
    made on first use: CommDebugMode's module imports DTensor, torch._inductor and sympy (1.4 s on 2 cores),
    which a notebook that only imports commlib.parallel.live need not wait for."""
    return _mesh_counter()(mesh)


@functools.cache
def _mesh_counter():
    """The MeshCounter class, made once, on first use."""
    from torch.distributed.tensor.debug import CommDebugMode

    class MeshCounter(CommDebugMode):
        """CommDebugMode, plus per mesh dimension: .counts {dim: Counter(op)} and .bytes {dim: Counter(op)}
        (ring bytes this rank sends). Collectives on a group outside the mesh go under "other"."""

        def __init__(self, mesh):
            super().__init__()
            self.dims = {}
            for i, name in enumerate(mesh.mesh_dim_names):
                group = mesh.get_group(i)
                self.dims[group.group_name] = (name, group.size())
            self.counts = {name: Counter() for name, _ in self.dims.values()}
            self.bytes = {name: Counter() for name, _ in self.dims.values()}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            before = self.get_total_counts()
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if out is NotImplemented or self.get_total_counts() == before:
                return out
            name = str(func._overloadpacket).split(".")[-1].strip("_")
            op = next((v for k, v in OPS.items() if name.startswith(k)), name)
            key = _group_of(list(args) + list((kwargs or {}).values()), self.dims)
            dim, p = self.dims.get(key, ("other", 1))
            self.counts.setdefault(dim, Counter())[op] += 1
            self.bytes.setdefault(dim, Counter())[op] += ring_bytes(op, args, p)
            return out

    return MeshCounter


# ----------------------------------------------------------------------------------- training
@contextlib.contextmanager
def quiet():
    """Silence torch's notes that are about this demo, not the lesson: DTensor's "2 sequential all_gather
    operations" (full_tensor() of a 2-D sharded parameter, done only to compare with the reference), Gloo's
    all-to-all fallback (the redistribution table reports it), FSDP2's warning that a unit returned a view
    (this block never changes its outputs in place)."""
    log = logging.getLogger("torch.distributed.tensor")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="FSDP2-wrapped module")
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            yield
    finally:
        log.setLevel(level)


def train(mesh, steps: int = 2, batch: int = 2, seq: int = 4, hidden: int = 16, heads: int = 4, ffn: int = 32,
          lr: float = 0.1) -> dict:
    """`steps` SGD steps of Block on mesh (dp, tp): dp rank d trains on rows d*batch.. of every step's batch,
    next to one process on the whole batch. The last step runs under MeshCounter.
    -> {max_err (parameters after training), counts, bytes (per mesh dimension, last step)}."""
    with quiet():
        return _train(mesh, steps, batch, seq, hidden, heads, ffn, lr)


def _train(mesh, steps, batch, seq, hidden, heads, ffn, lr) -> dict:
    dp = mesh["dp"].size()
    ref = Block(hidden, heads, ffn)
    par = parallelize(copy.deepcopy(ref), mesh)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=lr)
    opt = torch.optim.SGD(par.parameters(), lr=lr)
    d = mesh.get_local_rank("dp")
    counter = None
    for step in range(steps):
        torch.manual_seed(100 + step)
        x, target = torch.randn(dp * batch, seq, hidden), torch.randn(dp * batch, seq, hidden)
        F.mse_loss(ref(x.requires_grad_()), target).backward()
        opt_ref.step()
        opt_ref.zero_grad()
        rows = slice(d * batch, (d + 1) * batch)
        xl = x.detach()[rows].clone().requires_grad_()   # as from a layer below: its gradient is needed
        if step == steps - 1:
            counter = MeshCounter(mesh)
            with counter:
                F.mse_loss(par(xl), target[rows]).backward()
        else:
            F.mse_loss(par(xl), target[rows]).backward()
        opt.step()
        opt.zero_grad()
    err = max((a.full_tensor() - b).abs().max().item() for a, b in zip(par.parameters(), ref.parameters()))
    return {"max_err": err, "counts": {k: dict(v) for k, v in counter.counts.items()},
            "bytes": {k: dict(v) for k, v in counter.bytes.items()}}


# ------------------------------------------------------------------------------ redistributions
def placements():
    from torch.distributed.tensor import Partial, Replicate, Shard

    return [Shard(0), Shard(1), Replicate(), Partial()]


def _label(p) -> str:
    return {"S(0)": "Shard(0)", "S(1)": "Shard(1)", "R": "Replicate", "P(sum)": "Partial"}.get(str(p), str(p))


def _torch_bytes(src, dst_placements, mesh, dim: int) -> float:
    """The bytes per rank torch's redistribute_cost charges: the slope of its cost (us) in the tensor's size,
    times the bandwidth it assumes (MeshTopoInfo), so its fixed latency terms drop out. inf: it bans the move."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._collective_utils import MeshTopoInfo, redistribute_cost
    from torch.distributed.tensor._dtensor_spec import DTensorSpec

    costs = []
    for scale in (1, 2):
        big = DTensor.from_local(src.to_local().repeat(scale, 1), mesh, src.placements, run_check=False)
        target = DTensorSpec(mesh, tuple(dst_placements), tensor_meta=big._spec.tensor_meta)
        costs.append(redistribute_cost(big._spec, target))
    if costs[0] == float("inf"):
        return float("inf")
    bandwidth = MeshTopoInfo.build_from_mesh(mesh).mesh_dim_bandwidth[dim]     # "GB/s", applied to GiB
    return (costs[1] - costs[0]) / 1e6 * bandwidth * 1024 ** 3   # doubling the size adds one size's bytes


def redistribution_table(mesh, dim_name: str = "tp", shape=(8, 8)) -> list[dict]:
    """Every pair of placements (Shard(0), Shard(1), Replicate, Partial) on mesh dimension dim_name (the other
    dimension Replicate), a float32 tensor of `shape`: {src, dst, collective (what DTensor issued, "-" for
    none, "not allowed" where torch refuses), bytes (ring bytes this rank sent), torch_bytes (what
    redistribute_cost charges; inf where it bans the move)}."""
    with quiet():
        return _table(mesh, dim_name, shape)


def _table(mesh, dim_name, shape) -> list[dict]:
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

    dim = mesh.mesh_dim_names.index(dim_name)
    full = torch.arange(float(shape[0] * shape[1])).reshape(shape)
    rows = []

    def spread(p):
        pl = [Replicate()] * mesh.ndim
        pl[dim] = p
        return pl

    for src in placements():
        for dst in placements():
            if src.is_partial():  # each rank holds a summand; together they add up to `full`
                local = full / mesh.size(dim)
                dt = DTensor.from_local(local, mesh, spread(src), run_check=False)
            else:
                dt = distribute_tensor(full, mesh, spread(src))
            counter = MeshCounter(mesh)
            row = {"src": _label(src), "dst": _label(dst)}
            try:
                with counter:
                    out = dt.redistribute(mesh, spread(dst))
                ok = dst.is_partial() or torch.allclose(out.full_tensor(), full)
                ops = counter.counts.get(dim_name, {})
                row["collective"] = " + ".join(sorted(ops)) or "-"
                row["bytes"] = sum(counter.bytes.get(dim_name, {}).values())
                row["correct"] = bool(ok)
            except RuntimeError as e:
                if "internal use only" not in str(e):
                    raise
                row.update(collective="not allowed", bytes=0, correct=True)
            row["torch_bytes"] = _torch_bytes(dt, spread(dst), mesh, dim)
            rows.append(row)
    return rows
