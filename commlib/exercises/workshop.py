"""Chapter 11, the workshop: Llama-2-7B on one and on two DGX H100 nodes, planned as it would really run.

The scenario, from which every number of the chapter is computed:
  model     Llama-2-7B (plan.MODELS["llama2_7b"]; its 291 tensors in tensors()), 16-bit weights and
            gradients, mixed-precision Adam: 16 bytes of model states per parameter (ZeRO paper).
            ASSUMED: gradients kept and reduced in BF16, as Megatron-LM does only with --grad-reduce-in-bf16;
            its default with --bf16 keeps and reduces fp32 gradients (megatron/training/arguments.py), twice the
            reduce-scatter bytes: megatron_default() prices what that changes.
  clusters  CLUSTERS: 1 and 2 DGX H100 nodes (topology.preset "dgx_h100": NVLink4 inside a node, 8 NDR
            NICs per node, rail-connected), priced at NCCL's achievable link speeds (topology.ACHIEVABLE)
  step      SEQUENCES_PER_GPU sequences of 4096 tokens per GPU (weak scaling: the global batch grows
            with the cluster), plan.Assumptions ASSUME: MFU 40 %, 1F1B, selective recomputation, no
            data-parallel overlap in plan.estimate (the overlap is modelled here, bucket by bucket),
            compute 6 x params x tokens without the attention scores (attention=False)
  overlap   for the reference configuration (plan.search's fastest, pure data parallelism with ZeRO-1):
            gradients accumulate locally over the micro-batches (DDP's no_sync; Megatron-LM's
            forward_backward_no_pipelining); in the last micro-batch's backward they are
            reduce-scattered bucket by bucket as they become ready (overlap.make_buckets; Megatron's
            overlap_grad_reduce); after the optimizer step the updated 16-bit parameters are all-gathered,
            not overlapped (Megatron's default overlap_param_gather=False; with it, one bucket ahead of
            the next forward). Megatron-LM: megatron/core/distributed/distributed_data_parallel_config.py
            and megatron/core/pipeline_parallel/schedules.py.
The check_*() functions compare a learner's answer with these numbers and name the likely mistake.
"""

from __future__ import annotations

import functools
import math

import torch

from commlib import _validate as check
from commlib import cost, plan, precision
from commlib import topology as topo
from commlib.cost.timeline import Timeline, make_buckets, simulate
from commlib.exercises.answers import Verdict, _choice, _is, _missing, _number
from commlib.exercises.ch4 import _strategy

MODEL = plan.MODELS["llama2_7b"]
NODE = "dgx_h100"
CLUSTERS = {"1 DGX H100 node (8 GPUs)": 1, "2 DGX H100 nodes (16 GPUs)": 2}   # name -> nodes
SEQUENCES_PER_GPU = 4
# attention=False: the step's compute is 6 x params x tokens, the count the exercises check by hand (at 4k
# tokens the causal attention scores would add s/(12h) of it: plan.attention_flops)
ASSUME = plan.Assumptions(attention=False)
GRAD_BYTES = 2          # BF16 gradients and parameters
CLIP_NORM = 1.0         # Llama 2's gradient clipping (Touvron et al. 2023, section 2.2)
BUCKET_OPTIONS = (25, 100, 400, 1600, 6400)   # MiB
MEGATRON_BUCKET = 40_000_000   # parameters: max(40M, 1M x dp) (megatron/core/distributed/distributed_data_parallel.py)


# ------------------------------------------------------------------------------------- the model
def tensors() -> list[int]:
    """Parameter counts in forward order, tensor by tensor, Llama-2-7B's 291 (Touvron et al. 2023; the
    Hugging Face checkpoint's state dict): embedding, 32 x (input RMSNorm 4096; q, k, v, o: 4096 x 4096;
    post-attention RMSNorm 4096; gate, up, down: 4096 x 11008), final RMSNorm, LM head. 6,738,415,616."""
    d, ff, vocab = MODEL.hidden, 11008, MODEL.vocab
    layer = [d] + [d * d] * 4 + [d] + [d * ff] * 3
    return [vocab * d] + layer * MODEL.layers + [d, vocab * d]


def params() -> float:
    """All of them, the RMSNorm weights included (plan's MODEL.params leaves those 266,240 out)."""
    return float(sum(tensors()))


