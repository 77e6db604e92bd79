"""Megatron tensor parallelism, and its sequence-parallel variant, built from a dense block's own weights.

Shoeybi et al., "Megatron-LM" (2019), section 3: an MLP splits its first weight by columns (each rank
computes its slice of the 4h hidden units, no communication) and its second by rows (each rank gets
a partial sum of the output: one all-reduce). Attention splits by heads the same way. Two operators
carry the communication (activations are [s, b, h], as in Megatron):

    f   before the column-parallel layer: forward identity,   backward all-reduce
    g   after the row-parallel layer:     forward all-reduce, backward identity

so a transformer layer all-reduces b*s*h activations twice forward and twice backward:
4 * 2(t-1)/t * bsh bytes per rank (Narayanan et al. 2021, section 3.3: 8bsh(t-1)/t).
Sequence parallelism (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models", 2022, section 4.2.2) keeps the LayerNorms and residuals on s/t of the sequence:

    g   before the column-parallel layer: forward all-gather (along s),     backward reduce-scatter
    g'  after the row-parallel layer:     forward reduce-scatter (along s), backward all-gather

the same bytes (an all-reduce is a reduce-scatter plus an all-gather). Parameters every rank keeps
whole (LayerNorms, the row layer's bias) then see only their part of the sequence, so their gradients
are all-reduced once per step (sync_replicated_grads; tiny, counted apart as "all_reduce_replicated").
Megatron re-gathers the column layer's input in backward to save memory; this saves the gathered input.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from commlib.parallel.comm import Comm


# ----------------------------------------------------------------------------- the operators
class _F(torch.autograd.Function):
    """f: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, comm: Comm):
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return ctx.comm.all_reduce(g.contiguous().clone()), None


class _G(torch.autograd.Function):
    """g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, comm: Comm):
        return comm.all_reduce(x.contiguous().clone())

    @staticmethod
    def backward(ctx, g):
        return g, None


def _gather_seq(x: torch.Tensor, comm: Comm) -> torch.Tensor:
    rows = [x.shape[0]] * comm.size
    row = math.prod(x.shape[1:])
    return comm.all_gather(x.contiguous().view(-1), [r * row for r in rows]).view(-1, *x.shape[1:])


def _scatter_seq(x: torch.Tensor, comm: Comm) -> torch.Tensor:
    return comm.reduce_scatter(x.contiguous().view(-1)).view(-1, *x.shape[1:])


class _GatherSeq(torch.autograd.Function):
    """Sequence parallel, before the column layer: all-gather along s forward, reduce-scatter backward."""

    @staticmethod
    def forward(ctx, x, comm: Comm):
        ctx.comm = comm
        return _gather_seq(x, comm)

    @staticmethod
    def backward(ctx, g):
        return _scatter_seq(g, ctx.comm), None


class _ScatterSeq(torch.autograd.Function):
    """Sequence parallel, after the row layer: reduce-scatter along s forward, all-gather backward."""

    @staticmethod
    def forward(ctx, x, comm: Comm):
        ctx.comm = comm
        return _scatter_seq(x, comm)

    @staticmethod
    def backward(ctx, g):
        return _gather_seq(g, ctx.comm), None


# --------------------------------------------------------------------------- the dense block
class Attention(torch.nn.Module):
    """Causal multi-head self-attention on [s, b, h]."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
        self.heads = heads
        self.qkv, self.proj = torch.nn.Linear(hidden, 3 * hidden), torch.nn.Linear(hidden, hidden)

    def forward(self, x):
        return self.proj(_attend(self.qkv(x), self.heads))


def _attend(qkv: torch.Tensor, heads: int) -> torch.Tensor:
    """qkv [s, b, 3*heads*d] -> causal attention output [s, b, heads*d]."""
    s, b, _ = qkv.shape
    q, k, v = (t.reshape(s, b, heads, -1).permute(1, 2, 0, 3) for t in qkv.chunk(3, dim=-1))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # [b, heads, s, d]
    return out.permute(2, 0, 1, 3).reshape(s, b, -1)


class MLP(torch.nn.Module):
    def __init__(self, hidden: int, ffn: int | None = None):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(hidden, ffn or 4 * hidden), torch.nn.Linear(ffn or 4 * hidden, hidden)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(torch.nn.Module):
    """x + attn(ln1(x)), then + mlp(ln2(.)): a pre-LayerNorm transformer layer on [s, b, h]."""

    def __init__(self, hidden: int, heads: int, seed: int = 0):
        torch.manual_seed(seed)
        super().__init__()
        self.ln1, self.attn = torch.nn.LayerNorm(hidden), Attention(hidden, heads)
        self.ln2, self.mlp = torch.nn.LayerNorm(hidden), MLP(hidden)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


