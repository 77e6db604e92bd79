"""commlib.plan against its published sources, hand-computed step times, the search, and bad input."""

import subprocess
import sys

import numpy as np
import pytest

from commlib import cost, plan

GPT3 = plan.Model(layers=96, hidden=12288, heads=96, seq=2048, vocab=51200)   # Brown et al. 2020, 175B
LLAMA7B = plan.Model(layers=32, hidden=4096, heads=32, seq=4096, vocab=32000, ffn=11008 * 3 // 2)


def test_plan_imports_no_torch():
    code = "import sys, commlib.plan; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------ ZeRO (Rajbhandari et al. 2020)
def test_zero_memory_figure_1():
    # Figure 1: Psi = 7.5B, N_d = 64, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per device
    got = [plan.model_state_bytes(7.5e9, 64, stage) / 1e9 for stage in (0, 1, 2, 3)]
    assert got == pytest.approx([120, 31.4, 16.6, 1.875], abs=0.05)
    assert plan.model_state_breakdown(7.5e9) == {"params": 15e9, "grads": 15e9, "optimizer": 90e9}  # 2 + 2 + 12


@pytest.mark.parametrize("psi, n", [(1e9, 8), (np.int64(3_000_000), np.int32(3)), (1e12, 1024)])
def test_zero_memory_formulas(psi, n):
    assert plan.model_state_bytes(psi, n, 0) == pytest.approx(16 * psi)
    assert plan.model_state_bytes(psi, n, 1) == pytest.approx(4 * psi + 12 * psi / n)
    assert plan.model_state_bytes(psi, n, 2) == pytest.approx(2 * psi + 14 * psi / n)
    assert plan.model_state_bytes(psi, n, 3) == pytest.approx(16 * psi / n)


def test_zero_communication_section_7():
    psi, n = 1e9, 64
    for stage in (0, 1, 2):  # baseline DP and ZeRO-1/2: 2 Psi (times (N-1)/N for a ring)
        assert plan.dp_bytes_per_rank(psi, n, stage) == pytest.approx(2 * (n - 1) / n * psi * 2)
    assert plan.dp_bytes_per_rank(psi, n, 3) == pytest.approx(3 * (n - 1) / n * psi * 2)  # 1.5x
    # the same as a ring all-reduce of the fp16 gradients, priced by commlib.cost
    assert plan.dp_bytes_per_rank(psi, n, 0) == pytest.approx(cost.bytes_sent_per_rank("all_reduce", 2 * psi, n))
    assert plan.dp_bytes_per_rank(psi, 1, 3) == 0.0


# ------------------------------------------------------------------------------------- Megatron
def test_tensor_parallel_bytes_narayanan_2021():
    b, s, h, t = 4, 2048, 12288, 8   # 8 bsh (t-1)/t per layer per micro-batch
    assert plan.tp_bytes_per_rank(b, s, h, t) == pytest.approx(8 * b * s * h * (t - 1) / t * 2)
    four_all_reduces = 4 * cost.bytes_sent_per_rank("all_reduce", b * s * h * 2, t)
    sp = 4 * (cost.bytes_sent_per_rank("all_gather", b * s * h * 2, t) +
              cost.bytes_sent_per_rank("reduce_scatter", b * s * h * 2, t))
    assert plan.tp_bytes_per_rank(b, s, h, t) == pytest.approx(four_all_reduces)
    assert plan.tp_bytes_per_rank(b, s, h, t, sequence_parallel=True) == pytest.approx(sp)
    assert plan.tp_bytes_per_rank(b, s, h, 1) == 0.0


def test_activation_memory_korthikanti_2022_table_2():
    s, b, h, a, t = 2048, 1, 12288, 96, 8     # GPT-3 175B: 5as/h = 80
    sbh = s * b * h
    assert 5 * a * s / h == 80
    act = lambda **kw: plan.activation_bytes_per_layer(s, b, h, a, **kw)  # noqa: E731
    assert act() == pytest.approx(sbh * (34 + 80))                                   # no parallelism
    assert act(tp=t) == pytest.approx(sbh * (10 + 24 / t + 80 / t))                 # tensor parallel
    assert act(tp=t, sequence_parallel=True) == pytest.approx(sbh * (34 / t + 80 / t))
    assert act(tp=t, recompute="selective") == pytest.approx(sbh * (10 + 24 / t))
    assert act(tp=t, sequence_parallel=True, recompute="selective") == pytest.approx(sbh * 34 / t)
    assert act(recompute="full") == 2 * sbh
    # the paper's headline: SP + selective recomputation cut activation memory by about 5x against TP alone
    assert act(tp=t) / act(tp=t, sequence_parallel=True, recompute="selective") == pytest.approx(5.4, abs=0.05)


def test_activation_memory_of_a_llama_block():
    """SwiGLU (gate, up, SiLU(gate), their product: 4 x 2sbf), RMSNorm (its input, 2sbh, as LayerNorm), no dropout
    (no masks; the scores keep only the softmax output, 2as^2b): 8 + (4 + 4r + 8f/h)/t + 2as/(ht)."""
    m = plan.MODELS["llama2_7b"]
    s, b, h, a, f, t = m.seq, 1, m.hidden, m.heads, 11008, 8
    assert m.block == "llama" and m.mlp_width == f and f / h == 2.6875
    sbh = s * b * h
    act = lambda **kw: plan.model_activation_bytes_per_layer(m, b, **kw)  # noqa: E731
    assert act(recompute="selective") == pytest.approx(sbh * (8 + 4 + 4 + 8 * f / h)) == pytest.approx(37.5 * sbh)
    assert act() == pytest.approx(sbh * (37.5 + 2 * a * s / h))
    assert act(tp=t, recompute="selective") == pytest.approx(sbh * (8 + 29.5 / t))
    assert act(tp=t, sequence_parallel=True) == pytest.approx(sbh * (37.5 / t + 2 * a * s / (h * t)))
    assert act(recompute="full") == 2 * sbh
    # GPT's block in the same terms is the paper's 34 sbh; grouped-query attention shrinks K and V (r = 8/32)
    gpt = plan.activation_bytes_per_layer(s, b, h, a, recompute="selective")
    assert gpt == pytest.approx(34 * sbh)
    mixtral = plan.MODELS["mixtral_8x7b"]   # top-2: each token's SwiGLU activations in two experts
    assert plan.model_activation_bytes_per_layer(mixtral, 1, recompute="selective") == pytest.approx(
        sbh * (8 + 4 + 4 * 8 / 32 + 2 * 8 * 14336 / h))
    with pytest.raises(ValueError, match="block must be one of"):
        plan.activation_bytes_per_layer(s, b, h, a, block="mamba")


def test_the_fp32_logits_are_counted_on_the_last_stage():
    m, hw = plan.MODELS["llama2_7b"], plan.hardware("dgx_h100", 1)
    assert plan.logits_bytes(4096, 2, 32000, tp=2) == 4 * 4096 * 2 * 32000 / 2
    e = plan.estimate(m, hw, plan.Config(dp=8, zero_stage=1, microbatches=4), 32)
    assert e.memory["logits"] == plan.logits_bytes(m.seq, 1, m.vocab)   # one micro-batch at a time (1F1B)
    assert e.memory["total"] == pytest.approx(sum(v for k, v in e.memory.items() if k != "total"))
    # two stages: the first holds 2 micro-batches of 16 layers, the last 1 with the logits: the larger counts
    e2 = plan.estimate(m, hw, plan.Config(dp=4, pp=2, microbatches=8), 32)
    per = plan.model_activation_bytes_per_layer(m, 1, 1, True, "selective")
    assert (e2.memory["activations"], e2.memory["logits"]) == pytest.approx((16 * 2 * per, 0.0))


def test_megatron_bf16_keeps_fp32_main_gradients():
    """megatron/training/arguments.py: with --bf16, gradients accumulate and reduce in fp32 unless
    --grad-reduce-in-bf16; docs/user-guide/features/dist_optimizer.md: 18 bytes/param, 6 + 12/d distributed."""
    assert plan.model_state_bytes(1.0, grad_bytes=4) == 18
    assert plan.model_state_bytes(1.0, 8, 1, grad_bytes=4) == pytest.approx(6 + 12 / 8)
    assert plan.model_state_bytes(1.0, 8, 1) == pytest.approx(4 + 12 / 8)


def test_megatron_distributed_optimizer_bytes_per_parameter():
    """docs/user-guide/features/dist_optimizer.md: 16-bit gradients 20 bytes/param, 4 + 16/d distributed; fp32
    gradients 18, 6 + 12/d. With 16-bit gradients the 16/d holds Adam's 12 and the fp32 copy of the gradient shard
    (distrib_optimizer.py, _copy_model_grads_to_main_grads), freed before forward, which holds ZeRO-1's 4 + 12/d."""
    for d in (1, 2, 8, 16, 64):
        assert plan.megatron_state_bytes(1.0, d) == pytest.approx(4 + 16 / d)
        assert plan.megatron_state_bytes(1.0, d, grad_bytes=4) == pytest.approx(6 + 12 / d)
        assert plan.megatron_state_bytes(1.0, d) - plan.model_state_bytes(1.0, d, 1) == pytest.approx(4 / d)
        assert plan.megatron_state_bytes(1.0, d, grad_bytes=4) == pytest.approx(plan.model_state_bytes(1.0, d, 1, 4))
    assert plan.megatron_state_bytes(1.0) == 20 and plan.megatron_state_bytes(1.0, grad_bytes=4) == 18
    assert plan.megatron_state_bytes(7e9, 8) == pytest.approx(7e9 * 6)
    with pytest.raises(ValueError, match="grad_bytes must be one of"):
        plan.megatron_state_bytes(1.0, 8, grad_bytes=3)


def test_ddp_start_broadcast_tree_or_nccls_chain():
    assert plan.init_broadcast_bytes(1000, 8, "ring") == 1000   # NCCL: a chain, each rank forwards once
    with pytest.raises(ValueError, match="algorithm must be 'tree' or 'ring'"):
        plan.init_broadcast_bytes(1000, 8, "binomial")


def test_flops_narayanan_2021_equation_3():
    B, s, l, h, V = 8, GPT3.seq, GPT3.layers, GPT3.hidden, GPT3.vocab
    assert GPT3.params == pytest.approx(175e9, rel=0.01)
    # eq. (3) without its attention-score term s/(6h): 72 Bslh^2 (1 + V/(12lh)); recomputation 96 (1 + V/(16lh))
    assert plan.step_flops(GPT3, B * s) == pytest.approx(72 * B * s * l * h ** 2 * (1 + V / (12 * l * h)))
    assert plan.step_flops(GPT3, B * s, "full") == pytest.approx(96 * B * s * l * h ** 2 * (1 + V / (16 * l * h)))


def test_moe_parameters_and_bytes():
    moe = plan.Model(layers=2, hidden=8, heads=2, seq=4, vocab=10, experts=4, topk=2)
    assert moe.expert_params == 2 * 4 * 2 * 8 * 32 and moe.params == moe.dense_params + moe.expert_params
    assert moe.active_params == moe.dense_params + 2 * 2 * 2 * 8 * 32
    # GShard-style: dispatch + combine, forward + backward, (ep-1)/ep of T k rows of h leave the rank
    assert plan.ep_bytes_per_rank(1000, 8, 2, 4) == pytest.approx(4 * 1000 * 2 * 8 * 2 * 3 / 4)
    assert plan.ep_bytes_per_rank(1000, 8, 2, 4, imbalance=3) == pytest.approx(2 * 4 * 1000 * 2 * 8 * 2 * 3 / 4)
    assert plan.ep_bytes_per_rank(1000, 8, 2, 1) == 0.0


# ------------------------------------------------------------------------------------ pipelines
@pytest.mark.parametrize("p, m", [(2, 1), (4, 8), (8, 32), (np.int64(4), np.int64(16))])
def test_pipeline_bubble_gpipe_and_1f1b(p, m):
    want = (p - 1) / (m + p - 1)                       # GPipe (Huang et al. 2019): (K-1)/(M+K-1)
    assert plan.pipeline_bubble(p, m, "gpipe") == plan.pipeline_bubble(p, m) == pytest.approx(want)
    bubble = plan.pipeline_bubble(p, m)
    assert bubble / (1 - bubble) == pytest.approx((p - 1) / m)     # Narayanan et al. 2021: t_pb / t_id
    interleaved = plan.pipeline_bubble(p, m, "interleaved", chunks=2)
    assert interleaved / (1 - interleaved) == pytest.approx((p - 1) / (2 * m))
    assert plan.microbatches_in_flight(p, m, "gpipe") == m and plan.microbatches_in_flight(p, m) == min(p, m)


def test_pipeline_point_to_point_bytes():
    assert plan.pp_bytes_per_rank(2, 2048, 4096, 8) == 2 * 8 * 2 * 2048 * 4096 * 2   # bsh each way per micro-batch


def test_init_broadcast_is_a_binomial_tree():
    assert plan.init_broadcast_bytes(1000, 8) == 3000 and plan.init_broadcast_bytes(1000, 5) == 3000
    assert plan.init_broadcast_bytes(1000, 1) == 0.0


# ----------------------------------------------------------------------------------- step time
TINY = plan.Model(layers=4, hidden=64, heads=4, seq=16, vocab=100)
LINK = cost.Link("test", bandwidth=1e9, latency=1e-6, source="a round number for hand checks")


def tiny_hw(nodes, gpus):
    return plan.Hardware(nodes, gpus, gpu_memory=1e9, peak_flops=1e12, intra=LINK, inter=LINK)


def test_one_gpu_step_is_its_compute():
    e = plan.estimate(TINY, tiny_hw(1, 1), plan.Config(dp=1), global_batch=8, assume=plan.Assumptions(mfu=0.5))
    # 6 P tokens + the causal attention scores: 4 b s^2 h per layer forward, x3 with backward, +1 for the
    # selective recomputation, halved by the mask
    attention = 4 * 4 * 8 * 16 ** 2 * 64 * 4 / 2
    assert e.step_s == pytest.approx((6 * TINY.params * 8 * 16 + attention) / (1e12 * 0.5))
    no_attention = plan.estimate(TINY, tiny_hw(1, 1), plan.Config(dp=1), 8, plan.Assumptions(mfu=0.5, attention=False))
    assert no_attention.step_s == pytest.approx(6 * TINY.params * 8 * 16 / (1e12 * 0.5))
    assert e.fits and e.comm_bytes == {"dp": 0.0, "tp": 0.0, "pp": 0.0, "ep": 0.0}


def test_data_parallel_step_adds_the_exposed_all_reduce():
    hw, cfg = tiny_hw(1, 4), plan.Config(dp=4)
    comp = (6 * TINY.params * 2 * 16 + plan.attention_flops(TINY, 2, 16, "selective")) / (1e12 * 0.4)  # 2 per GPU
    ar = cost.collective_time("all_reduce", 2 * TINY.params, 4, LINK)
    e = plan.estimate(TINY, hw, cfg, 8)
    assert e.step_s == pytest.approx(comp + ar) and e.comm_bytes["dp"] == plan.dp_bytes_per_rank(TINY.params, 4)
    half = plan.estimate(TINY, hw, cfg, 8, plan.Assumptions(dp_overlap=0.5))
    assert half.times["dp_exposed"] == pytest.approx(ar - min(ar / 2, 2 / 3 * comp))
    full = plan.estimate(TINY, hw, cfg, 8, plan.Assumptions(dp_overlap=1.0))  # hidden at most by backward
    assert full.times["dp_exposed"] == pytest.approx(max(0.0, ar - 2 / 3 * comp))


@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
def test_data_parallel_bytes_per_step_follow_zero(zero_stage):
    hw = tiny_hw(1, 4)
    one = plan.estimate(TINY, hw, plan.Config(dp=4, zero_stage=zero_stage), 8)
    assert one.comm_bytes["dp"] == pytest.approx(plan.dp_bytes_per_rank(TINY.params, 4, zero_stage))
    # with 2 micro-batches ZeRO-2 reduce-scatters twice, ZeRO-3 gathers and reduce-scatters twice
    two = plan.estimate(TINY, hw, plan.Config(dp=4, zero_stage=zero_stage, microbatches=2), 8)
    rs = cost.bytes_sent_per_rank("reduce_scatter", 2 * TINY.params, 4)
    extra = {0: 0, 1: 0, 2: rs, 3: plan.dp_bytes_per_rank(TINY.params, 4, 3)}[zero_stage]
    assert two.comm_bytes["dp"] == pytest.approx(one.comm_bytes["dp"] + extra)


def test_pipeline_step_includes_the_bubble():
    hw = tiny_hw(1, 2)
    e = plan.estimate(TINY, hw, plan.Config(dp=1, pp=2, microbatches=4), 8)
    p2p = cost.collective_time("sendrecv", 2 * 16 * 64 * 2, 2, LINK)     # a micro-batch of 2 x 16 x 64, 16-bit
    per_mb = (6 * TINY.params * 2 * 16 + plan.attention_flops(TINY, 2, 16, "selective")) / 2 / (1e12 * 0.4) + 2 * p2p
    assert e.step_s == pytest.approx((4 + 2 - 1) * per_mb)
    assert e.times["bubble"] / e.step_s == pytest.approx(plan.pipeline_bubble(2, 4))


def test_tensor_parallel_memory_and_bytes():
    hw = tiny_hw(1, 4)
    e = plan.estimate(TINY, hw, plan.Config(dp=1, tp=4, microbatches=2), 8, plan.Assumptions(sequence_parallel=False))
    assert e.comm_bytes["tp"] == 2 * TINY.layers * plan.tp_bytes_per_rank(4, 16, 64, 4)
    assert e.memory["model_states"] == pytest.approx(16 * TINY.params / 4)
    assert e.memory["activations"] == pytest.approx(TINY.layers * plan.activation_bytes_per_layer(
        16, 4, 64, 4, tp=4, recompute="selective"))


# --------------------------------------------------------------------------------------- search
def test_seven_billion_does_not_fit_under_ddp_but_the_search_finds_what_does():
    hw = plan.hardware("dgx_h100", 2)
    assert plan.model_state_bytes(LLAMA7B.params) > hw.gpu_memory
    fits, n = plan.search(LLAMA7B, hw, global_batch=64)
    assert n > len(fits) > 0
    assert [e.step_s for e in fits] == sorted(e.step_s for e in fits)
    for e in fits:
        c = e.config
        assert c.dp * c.tp * c.pp == 16 and e.memory["total"] <= hw.gpu_memory and e.fits
        assert not (c.tp == c.pp == 1 and c.zero_stage == 0)    # plain DDP needs 16 bytes per parameter
        assert e.step_s == pytest.approx(plan.estimate(LLAMA7B, hw, c, 64).step_s)


def test_search_over_experts():
    moe = plan.Model(layers=4, hidden=256, heads=8, seq=128, vocab=1000, experts=8, topk=2)
    fits, n = plan.search(moe, tiny_hw(2, 4), 16, plan.Assumptions())
    assert {e.config.ep for e in fits} >= {1, 2}
    assert all(e.config.dp % e.config.ep == 0 and (e.comm_bytes["ep"] > 0) == (e.config.ep > 1) for e in fits)


@pytest.mark.parametrize("config, words", [
    (plan.Config(dp=3, tp=1), "dp*tp*pp = 3*1*1 = 3 must equal the world size 4"),
    (plan.Config(dp=1, tp=4, pp=1), None),
    (plan.Config(dp=0, tp=4), "dp must be an int >= 1"),
    (plan.Config(dp=2, tp=2, zero_stage=4), "zero_stage must be one of"),
    (plan.Config(dp=4, microbatches=3), "global_batch (8) must be divisible by dp*microbatches=12"),
    (plan.Config(dp=2, ep=2, tp=2), "ep=2 needs a model with experts"),
])
def test_bad_configurations_are_named(config, words):
    if words is None:
        plan.estimate(TINY, tiny_hw(1, 4), config, 8)
        return
    with pytest.raises(ValueError) as info:
        plan.estimate(TINY, tiny_hw(1, 4), config, 8)
    assert words in str(info.value)


def test_sizes_that_do_not_divide_are_named():
    odd = plan.Model(layers=3, hidden=60, heads=6, seq=8, vocab=10, experts=6)
    hw = tiny_hw(1, 4)
    with pytest.raises(ValueError, match=r"heads \(6\) must be divisible by tp=4"):
        plan.estimate(odd, hw, plan.Config(dp=1, tp=4), 8)
    with pytest.raises(ValueError, match=r"layers \(3\) must be divisible by pp=2"):
        plan.estimate(odd, hw, plan.Config(dp=2, pp=2), 8)
    with pytest.raises(ValueError, match=r"experts \(6\) must be divisible by ep=4"):
        plan.estimate(odd, hw, plan.Config(dp=4, ep=4), 8)
    with pytest.raises(ValueError, match=r"dp \(2\) must be divisible by ep=4"):
        plan.estimate(plan.Model(4, 64, 4, 8, 10, experts=8), tiny_hw(1, 8), plan.Config(dp=2, tp=4, ep=4), 8)


@pytest.mark.parametrize("call, words", [
    (lambda: plan.model_state_bytes(1e9, 0), "dp must be an int >= 1"),
    (lambda: plan.model_state_bytes(1e9, 8, 5), "zero_stage must be one of"),
    (lambda: plan.model_state_bytes(-1, 8), "params must be a finite number"),
    (lambda: plan.dp_bytes_per_rank(1e9, 2.5), "dp must be an int"),
    (lambda: plan.tp_bytes_per_rank(1, 1, 1, 0), "tp must be an int >= 1"),
    (lambda: plan.pipeline_bubble(0, 4), "pp must be an int >= 1"),
    (lambda: plan.pipeline_bubble(4, 4, "zb"), "schedule must be one of"),
    (lambda: plan.pipeline_bubble(4, 4, "1f1b", chunks=2), "chunks > 1 needs schedule='interleaved'"),
    (lambda: plan.activation_bytes_per_layer(8, 1, 64, 6, tp=4), r"heads (6) must be divisible by tp=4"),
    (lambda: plan.activation_bytes_per_layer(8, 1, 64, 4, recompute="some"), "recompute must be one of"),
    (lambda: plan.ep_bytes_per_rank(8, 8, 1, 2, imbalance=0.5), "imbalance must be a finite number >= 1"),
    (lambda: plan.Assumptions(mfu=1.5), "mfu must be a finite number > 0 and <= 1"),
    (lambda: plan.Assumptions(dp_overlap=-0.1), "dp_overlap must be a finite number >= 0 and <= 1"),
    (lambda: plan.hardware("dgx_z", 1), "name must be one of"),
])
def test_bad_inputs_are_named(call, words):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert words in str(info.value)


# ------------------------------------------------------------------------ pricing on the topology
from commlib import topology as topo  # noqa: E402


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("name, nodes", [("dgx_h100", 1), ("dgx_h100", 4), ("dgx_a100", 2)])
def test_a_world_group_costs_what_topology_says(op, name, nodes):
    hw, n = plan.hardware(name, nodes), 3e9
    assert hw.topology == topo.preset(name, nodes)
    assert plan.collective_s(op, n, hw.world, 1, hw) == topo.collective_time(op, n, hw.topology, "multi_ring")


def test_all_to_all_is_priced_per_gpu_nic():
    hw, n = plan.hardware("dgx_h100", 2), 1e9
    for algorithm in ("bulk", "pairwise"):
        assert plan.collective_s("all_to_all", n, 16, 1, hw, algorithm) == \
            topo.collective_time("all_to_all", n, hw.topology, algorithm)
    # every GPU's (N-1)/N n off-node bytes leave through its own 50 GB/s NIC: the node's 8 NICs do not add up
    b = topo.breakdown("all_to_all", n, hw.topology, "bulk")
    assert b["inter_s"] == pytest.approx(n / 2 / 50e9)
    with pytest.raises(ValueError, match="all_to_all must be one of"):
        plan.collective_s("all_to_all", n, 16, 1, hw, "ring")


def test_groups_are_priced_where_their_ranks_sit():
    hw, n = plan.hardware("dgx_h100", 4), 1e9
    nvlink, ndr = cost.LINKS["nvlink4"], cost.LINKS["ib_ndr"]
    # tensor parallel, 8 adjacent ranks: one node, a ring on NVLink
    assert plan.group_shape(hw, 8, 1) == (1, 8)
    assert plan.collective_s("all_reduce", n, 8, 1, hw) == pytest.approx(
        topo.collective_time("all_reduce", n, topo.Topology(1, 8, nvlink, ndr), "flat_ring"))
    # NCCL's call latency once, then 2(p-1) hops
    assert plan.collective_s("all_reduce", n, 8, 1, hw) == pytest.approx(6.6e-6 + 14 * (0.6e-6 + n / 8 / 450e9))
    # data parallel behind tp = 8: one rank per node, 4 nodes, one NIC each: a flat ring on InfiniBand
    assert plan.group_shape(hw, 4, 8) == (4, 1)
    assert plan.collective_s("all_reduce", n, 4, 8, hw) == pytest.approx(6.6e-6 + 6 * (5e-6 + n / 4 / 50e9))
    # data parallel behind tp = 2: 4 ranks per node on 4 nodes; the 4 rings leave through 4 NICs
    assert plan.group_shape(hw, 16, 2) == (4, 4)
    assert plan.collective_s("all_reduce", n, 16, 2, hw) == topo.collective_time(
        "all_reduce", n, topo.Topology(4, 4, nvlink, ndr, 4), "multi_ring")
    bw = topo.breakdown("all_reduce", n, topo.Topology(4, 4, nvlink, ndr, 4), "multi_ring")["busbw_GBps"]
    assert bw == pytest.approx(4 * 50, rel=0.02)     # four NICs' worth (less the latency), not one


def test_fewer_nics_than_gpus_share_them():
    hw = plan.Hardware(2, 8, 80e9, 1e15, "nvlink4", "ib_ndr", nics_per_node=2)
    assert hw.nic_share.bandwidth == 50e9 * 2 / 8
    for op in ("all_reduce", "all_gather"):
        assert plan.collective_s(op, 1e9, 16, 1, hw) == pytest.approx(
            topo.collective_time(op, 1e9, hw.topology, "multi_ring"))
    assert plan.collective_s("all_to_all", 1e9, 16, 1, hw) == pytest.approx(
        topo.collective_time("all_to_all", 1e9, hw.topology, "bulk"))


def test_estimate_prices_each_kind_on_its_group():
    hw = plan.hardware("dgx_h100", 4)
    c = plan.Config(dp=4, tp=8, microbatches=2)
    e = plan.estimate(LLAMA7B, hw, c, 16, plan.Assumptions(zero3_prefetch=False))
    dense = LLAMA7B.params / 8
    assert e.times["dp"] == pytest.approx(plan.collective_s("all_reduce", 2 * dense, 4, 8, hw))
    b = 16 // (4 * 2)
    bsh = b * LLAMA7B.seq * LLAMA7B.hidden * 2
    assert e.times["tp"] == pytest.approx(2 * LLAMA7B.layers * 4 * plan.collective_s("all_reduce", bsh, 8, 1, hw))
    assert plan.groups(hw, c)["dp"] == (4, 8, 4, 1) and plan.groups(hw, c)["tp"] == (8, 1, 1, 8)
    piped = plan.groups(hw, plan.Config(dp=2, tp=2, pp=8))["pp"]
    assert piped == (2, 4, 2, 1)     # some stage boundary crosses nodes
    assert plan.groups(plan.hardware("dgx_h100", 1), plan.Config(dp=2, pp=4))["pp"] == (2, 2, 1, 2)


def test_machines_from_presets_and_bad_machines():
    b200 = plan.hardware("dgx_b200", 2, achievable=True)
    assert b200.gpu_memory == 180e9 and b200.peak_flops == 2250e12 and b200.inter == topo.ACHIEVABLE["ib_ndr"]
    assert plan.Hardware.from_topology(b200.topology, 1, 1).topology == b200.topology
    with pytest.raises(ValueError, match="gpu_memory must be a finite number > 0"):
        plan.Hardware(1, 8, 0, 1e15)
    with pytest.raises(ValueError, match="nodes must be an int >= 1"):
        plan.Hardware(0, 8, 80e9, 1e15)
    with pytest.raises(TypeError, match="topology must be a topology.Topology"):
        plan.Hardware.from_topology("dgx", 1, 1)
    with pytest.raises(ValueError, match="all_to_all must be 'bulk' or 'pairwise'"):
        plan.Assumptions(all_to_all="ring")


def test_gradient_accumulation_gives_ddps_all_reduce_no_more_cover():
    """DDP all-reduces once per step, during the last micro-batch's backward: with m micro-batches, overlap can
    hide at most that one backward (2/3 of a micro-batch's compute), not 2/3 of all m."""
    hw = plan.Hardware(2, 8, 80e9, 989e12, "nvlink4", "tcp100", nics_per_node=1)  # a slow network: comm-bound
    full = plan.Assumptions(dp_overlap=1.0)
    for m in (1, 4, 16):
        e = plan.estimate(LLAMA7B, hw, plan.Config(dp=16, microbatches=m, zero_stage=1), 16 * m, full)
        per_mb = e.times["compute"] / m
        assert e.times["dp"] > per_mb                     # so the cover matters
        assert e.times["dp_exposed"] == pytest.approx(e.times["dp"] - 2 / 3 * per_mb)


# ------------------------------------------------------------------ degenerate input (issue 24)
HW2 = plan.hardware("dgx_h100", 2)


@pytest.mark.parametrize("call, exc, words", [
    (lambda: plan.Assumptions(act_bytes=0), ValueError, "act_bytes must be a finite number of bytes a value > 0"),
    (lambda: plan.Assumptions(mfu=True), TypeError, "mfu must be a finite number"),
    (lambda: plan.Model(32, 4096, 32, 4096, kv_heads=5), ValueError, "kv_heads must divide heads (32)"),
    (lambda: plan.Model(32, 4096, 32, 4096, experts=4, topk=5), ValueError, "topk must be <= experts (4)"),
    (lambda: plan.Model(32, 0, 32, 4096), ValueError, "hidden must be an int >= 1"),
    (lambda: plan.Model(0, 4096, 32, 4096), ValueError, "layers must be an int >= 1"),
    (lambda: plan.search(LLAMA7B, HW2, 64, zero_stages=()), ValueError, "zero_stages must list at least one"),
    (lambda: plan.search(LLAMA7B, HW2, 64, zero_stages=(4,)), ValueError, "zero_stages[0] must be one of"),
    (lambda: plan.search(LLAMA7B, HW2, 64, max_tp=-1), ValueError, "max_tp must be an int >= 1"),
    (lambda: plan.model_state_bytes(10**400), ValueError, "params must be a finite number"),
    (lambda: plan.Hardware(2, 8, 10**400, 1e15), ValueError, "gpu_memory must be a finite number"),
    (lambda: plan.hardware("dgx_h100", 10**400), ValueError, "nodes must be an int >= 1 and <= 131072"),
    (lambda: plan.hardware("dgx_h100", 10**7), ValueError, "nodes must be an int >= 1 and <= 131072"),
    (lambda: plan.collective_s("all_reduce", 1e9, 0, 1, HW2), ValueError, "size must be an int >= 1"),
    (lambda: plan.estimate("llama", HW2, plan.Config(16), 64), TypeError, "model must be a plan.Model"),
    (lambda: plan.estimate(LLAMA7B, "dgx_h100", plan.Config(16), 64), TypeError, "hw must be a plan.Hardware"),
    (lambda: plan.estimate(LLAMA7B, HW2, (16, 1, 1), 64), TypeError, "config must be a plan.Config"),
    (lambda: plan.estimate(LLAMA7B, HW2, plan.Config(16), 64, "fast"), TypeError, "assume must be a plan.Assumptions"),
    (lambda: plan.estimate(LLAMA7B, HW2, plan.Config(16, microbatches=0), 64), ValueError, "config.microbatches"),
    (lambda: plan.step_flops("llama", 100), TypeError, "model must be a plan.Model"),
])
def test_degenerate_plans_are_named(call, exc, words):
    """Before: ZeroDivisionError, OverflowError, AttributeError, or a plan of nonsense."""
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value)