# -------------------------------------------------------------------------------- the clusters
def nodes(cluster: str) -> int:
    if not isinstance(cluster, str) or cluster not in CLUSTERS:
        raise ValueError(f"cluster must be one of {list(CLUSTERS)}, got {cluster!r}")
    return CLUSTERS[cluster]


def hardware(cluster: str, achievable: bool = True) -> plan.Hardware:
    """The cluster's GPUs and links: NCCL's achievable speeds (True) or the line rates."""
    return plan.hardware(NODE, nodes(cluster), achievable=achievable)


def global_batch(cluster: str) -> int:
    return SEQUENCES_PER_GPU * hardware(cluster).world


def estimate(config: plan.Config, cluster: str) -> plan.Estimate:
    """plan.estimate of a configuration on the cluster, for the workshop's batch and ASSUME."""
    return plan.estimate(MODEL, hardware(cluster), config, global_batch(cluster), ASSUME)


@functools.lru_cache(maxsize=None)
def _fastest(cluster: str) -> plan.Config:
    fits, _ = plan.search(MODEL, hardware(cluster), global_batch(cluster), ASSUME)
    return fits[0].config


def reference(cluster: str) -> plan.Estimate:
    """The fastest configuration that fits (plan.search), estimated afresh."""
    nodes(cluster)
    return estimate(_fastest(cluster), cluster)


def allreduce_s(cluster: str, grad_bytes: float = GRAD_BYTES, achievable: bool = True,
                algorithm: str = "multi_ring") -> float:
    """One all-reduce of every gradient over all the cluster's GPUs (topology.collective_time)."""
    return topo.collective_time("all_reduce", params() * grad_bytes, hardware(cluster, achievable).topology, algorithm)


def exposed_comm_s(e: plan.Estimate) -> float:
    """Communication on the critical path of a plan.Estimate: TP, EP, PP and the data parallelism's exposed part."""
    return sum(e.times[k] for k in ("tp", "ep", "pp", "dp_exposed"))


# ------------------------------------------------------------ overlap of the reference configuration
def backward_s(cluster: str) -> float:
    """The reference's last micro-batch's backward: 4 of the 6 FLOPs per parameter and token (plan.step_flops)."""
    return 2 / 3 * reference(cluster).times["compute"] / reference(cluster).config.microbatches


def buckets(cluster: str, bucket_cap_mb: float | None = None,
            grad_bytes: float = GRAD_BYTES) -> tuple[list[float], list[float], list[float]]:
    """Per gradient bucket, in the order backward fills them (overlap.make_buckets; None: DDP's 25 MiB caps with a
    1 MiB first bucket): (the backward seconds that produce it, in proportion to its parameters; its
    reduce-scatter over the data-parallel GPUs, topology multi_ring; its bytes)."""
    grad_bytes = check.number("grad_bytes", grad_bytes, 0, strict=True, high=64, unit="bytes a value")
    if bucket_cap_mb is not None:
        bucket_cap_mb = check.number("bucket_cap_mb", bucket_cap_mb, 0, strict=True, high=1e9, unit="MiB")
    e, hw = reference(cluster), hardware(cluster)
    if (e.config.tp, e.config.pp) != (1, 1):  # the model below is pure data parallelism (tests hold it)
        raise ValueError(f"the reference configuration must be pure data parallelism, got {e.config.describe()}")
    sizes = [n * grad_bytes for n in tensors()]
    back, total = backward_s(cluster), sum(sizes)
    compute, comm, out = [], [], []
    for b in make_buckets(sizes, bucket_cap_mb):
        nbytes = sum(sizes[i] for i in b)
        compute.append(back * nbytes / total)
        comm.append(topo.collective_time("reduce_scatter", nbytes, hw.topology, "multi_ring"))
        out.append(nbytes)
    return compute, comm, out


def timeline(cluster: str, bucket_cap_mb: float | None = None, grad_bytes: float = GRAD_BYTES) -> Timeline:
    """The last micro-batch's backward with its bucketed reduce-scatters (overlap.simulate)."""
    return simulate(*buckets(cluster, bucket_cap_mb, grad_bytes)[:2])


def param_gather_s(cluster: str) -> float:
    """The all-gather of the updated 16-bit parameters after the optimizer step, in one piece."""
    return topo.collective_time("all_gather", params() * GRAD_BYTES, hardware(cluster).topology, "multi_ring")