# ---------------------------------------------------------------------- the parallel block
class ShardedLinear(torch.nn.Module):
    """This rank's slice of a dense nn.Linear: dim=0 column-parallel (rows `index` of W and b),
    dim=1 row-parallel (columns `index` of W; the bias, whole, is added after the reduction)."""

    def __init__(self, dense: torch.nn.Linear, dim: int, index: torch.Tensor):
        super().__init__()
        self.dense, self.dim, self.index = [dense], dim, index  # a list: not a submodule
        self.weight = torch.nn.Parameter(dense.weight.detach().index_select(dim, index).clone())
        self.bias = torch.nn.Parameter(self.slice(dense.bias.detach()).clone())

    def slice(self, full: torch.Tensor) -> torch.Tensor:
        """The part of a dense tensor (weight or bias, or its gradient) that this rank holds."""
        if full.dim() == 1:
            return full.index_select(0, self.index) if self.dim == 0 else full
        return full.index_select(self.dim, self.index)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias if self.dim == 0 else None)

    def pairs(self):
        """(local parameter, dense parameter) pairs, for checking gradients: local == slice(dense)."""
        d = self.dense[0]
        return [(self.weight, d.weight), (self.bias, d.bias)]


def _split(n: int, t: int, r: int) -> torch.Tensor:
    return torch.arange(r * n // t, (r + 1) * n // t)


class ParallelBlock(torch.nn.Module):
    """Block over a tensor-parallel group: attention split by heads, MLP by its 4h hidden units.
    sequence_parallel=True: the input and output are this rank's s/t of the sequence."""

    def __init__(self, dense: Block, comm: Comm, sequence_parallel: bool = False):
        super().__init__()
        t, r = comm.size, comm.rank
        heads, hidden = dense.attn.heads, dense.attn.proj.in_features
        if heads % t:
            raise ValueError(f"heads ({heads}) must be divisible by the tensor-parallel size tp={t}")
        self.comm, self.sp, self.heads = comm, bool(sequence_parallel), heads // t
        self.ln1, self.ln2 = copy.deepcopy(dense.ln1), copy.deepcopy(dense.ln2)  # replicated on every rank
        self.dense_lns = [dense.ln1, dense.ln2]
        heads_rows = _split(hidden, t, r)          # this rank's heads, in each of q, k and v
        qkv_rows = torch.cat([heads_rows + i * hidden for i in range(3)])
        self.qkv = ShardedLinear(dense.attn.qkv, 0, qkv_rows)
        self.proj = ShardedLinear(dense.attn.proj, 1, heads_rows)
        ffn = dense.mlp.fc1.out_features
        if ffn % t:
            raise ValueError(f"the MLP width ({ffn}) must be divisible by tp={t}")
        self.fc1 = ShardedLinear(dense.mlp.fc1, 0, _split(ffn, t, r))
        self.fc2 = ShardedLinear(dense.mlp.fc2, 1, _split(ffn, t, r))

    def _enter(self, x):
        return _GatherSeq.apply(x, self.comm) if self.sp else _F.apply(x, self.comm)

    def _leave(self, y, bias):
        return (_ScatterSeq.apply(y, self.comm) if self.sp else _G.apply(y, self.comm)) + bias

    def forward(self, x):
        a = self.proj(_attend(self.qkv(self._enter(self.ln1(x))), self.heads))
        x = x + self._leave(a, self.proj.bias)
        m = self.fc2(F.gelu(self.fc1(self._enter(self.ln2(x)))))
        return x + self._leave(m, self.fc2.bias)

    def replicated(self) -> list[torch.nn.Parameter]:
        """Parameters every rank holds whole: the LayerNorms and the row-parallel layers' biases."""
        return [*self.ln1.parameters(), *self.ln2.parameters(), self.proj.bias, self.fc2.bias]

    def sync_replicated_grads(self) -> None:
        """Sequence parallel: each rank saw s/t of the tokens, so the replicated gradients are partial sums."""
        if self.sp:
            for p in self.replicated():
                self.comm.all_reduce(p.grad, kind="all_reduce_replicated")

    def pairs(self):
        """(local, dense) parameter pairs and how to cut the dense one: [(local, dense, slicer)]."""
        dense_ln = [*self.dense_lns[0].parameters(), *self.dense_lns[1].parameters()]
        out = [(p, d, lambda g: g) for p, d in zip([*self.ln1.parameters(), *self.ln2.parameters()], dense_ln)]
        for lin in (self.qkv, self.proj, self.fc1, self.fc2):
            out += [(loc, den, lin.slice) for loc, den in lin.pairs()]
        return out


def split_sequence(x: torch.Tensor, comm: Comm) -> torch.Tensor:
    """This rank's s/t rows of a [s, b, h] tensor (s must be divisible by t)."""
    if x.shape[0] % comm.size:
        raise ValueError(f"seq ({x.shape[0]}) must be divisible by tp={comm.size} for sequence parallelism")
    n = x.shape[0] // comm.size
    return x[comm.rank * n:(comm.rank + 1) * n]