def test_divisors_are_every_divisor_in_order():
    import signal

    from commlib.plan.divisors import divisors as _divisors

    for n in list(range(1, 400)) + [720720]:
        assert _divisors(n) == [k for k in range(1, n + 1) if n % k == 0]

    def hung(*_):
        raise TimeoutError("_divisors ran past 30 s: not O(sqrt n)")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        assert _divisors(2**34) == [2**k for k in range(35)] and len(_divisors(3**20)) == 21
        big = _divisors(2**40 - 87)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert big == sorted(set(big)) and all((2**40 - 87) % d == 0 for d in big) and big[-1] == 2**40 - 87


def test_search_time_does_not_grow_with_the_global_batch():
    """Before: 2^24 took 9 s and 2^34 did not finish (divisors enumerated one by one). A generous bound: a hang,
    not a timing."""
    import signal

    def hung(*_):
        raise TimeoutError("search ran past 60 s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        small, n_small = plan.search(LLAMA7B, HW2, 2**10)
        big, n_big = plan.search(LLAMA7B, HW2, 2**34)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert n_big > n_small > 0 and big and small
    with pytest.raises(ValueError, match="global_batch must be an int >= 1 and <= 1099511627776"):
        plan.search(LLAMA7B, HW2, 2**41)


def test_config_describe_is_the_chapters_short_form():
    assert plan.Config(dp=16, zero_stage=1, microbatches=2).describe() == "dp=16 tp=1 pp=1 ZeRO-1 m=2"
    assert plan.Config(dp=2, tp=2, pp=1, zero_stage=1, microbatches=8, cp=8).describe() == \
        "dp=2 tp=2 cp=8 pp=1 ZeRO-1 m=8"
    assert plan.Config(dp=8, tp=1, pp=2, ep=4, zero_stage=3, microbatches=4).describe() == \
        "dp=8 tp=1 pp=2 ep=4 ZeRO-3 m=4"


def test_overlap_hides_at_most_the_steps_compute():
    """ZeRO-2 with full overlap: the per-micro-batch reduce-scatters hide behind each micro-batch and the all-gather
    behind the last backward, but together never behind more than the m micro-batches' compute."""
    e = plan.estimate(TINY, tiny_hw(1, 4), plan.Config(dp=4, zero_stage=2, microbatches=2), 8,
                      plan.Assumptions(dp_overlap=1.0))
    assert e.times["dp"] > e.times["compute"]                     # communication outweighs the compute here
    assert e.times["dp_exposed"] == pytest.approx(e.times["dp"] - e.times["compute"])
    assert all(seconds <= e.step_s * (1 + 1e-9) for seconds in e.times.values())