def gather_ahead_s(cluster: str, bucket_cap_mb: float | None = None) -> float:
    """Exposed all-gather when it overlaps the next forward bucket by bucket (Megatron's overlap_param_gather):
    bucket i+1's gather starts when bucket i's forward does; forward is half of backward (2 of 6 FLOPs)."""
    (compute, _, sizes), hw = buckets(cluster, bucket_cap_mb), hardware(cluster)
    gathers = [topo.collective_time("all_gather", n, hw.topology, "multi_ring") for n in reversed(sizes)]
    forward = [c / 2 for c in reversed(compute)]
    gathered = start = gathers[0]  # forward cannot start before the first bucket's parameters arrive
    for i, f in enumerate(forward):
        end = start + f
        if i + 1 < len(forward):  # bucket i's forward pre-hook launches bucket i+1's gather
            gathered = max(start, gathered) + gathers[i + 1]
            start = max(end, gathered)
    return end - sum(forward)


def exposed_s(cluster: str, bucket_cap_mb: float | None = None, grad_bytes: float = GRAD_BYTES,
              overlap_param_gather: bool = False) -> float:
    """Exposed data-parallel communication of the reference per step: the reduce-scatter's tail after backward,
    plus the parameter all-gather (all of it, or with overlap_param_gather what forward waits for)."""
    tail = timeline(cluster, bucket_cap_mb, grad_bytes).exposed_comm_s
    return tail + (gather_ahead_s(cluster, bucket_cap_mb) if overlap_param_gather else param_gather_s(cluster))


def step_s(cluster: str, bucket_cap_mb: float | None = None, grad_bytes: float = GRAD_BYTES,
           overlap_param_gather: bool = False) -> float:
    """The reference's step with its data-parallel communication overlapped as above (plan charges all of it)."""
    e = reference(cluster)
    return e.step_s - e.times["dp_exposed"] + exposed_s(cluster, bucket_cap_mb, grad_bytes, overlap_param_gather)


def megatron_default(cluster: str) -> dict:
    """Megatron-LM's default with --bf16 against the BF16 reduction assumed here (plan.megatron_state_bytes): fp32
    gradients, 6 + 12/d bytes per parameter throughout, where BF16 takes 4 + 12/d in forward and backward and 4 + 16/d
    at the optimizer step; 4-byte reduce-scatters in buckets of max(40M, 1M x dp) parameters (160 MB)."""
    e = reference(cluster)  # pure data parallelism with ZeRO-1 (buckets() and the tests hold it)
    d, hw = e.config.dp, hardware(cluster)
    bucket_mib = max(MEGATRON_BUCKET, 1_000_000 * d) * 4 / 2**20
    memory = e.memory["total"] - e.memory["model_states"] + plan.megatron_state_bytes(MODEL.params, d, 4)
    return {"bytes_per_param": plan.megatron_state_bytes(1.0, d, 4), "assumed_bytes_per_param":
            plan.megatron_state_bytes(1.0, d), "assumed_backward_bytes_per_param": plan.model_state_bytes(1.0, d, 1),
            "assumed_step_memory": plan.megatron_state_bytes(MODEL.params, d),  # the activations are freed by then
            "memory": memory, "fits": memory <= hw.gpu_memory, "bucket_mib": bucket_mib,
            "reduce_scatter_s": timeline(cluster, bucket_mib, 4).comm_s,
            "assumed_reduce_scatter_s": timeline(cluster).comm_s,
            "exposed_s": exposed_s(cluster, bucket_mib, 4), "assumed_exposed_s": exposed_s(cluster)}


# ------------------------------------------------------------------------------------ precision
WIRE_BYTES = {"fp32_accumulate": 4}   # the others send 2 bytes per value


def gradient_rms() -> float:
    """An assumed scale, CLIP_NORM / sqrt(params): the RMS of one value of a gradient whose norm is the clipping norm.
    Clipping does not bound what the ranks sum: it acts on the reduced gradient, after the collective. Each
    rank's own gradient is noisier than their mean and larger on average (E|g_r|^2 = |mean|^2 + variance), so
    this scale is the small end of the values summed: the pessimistic one for underflow, the risk here (FP16
    overflows only some nine orders of magnitude higher)."""
    return CLIP_NORM / math.sqrt(params())


