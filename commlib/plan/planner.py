"""The planner: memory per GPU, bytes per rank and step time of DP / ZeRO 1-3 / TP / SP / PP / EP, and a search.

Pure Python (no torch). `params` is a count of parameters; every size is in bytes, every time in seconds.
Sources, each formula beside its function:
  ZeRO      Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC 2020
  Megatron  Shoeybi et al. 2019 (tensor parallelism); Narayanan et al., "Efficient Large-Scale Language Model
            Training on GPU Clusters Using Megatron-LM", SC 2021 (PP schedules, 3D parallelism, FLOPs)
  SP        Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022
  GPipe     Huang et al. 2019;  MoE: Shazeer et al. 2017, Lepikhin et al. 2020 (GShard)
Ranks are laid out as Megatron does: tensor-parallel ranks adjacent (inside a node), then data-parallel,
then pipeline stages; expert parallelism splits the data-parallel ranks (ep divides dp). Collectives are
priced on the machine's topology.Topology by commlib.plan.hardware_model: each group where its ranks sit (TP inside
a node; DP, EP and PP across nodes once they span them), all-reduce and its halves as NCCL's multi-ring,
all-to-all limited by each GPU's NIC. The model's shape and published presets live in commlib.plan.models.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from commlib import _validate as check
from commlib import cost
from commlib.plan.context import cp_backward_bytes_per_rank, cp_bytes_per_rank, cp_layer_times  # noqa: F401
from commlib.plan.divisors import divisors as _divisors
from commlib.plan.flops import RECOMPUTE, attention_flops, step_flops
from commlib.plan.hardware_model import Hardware, collective_s, group_shape, p2p_s
from commlib.plan.models import Model

STATE_BYTES = (2, 2, 12)   # ZeRO paper, mixed-precision Adam: fp16 params, fp16 grads, fp32 params+m+v (K = 12)
SCHEDULES = ("gpipe", "1f1b", "interleaved")
MAX_GLOBAL_BATCH = 2**40  # the search enumerates divisors of the batch: bounded so it ends in seconds


_int = check.count  # counts up to check.MAX_COUNT, plain ints on a fast path


def _num(name: str, value, low: float = 0.0, high: float = check.MAX_BYTES) -> float:
    if type(value) in (int, float) and low <= value <= high:  # NaN fails the comparison
        return float(value)
    return check.number(name, value, low, high=high)


def _divides(name: str, n: int, by_name: str, by: int) -> None:
    if n % by:
        raise ValueError(f"{name} ({n}) must be divisible by {by_name}={by}")


# ------------------------------------------------------------------------------------------ memory
def model_state_breakdown(params, dp=1, zero_stage=0, param_bytes=2, grad_bytes=2, optimizer_bytes=12) -> dict:
    """Bytes per GPU of parameters, gradients and optimizer state. ZeRO stage 1 shards the optimizer state
    over the dp ranks, stage 2 also the gradients, stage 3 also the parameters (ZeRO paper, section 5)."""
    p, n, zero_stage = _num("params", params), _int("dp", dp), check.choice("zero_stage", zero_stage, range(4))
    param_bytes, grad_bytes = _num("param_bytes", param_bytes), _num("grad_bytes", grad_bytes)
    optimizer_bytes = _num("optimizer_bytes", optimizer_bytes)
    return {"params": p * param_bytes / (n if zero_stage >= 3 else 1),
            "grads": p * grad_bytes / (n if zero_stage >= 2 else 1),
            "optimizer": p * optimizer_bytes / (n if zero_stage >= 1 else 1)}


def model_state_bytes(params, dp=1, zero_stage=0, grad_bytes=2) -> float:
    """Mixed-precision Adam, activations excluded (ZeRO paper, fig. 1): 16P; ZeRO-1 4P + 12P/N; ZeRO-2 2P + 14P/N;
    ZeRO-3 16P/N (N = dp). grad_bytes=4: fp32 gradients, Megatron-LM's default with --bf16 unless
    --grad-reduce-in-bf16 (megatron/training/arguments.py): 18P, ZeRO-1 6P + 12P/N; see megatron_state_bytes."""
    return sum(model_state_breakdown(params, dp, zero_stage, grad_bytes=_num("grad_bytes", grad_bytes)).values())


def megatron_state_bytes(params, dp=1, grad_bytes=2) -> float:
    """Megatron-LM's distributed optimizer, 16-bit weights (docs/user-guide/features/dist_optimizer.md): 16-bit
    gradients 4P + 16P/d, fp32 6P + 12P/d. 16P/d: Adam's 12 and an fp32 copy of the gradient shard made at the step
    (distrib_optimizer.py, _copy_model_grads_to_main_grads) and freed by zero_grad before forward: 4P + 12P/d there."""
    copy = 4 * _num("params", params) / _int("dp", dp) if check.choice("grad_bytes", grad_bytes, (2, 4)) == 2 else 0
    return model_state_bytes(params, dp, 1, grad_bytes) + copy


BLOCKS = ("gpt", "llama")


def activation_bytes_per_layer(seq, batch, hidden, heads, tp=1, sequence_parallel=False, recompute="none",
                               block="gpt", ffn=0, kv_heads=0, topk=1) -> float:
    """Activations one transformer layer stores for backward, 16-bit, per GPU, as sbh x (outside the TP region
    + inside / t) + the attention scores (Korthikanti et al. 2022, section 4.1 and table 2). r = kv_heads/heads,
    f = ffn (the MLP's inner width; 0: 4h), k = topk (MoE: each token's activations in k expert MLPs).
      gpt    (GeLU MLP, LayerNorm, dropout): 10 + (4 + 4r + 4kf/h)/t + 5as/(ht); f = 4h, r = 1: sbh(10 + 24/t
             + 5as/(ht)), the paper's. Outside: 2 LayerNorm inputs 4, QKV and MLP inputs 2 + 2, 2 dropout masks
             1 + 1. Inside: Q 2, K 2r, V 2r, output projection input 2, GeLU input and output 2f/h each.
             Scores: softmax output 2as/h, its dropout mask as/h and output 2as/h.
      llama  (SwiGLU MLP, RMSNorm, no dropout): 8 + (4 + 4r + 8kf/h)/t + 2as/(ht). No masks; the SwiGLU
             stores gate and up outputs, SiLU(gate) and their product, 2f/h each; scores: the softmax output.
             Llama-2-7B (f = 11008 = 2.6875h, r = 1): sbh(8 + 29.5/t + 2as/(ht)); 37.5 sbh at t = 1.
    With SP the outside part is split over t too; selective recomputation (or flash attention) drops the
    scores; full recomputation keeps only the layer input, 2sbh (2sbh/t with SP)."""
    s, b, h, a, t = (_int(n, v) for n, v in (("seq", seq), ("batch", batch), ("hidden", hidden), ("heads", heads),
                                             ("tp", tp)))
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    if block not in BLOCKS:
        raise ValueError(f"block must be one of {BLOCKS}, got {block!r}")
    _divides("heads", a, "tp", t)
    f, k = (_int("ffn", ffn, 0) or 4 * h), _int("topk", topk)
    r = (_int("kv_heads", kv_heads, 0) or a) / a
    sp = bool(sequence_parallel)
    if recompute == "full":
        return 2 * s * b * h / (t if sp else 1)
    llama = block == "llama"
    outside = 8.0 if llama else 10.0
    inside = 4 + 4 * r + (8 if llama else 4) * k * f / h
    scores = 0.0 if recompute == "selective" else (2 if llama else 5) * a * s / (h * t)
    return s * b * h * ((outside + inside) / t if sp else outside + inside / t) + s * b * h * scores


def model_activation_bytes_per_layer(model: Model, batch, tp=1, sequence_parallel=False, recompute="none",
                                     seq=None) -> float:
    """activation_bytes_per_layer for a models.Model's block, MLP width, KV heads and top-k; seq: the tokens a rank
    holds (model.seq, or model.seq / cp under context parallelism)."""
    return activation_bytes_per_layer(model.seq if seq is None else seq, batch, model.hidden, model.heads, tp, sequence_parallel, recompute,
                                      model.block, model.mlp_width, model.kv_heads,
                                      model.topk if model.experts else 1)


def logits_bytes(seq, batch, vocab, tp=1) -> float:
    """The fp32 logits the loss keeps for backward: 4 s b V bytes, split over t by the vocabulary-parallel
    cross-entropy (Megatron-LM, megatron/core/tensor_parallel/cross_entropy.py)."""
    s, b, v, t = (_int(n, x) for n, x in (("seq", seq), ("batch", batch), ("vocab", vocab), ("tp", tp)))
    return 4 * s * b * v / t


# ------------------------------------------------------------------------------- bytes per rank
def dp_bytes_per_rank(params, dp, zero_stage=0, grad_bytes=2, param_bytes=None) -> float:
    """Bytes each rank sends per step for data parallelism over ring collectives (ZeRO paper, section 7):
    DP all-reduce 2(N-1)/N P; ZeRO-1/2 reduce-scatter + all-gather, the same 2(N-1)/N P; ZeRO-3 adds an
    all-gather of the parameters for backward, 3(N-1)/N P. (P = params * bytes; param_bytes defaults to
    grad_bytes.)"""
    p, n, zero_stage = _num("params", params), _int("dp", dp), check.choice("zero_stage", zero_stage, range(4))
    g = _num("grad_bytes", grad_bytes)
    w = g if param_bytes is None else _num("param_bytes", param_bytes)
    frac = (n - 1) / n
    gathers = {0: 0, 1: 1, 2: 1, 3: 2}[zero_stage]
    return frac * p * (2 * g if zero_stage == 0 else g + gathers * w)


def tp_bytes_per_rank(batch, seq, hidden, tp, act_bytes=2, sequence_parallel=False) -> float:
    """Bytes each rank sends per transformer layer, forward plus backward: 4 all-reduces of bsh
    (Narayanan et al. 2021, section 3.3: 8bsh(t-1)/t); with SP, 4 all-gathers and 4 reduce-scatters of bsh,
    the same bytes (Korthikanti et al. 2022, section 4.2.2)."""
    b, s, h, t = (_int(n, v) for n, v in (("batch", batch), ("seq", seq), ("hidden", hidden), ("tp", tp)))
    return 8 * (t - 1) / t * b * s * h * _num("act_bytes", act_bytes)


def pp_bytes_per_rank(microbatch, seq, hidden, microbatches, act_bytes=2) -> float:
    """Bytes a middle pipeline stage sends per step: one activation forward and one gradient backward per
    micro-batch, 2 m bsh (Narayanan et al. 2021, section 3.2); the first and last stages send half."""
    b, s, h, m = (_int(n, v) for n, v in (("microbatch", microbatch), ("seq", seq), ("hidden", hidden),
                                          ("microbatches", microbatches)))
    return 2 * m * b * s * h * _num("act_bytes", act_bytes)


def ep_bytes_per_rank(tokens, hidden, topk, ep, act_bytes=2, imbalance=1.0) -> float:
    """Bytes the busiest rank sends per MoE layer, forward plus backward: dispatch and combine all-to-alls
    of its T k token copies, (ep-1)/ep of them leaving the rank, 4 T k h (ep-1)/ep (GShard). If its experts
    draw `imbalance` times the balanced traffic, its combine (and the matching backward) grow by that:
    2 (1 + imbalance) T k h (ep-1)/ep."""
    t, h, k, e = (_int(n, v) for n, v in (("tokens", tokens), ("hidden", hidden), ("topk", topk), ("ep", ep)))
    f = _num("imbalance", imbalance, 1.0)
    return 2 * (1 + f) * t * k * h * _num("act_bytes", act_bytes) * (e - 1) / e


def init_broadcast_bytes(nbytes, dp, algorithm="tree") -> float:
    """What DDP's start-up broadcast of rank 0's parameters and buffers (nbytes) costs the busiest rank.
    "tree": a binomial tree, as commlib's live run on Gloo: ceil(lg dp) * nbytes (the root). "ring": NCCL's,
    a chain (NCCL 2.30.7 src/graph/tuning.cc prices Broadcast with Ring only; src/device/broadcast.h): every
    rank but the last forwards nbytes once. Every other rank receives nbytes once either way."""
    if algorithm not in ("tree", "ring"):
        raise ValueError(f"algorithm must be 'tree' or 'ring', got {algorithm!r}")
    return cost.bytes_sent_per_rank("broadcast", _num("nbytes", nbytes), _int("dp", dp), algorithm)


# ------------------------------------------------------------------------------------- pipeline
def pipeline_bubble(pp, microbatches, schedule="1f1b", chunks=1) -> float:
    """Idle fraction of the step: (p-1)/(m+p-1) for GPipe (Huang et al. 2019) and 1F1B, which only saves
    memory; interleaved 1F1B with v chunks per stage (p-1)/(vm+p-1) (Narayanan et al. 2021 give the
    bubble relative to the ideal step, (p-1)/m and (p-1)/(vm): the same numbers)."""
    p, m, v = _int("pp", pp), _int("microbatches", microbatches), _int("chunks", chunks)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule != "interleaved" and v != 1:
        raise ValueError(f"chunks > 1 needs schedule='interleaved', got {schedule!r}")
    return (p - 1) / (v * m + p - 1)


def microbatches_in_flight(pp, microbatches, schedule="1f1b") -> int:
    """Micro-batches whose activations the first stage holds at once: m for GPipe, min(p, m) for 1F1B."""
    p, m = _int("pp", pp), _int("microbatches", microbatches)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    return m if schedule == "gpipe" else min(p, m)


# ----------------------------------------------------------------------- what a step assumes
@dataclass(frozen=True)
class Assumptions:
    """What the step time takes for granted. mfu: share of peak FLOP/s the math reaches. dp_overlap: share of
    the data-parallel (and ZeRO) communication hidden behind compute, up to what compute can cover (estimate).
    TP, EP and PP communication sits on the critical path (exposed). imbalance: EP load imbalance.
    all_to_all: how EP's all-to-alls run, "bulk" (NCCL) or "pairwise" (commlib.algorithms).
    attention: count the causal attention scores' FLOPs (attention_flops) in the compute; False keeps
    6 x params x tokens alone, the count one can check by hand (chapter 11's workshop)."""

    mfu: float = 0.4
    dp_overlap: float = 0.0
    act_bytes: int = 2
    imbalance: float = 1.0
    schedule: str = "1f1b"
    recompute: str = "selective"
    sequence_parallel: bool = True
    zero3_prefetch: bool = True
    all_to_all: str = "bulk"
    attention: bool = True

    def __post_init__(self):
        check.number("mfu", self.mfu, 0, strict=True, high=1)
        check.number("dp_overlap", self.dp_overlap, 0, high=1)
        check.number("act_bytes", self.act_bytes, 0, strict=True, high=64, unit="bytes a value")
        _num("imbalance", self.imbalance, 1.0, high=check.MAX_COUNT)
        if self.schedule not in ("gpipe", "1f1b"):
            raise ValueError(f"schedule must be 'gpipe' or '1f1b', got {self.schedule!r}")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute must be one of {RECOMPUTE}, got {self.recompute!r}")
        if self.all_to_all not in ("bulk", "pairwise"):
            raise ValueError(f"all_to_all must be 'bulk' or 'pairwise', got {self.all_to_all!r}")


@dataclass(frozen=True)
class Config:
    dp: int
    tp: int = 1
    pp: int = 1
    ep: int = 1
    zero_stage: int = 0
    microbatches: int = 1
    cp: int = 1    # context parallel: the sequence split over cp ranks (ring attention), next to TP in the mesh

    def describe(self) -> str:
        """The form the chapters print: 'dp=16 tp=1 pp=1 ZeRO-1 m=2' (cp= and ep= only above 1)."""
        cp, ep = (f" {k}={v}" if v > 1 else "" for k, v in (("cp", self.cp), ("ep", self.ep)))
        return f"dp={self.dp} tp={self.tp}{cp} pp={self.pp}{ep} ZeRO-{self.zero_stage} m={self.microbatches}"


def groups(hw: Hardware, config: Config) -> dict:
    """Where each kind of traffic runs: {kind: (ranks in a group, stride, nodes it spans, members per node)}
    for tp, dp (dense weights), ep, dp_experts and pp (the stage boundary that crosses nodes, if any)."""
    c = config
    out = {"tp": (c.tp, 1), "dp": (c.dp * c.cp, c.tp), "ep": (c.ep, c.tp), "dp_experts": (c.dp // c.ep, c.tp * c.ep)}
    if c.cp > 1:  # the mesh (pp, dp, cp, tp), tp innermost: cp next to it; dp's gradients reduce over dp x cp
        out["cp"] = (c.cp, c.tp)
    out = {k: (n, stride, *group_shape(hw, n, stride)) for k, (n, stride) in out.items()}
    cross = c.pp > 1 and hw.nodes > 1  # the stages tile the world, so some boundary crosses once it spans nodes
    out["pp"] = (2 if c.pp > 1 else 1, c.tp * c.dp * c.cp, 2 if cross else 1, 1 if cross or c.pp == 1 else 2)
    return out


@dataclass
class Estimate:
    """One configuration: memory per GPU, bytes per rank per step by kind, seconds by part, the step."""

    config: Config
    memory: dict = field(default_factory=dict)
    comm_bytes: dict = field(default_factory=dict)
    times: dict = field(default_factory=dict)
    step_s: float = 0.0
    fits: bool = False


# ------------------------------------------------------------------------------------- estimate
# Data-parallel collectives of one step with m micro-batches (16-bit gradients and parameters): DDP and
# ZeRO-1 accumulate whole gradients and reduce once; ZeRO-2 keeps only its gradient shard, so it
# reduce-scatters every micro-batch (as DeepSpeed does); ZeRO-3 also gathers the parameters for every
# micro-batch's forward and backward. (op, times per step, times per micro-batch); with m = 1 these
# are dp_bytes_per_rank's.
DP_COLLECTIVES = {0: [("all_reduce", 1, 0)],
                  1: [("reduce_scatter", 1, 0), ("all_gather", 1, 0)],
                  2: [("reduce_scatter", 0, 1), ("all_gather", 1, 0)],
                  3: [("reduce_scatter", 0, 1), ("all_gather", 0, 2)]}


def mesh_collectives(units, dp, tp, layers=1, zero_stage=3, microbatches=1) -> dict:
    """Collectives per step on a (dp, tp) mesh, per dimension: {"dp": {op: count}, "tp": {op: count}}. dp: each of
    the `units` FSDP units (ZeRO-3) issues DP_COLLECTIVES[zero_stage] (all-gather forward and backward, one
    reduce-scatter); tp: 4 all-reduces per layer (Megatron: 2 forward, 2 backward; tp_bytes_per_rank)."""
    u, d, t, n, m = (_int(k, v) for k, v in (("units", units), ("dp", dp), ("tp", tp), ("layers", layers),
                                             ("microbatches", microbatches)))
    if isinstance(zero_stage, bool) or zero_stage not in DP_COLLECTIVES:
        raise ValueError(f"zero_stage must be one of (0, 1, 2, 3), got {zero_stage!r}")
    per_dp = {op: u * (once + each * m) for op, once, each in DP_COLLECTIVES[zero_stage]} if d > 1 else {}
    return {"dp": per_dp, "tp": {"all_reduce": 4 * n * m} if t > 1 else {}}

def validate(model: Model, hw: Hardware, config: Config, global_batch: int) -> int:
    """ValueError naming the parameter for a configuration that cannot run; -> the micro-batch size."""
    for name, value, kind in (("model", model, Model), ("hw", hw, Hardware), ("config", config, Config)):
        check.instance(name, value, kind, f"a plan.{kind.__name__}")
    c = config
    for name in ("dp", "tp", "pp", "ep", "microbatches", "cp"):
        _int(f"config.{name}", getattr(c, name))
    if c.dp * c.tp * c.pp * c.cp != hw.world:
        mesh, sizes = ("dp*tp*pp", f"{c.dp}*{c.tp}*{c.pp}") if c.cp == 1 else ("dp*tp*pp*cp", f"{c.dp}*{c.tp}*{c.pp}*{c.cp}")
        raise ValueError(f"{mesh} = {sizes} = {c.dp * c.tp * c.pp * c.cp} must equal the world size "
                         f"{hw.world} ({hw.nodes} nodes x {hw.gpus_per_node} GPUs)")
    if c.cp > 1:
        _divides("seq", model.seq, "2*cp", 2 * c.cp)
        if c.ep > 1:
            raise ValueError(f"cp={c.cp} with ep={c.ep} is not modelled: use cp=1 or ep=1")
    _divides("heads", model.heads, "tp", c.tp)
    _divides("layers", model.layers, "pp", c.pp)
    _divides("dp", c.dp, "ep", c.ep)
    if c.ep > 1:
        if not model.experts:
            raise ValueError(f"ep={c.ep} needs a model with experts, got experts=0")
        _divides("experts", model.experts, "ep", c.ep)
    check.choice("config.zero_stage", c.zero_stage, range(4))
    _divides("global_batch", _int("global_batch", global_batch, high=MAX_GLOBAL_BATCH), "dp*microbatches",
             c.dp * c.microbatches)
    return global_batch // (c.dp * c.microbatches)


def estimate(model: Model, hw: Hardware, config: Config, global_batch: int,
             assume: Assumptions = Assumptions()) -> Estimate:
    """Memory per GPU, bytes per rank and step time of one configuration (global_batch sequences per step).

    Per micro-batch a stage computes (step_flops / (tp pp) at mfu * peak) and communicates, on the critical
    path: TP (4 all-reduces of bsh per layer), EP (dispatch + combine per MoE layer, both passes) and PP
    (one activation and one gradient). The pipeline takes (m + pp - 1) of these: its bubble is
    pipeline_bubble(pp, m). Data-parallel communication follows (DP_COLLECTIVES), less what
    dp_overlap hides: behind the last micro-batch's backward (2/3 of its compute) for a collective once per
    step, behind each micro-batch's compute for one per micro-batch (ZeRO-2/3). Memory: model states (ZeRO paper),
    activations (Korthikanti et al., per block type) of the first stage's micro-batches in flight or of the last
    stage's with its fp32 logits, whichever is larger (one stage: both), ZeRO-3's gathered layers."""
    b = validate(model, hw, config, global_batch)
    check.instance("assume", assume, Assumptions, "a plan.Assumptions")
    return _estimate(model, hw, config, int(global_batch), assume, b)


def _estimate(model, hw, c, global_batch, a, b) -> Estimate:
    t, p, d, m, s, h = c.tp, c.pp, c.dp, c.microbatches, model.seq, model.hidden
    if c.cp > 1:  # each rank holds s/cp tokens; the gradients reduce over the dp*cp ranks (FSDP on dp x cp)
        d, s = c.dp * c.cp, model.seq // c.cp
    ab = a.act_bytes
    layers = model.layers // p
    sp = a.sequence_parallel and t > 1
    # memory: model states (expert parameters shard over ep, their ZeRO over dp/ep), activations, gathers
    dense, experts = model.dense_params / (t * p), model.expert_params / (t * p * c.ep)
    states = model_state_bytes(dense, d, c.zero_stage) + model_state_bytes(experts, d // c.ep, c.zero_stage)
    # the first stage holds the most micro-batches in flight, the last one also the fp32 logits: the larger
    per_layer = model_activation_bytes_per_layer(model, b, t, sp, a.recompute, seq=s)
    last_in_flight = m if a.schedule == "gpipe" else 1
    first = layers * microbatches_in_flight(p, m, a.schedule) * per_layer
    last = last_in_flight * (layers * per_layer + logits_bytes(s, b, model.vocab, t))
    act, logits = (first, 0.0) if p > 1 and first >= last else \
        (last_in_flight * layers * per_layer, last_in_flight * logits_bytes(s, b, model.vocab, t))
    layer_params = (model.params - model.embedding_params) / model.layers / t
    gathered = (2 if a.zero3_prefetch else 1) * 2 * layer_params if c.zero_stage == 3 else 0.0
    memory = {"model_states": states, "activations": act, "logits": logits, "zero3_gathered": gathered}
    memory["total"] = states + act + logits + gathered
    flops = step_flops(model, b * s, a.recompute)
    if a.attention:  # each of the cp ranks computes 1/cp of the causal attention (zig-zag balances it)
        flops += attention_flops(model, b, model.seq, a.recompute) / c.cp
    comp = flops / (t * p) / (hw.peak_flops * a.mfu)  # one micro-batch, one stage
    # per micro-batch on one stage: TP (4 all-reduces, or AG + RS, of bsh per layer), EP, PP point-to-point
    bsh = b * s * h * ab
    tp_s = layers * 4 * collective_s("all_reduce", bsh, t, 1, hw)
    moe = layers if model.experts else 0
    ep_s = moe * 2 * (1 + a.imbalance) * collective_s("all_to_all", bsh * model.topk, c.ep, t, hw, a.all_to_all)
    pp_s = 2 * p2p_s(bsh, hw.nodes > 1, hw) if p > 1 else 0.0  # stages tile the world: one boundary crosses nodes
    per_mb = comp + tp_s + ep_s + pp_s
    if c.cp > 1:  # ring attention per layer; what each block's attention does not hide is on the critical path
        kv_hidden = h * (model.kv_heads or model.heads) // model.heads
        cpt = cp_layer_times(b, model.seq, h, kv_hidden, c.cp, t, hw, a.mfu, ab)
        per_mb += layers * cpt["exposed_s"]
    pipeline = (m + p - 1) * per_mb  # = m * per_mb / (1 - pipeline_bubble(p, m)): the bubble is (p-1) per_mb
    # data parallel: once per step, or per micro-batch where ZeRO must (see DP_COLLECTIVES)
    once_s, each_s, dp_bytes = 0.0, 0.0, 0.0  # collectives once per step / once per micro-batch
    for op, per_step, per_microbatch in DP_COLLECTIVES[c.zero_stage]:
        for params, group, stride in ((dense, d, t), (experts, d // c.ep, t * c.ep)):
            if group > 1 and params:
                one = collective_s(op, 2 * params, group, stride, hw)
                once_s, each_s = once_s + per_step * one, each_s + per_microbatch * m * one
                n = per_step + per_microbatch * m
                dp_bytes += n * (2 if op == "all_reduce" else 1) * (group - 1) / group * 2 * params  # rings
    dp_s = once_s + each_s
    # what overlap can hide: a once-per-step collective only behind the last micro-batch's backward (about 2/3
    # of its compute; gradient accumulation gives it no more), a per-micro-batch one behind each micro-batch;
    # both together never behind more than the m micro-batches' compute
    hidden = min(a.dp_overlap * once_s, 2 / 3 * comp) + min(a.dp_overlap * each_s, m * comp)
    exposed_dp = dp_s - min(hidden, m * comp)
    step = pipeline + exposed_dp
    comm = {"dp": dp_bytes,
            "tp": m * layers * tp_bytes_per_rank(b, s, h, t, ab, sp),
            "pp": pp_bytes_per_rank(b, s, h, m, ab) if p > 1 else 0.0,
            "ep": m * moe * ep_bytes_per_rank(b * s, h, model.topk, c.ep, ab, a.imbalance) if c.ep > 1 else 0.0}
    times = {"compute": m * comp, "tp": m * tp_s, "ep": m * ep_s, "pp": m * pp_s,
             "bubble": (p - 1) * per_mb, "dp": dp_s, "dp_exposed": exposed_dp}
    if c.cp > 1:
        comm["cp"] = m * layers * cpt["bytes"]
        times.update(cp=m * layers * cpt["comm_s"], cp_exposed=m * layers * cpt["exposed_s"])
    return Estimate(c, memory, comm, times, step, memory["total"] <= hw.gpu_memory)


# --------------------------------------------------------------------------------------- search
def _search_args(model, hw, global_batch, assume, zero_stages, max_tp) -> tuple[int, tuple, int | None]:
    for name, value, kind in (("model", model, Model), ("hw", hw, Hardware), ("assume", assume, Assumptions)):
        check.instance(name, value, kind, f"a plan.{kind.__name__}")
    global_batch = _int("global_batch", global_batch, high=MAX_GLOBAL_BATCH)
    stages = check.listed("zero_stages", zero_stages, "ZeRO stage")
    stages = tuple(dict.fromkeys(check.choice(f"zero_stages[{i}]", z, range(4)) for i, z in enumerate(stages)))
    max_tp = None if max_tp is None else _int("max_tp", max_tp)
    return global_batch, stages, max_tp


def configurations(model: Model, hw: Hardware, global_batch: int, zero_stages=(0, 1, 2, 3), max_tp=None, max_cp=1):
    """Every (dp, tp, pp, ep, zero stage, micro-batches, cp <= max_cp) that can run, with its micro-batch size."""
    global_batch, zero_stages, max_tp = _search_args(model, hw, global_batch, Assumptions(), zero_stages, max_tp)
    max_cp = _int("max_cp", max_cp)
    world = hw.world
    for tp, cp in itertools.product(_divisors(world), _divisors(world)):
        if model.heads % tp or (max_tp and tp > max_tp) or (world // tp) % cp or cp > max_cp \
                or model.seq % (2 * cp) and cp > 1:
            continue
        for pp in _divisors(world // (tp * cp)):
            if model.layers % pp:
                continue
            dp = world // (tp * cp * pp)
            if global_batch % dp:
                continue
            eps = [e for e in _divisors(dp) if model.experts % e == 0] if model.experts and cp == 1 else [1]
            for ep, zero, m in itertools.product(eps, zero_stages, _divisors(global_batch // dp)):
                yield Config(dp, tp, pp, ep, zero, m, cp), global_batch // (dp * m)


def search(model: Model, hw: Hardware, global_batch: int, assume: Assumptions = Assumptions(),
           zero_stages=(0, 1, 2, 3), max_tp=None, max_cp=1) -> tuple[list[Estimate], int]:
    """-> (the configurations that fit in memory, fastest first; how many were evaluated). max_cp > 1 adds
    context parallelism (cp dividing the world, 2 cp dividing the sequence) to the search."""
    global_batch, zero_stages, max_tp = _search_args(model, hw, global_batch, assume, zero_stages, max_tp)
    out, n = [], 0
    for config, b in configurations(model, hw, global_batch, zero_stages, max_tp, max_cp):
        n += 1
        e = _estimate(model, hw, config, global_batch, assume, b)
        if e.fits:
            out.append(e)
    out.sort(key=lambda e: e.step_s)
    return out, n