def precision_table(cluster: str) -> dict:
    """strategy -> precision.experiment over the reference's data-parallel ranks, gradients of gradient_rms()."""
    p = reference(cluster).config.dp
    return {s: precision.experiment(p, gradient_rms(), s) for s in precision.STRATEGIES}


# ------------------------------------------------------------------------------------- checkers
def _judge(x: float, want: float, right: str, mistakes, otherwise: str, rel: float = 0.02) -> Verdict:
    """Right if x is within rel of want and nearer to it than to any mistake (value, hint); else the hint of the
    nearest mistake within rel; else `otherwise`."""
    def dist(v):
        return abs(x - v) / abs(v) if v else (0.0 if x == 0 else math.inf)

    near = min(((dist(v), hint) for v, hint in mistakes), default=(math.inf, ""), key=lambda t: t[0])
    if dist(want) <= rel and dist(want) <= near[0]:
        return Verdict(True, right)
    return Verdict(False, near[1] if near[0] <= rel else otherwise)


def check_model_states(answer) -> Verdict:
    """Bytes of parameters, gradients and Adam states per GPU under DDP: 16 per parameter (ZeRO paper)."""
    x, bad = _number(answer, "the number of bytes")
    if bad is not None:
        return bad
    p, gpu = params(), hardware(list(CLUSTERS)[0]).gpu_memory
    want = plan.model_state_bytes(p)
    right = (f"2 + 2 + 12 = 16 bytes x {p / 1e9:.3f}e9 parameters = {want / 1e9:.1f} GB on every GPU: more than the "
             f"{gpu / 1e9:.0f} GB of an H100 before a single activation. DDP does not fit.")
    mistakes = [(want / 1e9, "give bytes, not GB (1 GB = 1e9 bytes)."),
                (want / 2**30, "give bytes, not GiB."),
                (4 * p, "you counted the 16-bit weights and gradients only: Adam adds 12 bytes per parameter "
                        "(fp32 master weights, momentum, variance)."),
                (2 * p, "that is the 16-bit weights alone; add the gradients (2 bytes) and Adam's states (12)."),
                (12 * p, "that is Adam's states alone (fp32 weights, momentum, variance); add the 16-bit weights and "
                         "gradients."),
                (14 * p, "add the 16-bit weights: forward and backward run on them (2 bytes per parameter)."),
                (8 * p, "Adam keeps three fp32 values per parameter (master weight, momentum, variance): 12 bytes."),
                (18 * p, "18 is Megatron-LM's default with --bf16, fp32 main gradients (4 bytes); this workshop "
                         "assumes BF16 gradients, 2 bytes (ws.megatron_default() prices the difference)."),
                (20 * p, "the weights and gradients that forward and backward use are 16-bit: 2 + 2 + 12."),
                (16 * 7e9, "use the exact count, ws.params() (6.74e9), not 7e9."),
                (want / 8, "that is ZeRO-3 on 8 GPUs: DDP keeps everything on every GPU."),
                (want / 16, "that is ZeRO-3 on 16 GPUs: DDP keeps everything on every GPU.")]
    return _judge(x, want, right, mistakes, "mixed-precision Adam: 2 (weights) + 2 (gradients) + 12 (Adam) bytes per "
                                            "parameter, all of it on every GPU under DDP.", rel=0.01)


def _config(answer, cluster: str) -> tuple[plan.Config | None, Verdict | None]:
    """The learner's configuration, validated for the cluster, or the Verdict that says what is wrong with it."""
    missing = _missing(answer)
    if missing is not None:
        return None, missing
    example = "plan.Config(dp=..., tp=..., pp=..., zero_stage=..., microbatches=...)"
    if _is(answer, dict):
        try:
            answer = plan.Config(**answer)
        except Exception as e:  # noqa: BLE001 (unknown keys, anything)
            return None, Verdict(False, f"give {example}; that dict does not make one ({type(e).__name__}).")
    if not _is(answer, plan.Config):
        return None, Verdict(False, f"give a configuration, {example}; got {type(answer).__name__}.")
    try:
        plan.validate(MODEL, hardware(cluster), answer, global_batch(cluster))
    except Exception as e:  # noqa: BLE001 (a learner's fields may be anything)
        try:
            why = str(e)[:300]
        except Exception:  # noqa: BLE001
            why = type(e).__name__
        world = hardware(cluster).world
        return None, Verdict(False, f"that configuration cannot run on the {world} GPUs of this cluster with "
                                    f"{global_batch(cluster)} sequences per step: {why}")
    return answer, None


def _memory(e: plan.Estimate) -> str:
    m = e.memory
    gathered = f" + {m['logits'] / 1e9:.1f} (fp32 logits)" if m.get("logits") else ""
    gathered += f" + {m['zero3_gathered'] / 1e9:.1f} (ZeRO-3's gathered layers)" if m["zero3_gathered"] else ""
    return (f"{m['model_states'] / 1e9:.1f} (model states) + {m['activations'] / 1e9:.1f} (activations){gathered} "
            f"= {m['total'] / 1e9:.1f} GB")


def check_fits(answer, cluster: str) -> Verdict:
    """A plan.Config that fits in the GPUs' memory on `cluster` (plan.estimate(...).fits). Any such one is right."""
    c, bad = _config(answer, cluster)
    if bad is not None:
        return bad
    e, best, gpu = estimate(c, cluster), reference(cluster), hardware(cluster).gpu_memory
    if e.fits:
        return Verdict(True, f"per GPU {_memory(e)} <= {gpu / 1e9:.0f} GB; its step takes {e.step_s:.3f} s "
                             "(ws.ASSUME). "
                             f"The fastest that fits (plan.search): {best.config.describe()}, {best.step_s:.3f} s.")
    states = e.memory["model_states"]
    if states > gpu:
        what = ("this is DDP: every GPU holds all 16 bytes per parameter. " if c.zero_stage == 0 and c.tp * c.pp == 1
                else "")
        return Verdict(False, f"{what}Its model states alone take {states / 1e9:.1f} GB per GPU, more than "
                              f"{gpu / 1e9:.0f} GB: shard them (a higher zero_stage) or split the model (tp, pp).")
    b = global_batch(cluster) // (c.dp * c.microbatches)
    return Verdict(False, f"the model states fit, but a micro-batch of {b} sequences of {MODEL.seq} tokens needs its "
                          f"activations too: {_memory(e)} > {gpu / 1e9:.0f} GB. Use more, smaller micro-batches, "
                          "or tp.")


def check_allreduce_time(answer, cluster: str) -> Verdict:
    """Seconds for one all-reduce of all BF16 gradients over the cluster's GPUs as NCCL's rings run it
    (NCCL_ALGO=Ring: topology multi_ring), at NCCL's achievable link speeds. NCCL's default is another algorithm:
    NVLS on one H100 node, tree or NVLSTree on two (nccl-tests #212, #196); the verdict says so."""
    x, bad = _number(answer, "the time in seconds")
    if bad is not None:
        return bad
    b = topo.breakdown("all_reduce", params() * GRAD_BYTES, hardware(cluster).topology, "multi_ring")
    want, n, hw = b["time_s"], params() * GRAD_BYTES, hardware(cluster)
    busbw = next(r.busbw_GBps[1] for r in topo.PUBLISHED if r.system == NODE and r.algorithm == "in_network")
    nvls = n * cost.bus_factor("all_reduce", hw.world) / (busbw * 1e9)   # NVLS at the busbw NVIDIA measures
    k, nic = hw.nics_per_node, hw.inter.bandwidth
    right = (f"{want * 1e3:.1f} ms: busbw {b['busbw_GBps']:.0f} GB/s, bound by the {b['bottleneck']}. "
             + ("NCCL's rings leave each node through all its NICs, "
                f"{k} x {nic / 1e9:g} = {k * nic / 1e9:g} GB/s per node: as fast as NVLink inside one node. "
                "By default NCCL would run its tree or NVLSTree here, which send less across the network."
                if hw.nodes > 1 else f"One ring on NVLink4 at the {hw.intra.bandwidth / 1e9:g} GB/s NCCL reaches. "
                "By default NCCL runs NVLS here: "
                f"{topo.collective_time('all_reduce', n, hw.topology, 'in_network') * 1e3:.1f} ms by the model's bound, "
                f"about {nvls * 1e3:.0f} ms at the busbw NVIDIA measures (nccl-tests #212)."))
    line = allreduce_s(cluster, achievable=False)
    mistakes = [(2 * want, "BF16 gradients take 2 bytes per parameter, not fp32's 4."),
                (line, f"that is at line rate; NCCL reaches less (NVLink4 {hw.intra.bandwidth / 1e9:g} of 450 GB/s, "
                       f"an NDR NIC {nic / 1e9:g} of 50): use ws.hardware(cluster), which prices achievable speeds."),
                (n / hw.intra.bandwidth, "n / B is one copy of the gradients over one link; a ring all-reduce sends "
                                         "2(p-1)/p · n per GPU."),
                (want / 2, "the link speeds are per direction already; do not double them.")]
    if hw.nodes > 1:
        one = "priced on one NIC: "
        mistakes += [(allreduce_s(cluster, algorithm="flat_ring"), one + "a single ring leaves each node through one "
                      "NIC. NCCL's channel search spreads its rings over the NICs (topology's multi_ring: one ring "
                      f"per NIC), so the node's {k} NICs add up."),
                     (allreduce_s(cluster, achievable=False, algorithm="flat_ring"), one + "NCCL's rings leave each "
                      f"node through all {k} NICs (multi_ring), at the {nic / 1e9:g} GB/s each NCCL reaches."),
                     (allreduce_s(list(CLUSTERS)[0]), "that is the one-node time; on two nodes p = 16 and the NICs "
                      f"({k} x {nic / 1e9:g} GB/s per node) bound the rings instead of NVLink."),
                     (allreduce_s(cluster, algorithm="hierarchical"), "hierarchical runs its three phases one after "
                      "another; NCCL's rings (multi_ring) keep NVLink and the NICs busy at once.")]
    return _judge(x, want, right, mistakes, "topology.collective_time('all_reduce', 2 bytes x parameters, "
                                            "ws.hardware(cluster).topology, algorithm): which algorithm do NCCL's "
                                            "rings follow across nodes?")


def check_step_time(answer, config, cluster: str) -> Verdict:
    """Seconds per step of the learner's configuration (W2) on `cluster`: plan.estimate under ASSUME."""
    x, bad = _number(answer, "the step time in seconds")
    if bad is not None:
        return bad
    c, bad = _config(config, cluster)
    if bad is not None:
        return Verdict(False, f"first find a configuration that fits (W2): {bad.message}")
    e = estimate(c, cluster)
    if not e.fits:
        return Verdict(False, "your configuration does not fit in memory (W2); find one that does first.")
    t = e.times
    parts = " + ".join(f"{k} {t[k]:.3f}" for k in ("compute", "tp", "ep", "pp", "bubble", "dp_exposed") if t[k])
    right = f"{parts} = {e.step_s:.3f} s per step (plan.estimate under ws.ASSUME)."
    mistakes = [(t["compute"], "that is the computation alone; add the communication on the critical path (TP, PP, "
                               "EP), the data-parallel communication (ws.ASSUME has dp_overlap=0: none of it is "
                               "hidden) and the bubble."),
                (e.step_s - t["bubble"], "you forgot the pipeline bubble: (pp-1) idle micro-batch slots per step."),
                (e.step_s - t["dp_exposed"], "add the data-parallel communication: ws.ASSUME has dp_overlap=0, so the "
                                             "planner charges all of it to the step."),
                (e.step_s - t["compute"] * (1 - ASSUME.mfu), "divide the FLOPs by the achieved FLOP/s, peak x MFU "
                                                             "(40 %), not by the peak."),
                (e.step_s / c.microbatches, "a step runs all its micro-batches; that is one of them.")]
    return _judge(x, e.step_s, right, [(v, h) for v, h in mistakes if v != e.step_s],
                  "plan.estimate(ws.MODEL, ws.hardware(cluster), config, ws.global_batch(cluster), ws.ASSUME).step_s",
                  rel=0.01)


def check_exposed(answer, cluster: str) -> Verdict:
    """Exposed data-parallel communication (s) per step of the reference configuration (see the module docstring)."""
    x, bad = _number(answer, "the exposed time in seconds")
    if bad is not None:
        return bad
    tail, gather, e = timeline(cluster).exposed_comm_s, param_gather_s(cluster), reference(cluster)
    want = tail + gather
    right = (f"{tail * 1e3:.2f} ms (the reduce-scatter's last bucket, ready only when backward ends) + "
             f"{gather * 1e3:.1f} ms (the all-gather after the optimizer step) = {want * 1e3:.1f} ms of the "
             f"{(timeline(cluster).comm_s + gather) * 1e3:.1f} ms of data-parallel communication.")
    mistakes = [(tail, "add the all-gather of the updated parameters after the optimizer step: nothing overlaps it "
                       "here."),
                (gather, "add the reduce-scatter's last bucket: it can only start once backward has produced it."),
                (e.times["dp"], "most of the reduce-scatter runs during backward, bucket by bucket; only its last "
                                "bucket is exposed."),
                (timeline(cluster).comm_s + gather, "most of the reduce-scatter runs during backward, bucket by "
                                                    "bucket; only its last bucket is exposed."),
                (tail + gather_ahead_s(cluster), "that is with Megatron's overlap_param_gather (the gather overlaps "
                                                 "the next forward); here the gather runs after the optimizer step."),
                (0.0, "the last bucket is ready only when backward ends: its reduce-scatter is always exposed.")]
    return _judge(x, want, right, mistakes, "simulate the buckets (overlap.simulate) for the reduce-scatter's exposed "
                                            "tail, then add the all-gather.", rel=0.01)


def check_best_bucket(answer, cluster: str, options=BUCKET_OPTIONS) -> Verdict:
    """Which bucket cap (MiB) among `options` gives the reference the shortest step? Every tie is right."""
    nodes(cluster)
    answer, bad = _choice(answer, list(options), "MiB")
    if bad is not None:
        return bad
    exposed = {cap: exposed_s(cluster, cap) for cap in options}
    best = min(exposed.values())
    listing = ", ".join(f"{cap} MiB: {step_s(cluster, cap) * 1e3:.1f} ms" for cap in options)
    embedding = MODEL.vocab * MODEL.hidden * GRAD_BYTES / 2**20
    if exposed[answer] <= best + 1e-9:
        return Verdict(True, f"{listing}. The last bucket holds the embedding's gradient ({embedding:.0f} MiB), the "
                             "last to be ready: the tail is shortest when little else shares its bucket.")
    return Verdict(False, f"{answer} MiB is slower: its last bucket, ready only when backward ends, is bigger. "
                          f"{listing}.")


def check_precision(answer, cluster: str) -> Verdict:
    """Chapter 4's strategy that reduces the job's gradients (RMS gradient_rms()) over the reference's data-parallel
    ranks with 2 bytes per value, no overflow, and the smallest mean relative error."""
    answer, bad = _choice(_strategy(answer), precision.STRATEGIES)
    if bad is not None:
        return bad
    rows = precision_table(cluster)
    two = {s: r for s, r in rows.items() if WIRE_BYTES.get(s, 2) == 2 and not (r["inf"] or r["nan"])}
    best = min(two, key=lambda s: two[s]["mean_rel_error"])
    tiny = torch.finfo(torch.float16).tiny
    r = rows[answer]
    said = f"{answer}: {r['flushed_to_zero']} values flushed to zero, mean relative error {r['mean_rel_error']:.1e}"
    if answer == best:
        return Verdict(True, f"{said}, the smallest at 2 bytes per value. BF16 has FP32's exponent range: gradients "
                             f"of RMS {gradient_rms():.1e} are normal numbers there, and below FP16's smallest normal "
                             f"number, {tiny:.1e}. At magnitude 1 FP16 is the more precise (chapter 4).")
    if WIRE_BYTES.get(answer, 2) != 2:
        return Verdict(False, f"{answer} sends {WIRE_BYTES[answer]} bytes per value, twice the traffic (and chapter "
                              "4's version casts to FP16 first). Whether you can afford 4 bytes is the discussion.")
    if r["inf"] or r["nan"]:
        return Verdict(False, f"{answer} overflows {r['inf'] + r['nan']} values.")
    divides = " Dividing before the sum pushes them further down." if answer in ("predivide", "ddp_default",
                                                                                  "pre_post_divide") else ""
    return Verdict(False, f"{said}; {best}: {rows[best]['mean_rel_error']:.1e}. These gradients (RMS "
                          f"{gradient_rms():.1e}) sit below FP16's smallest normal number, {tiny:.1e}, where FP16 "
                          f"keeps fewer significant bits.{divides}")
