"""The planner's context parallelism: Config(cp=...), activations along the sequence, ring-attention bytes and
their overlap, the search over cp."""

import dataclasses

import pytest

from commlib import plan

MODEL = dataclasses.replace(plan.MODELS["gpt3_1.3b"], seq=131072)   # a long-context job
HW = plan.hardware("dgx_h100", 2)


def test_cp_divides_activations_and_adds_ring_bytes():
    a = plan.Assumptions()
    one = plan.estimate(MODEL, HW, plan.Config(dp=2, tp=8, microbatches=8), 16)
    four = plan.estimate(MODEL, HW, plan.Config(dp=2, tp=2, microbatches=8, cp=4), 16)
    layers, b, s, h = MODEL.layers, 1, MODEL.seq, MODEL.hidden
    act = plan.activation_bytes_per_layer(s // 4, b, h, MODEL.heads, 2, True, a.recompute)
    assert four.memory["activations"] == pytest.approx(layers * act)
    ring = plan.cp_bytes_per_rank(b, s, h, 4, 2) + plan.cp_backward_bytes_per_rank(b, s, h, 4, 2)
    assert four.comm_bytes["cp"] == pytest.approx(8 * layers * ring / 2)     # K/V heads split over tp=2
    assert "cp" not in one.comm_bytes and "cp" not in one.times
    assert 0 < four.times["cp_exposed"] < four.times["cp"]
    assert plan.groups(HW, plan.Config(dp=2, tp=2, cp=4))["cp"][:2] == (4, 2)
    assert plan.groups(HW, plan.Config(dp=2, tp=2, cp=4))["dp"][:2] == (8, 2)    # gradients over dp x cp


def test_exposed_ring_time_is_what_the_attention_does_not_hide():
    t = plan.cp_layer_times(1, 8192, 4096, 1024, 8, 1, HW)
    fwd = plan.ring_exposed_s(8, t["block_s"], t["attention_s"])
    bwd = plan.ring_exposed_s(8, 2 * t["block_s"], 2 * t["attention_s"]) + t["block_s"]
    assert t["exposed_s"] == pytest.approx(fwd + bwd)
    assert t["comm_s"] == pytest.approx(22 * t["block_s"])      # 7 forward, 7 + 8 backward
    short = plan.cp_layer_times(1, 1024, 4096, 1024, 8, 1, HW)   # short blocks: the attention hides less
    assert short["exposed_s"] / short["comm_s"] > t["exposed_s"] / t["comm_s"]


@pytest.mark.parametrize("config, message", [
    (plan.Config(dp=2, tp=8, cp=2), r"dp\*tp\*pp\*cp = 2\*8\*1\*2 = 32 must equal the world size 16"),
    (plan.Config(dp=16, cp=1), None),
])
def test_validate_names_cp(config, message):
    if message is None:
        plan.validate(MODEL, HW, config, 16)
    else:
        with pytest.raises(ValueError, match=message):
            plan.validate(MODEL, HW, config, 16)
    odd = dataclasses.replace(MODEL, seq=1000)
    with pytest.raises(ValueError, match=r"seq \(1000\) must be divisible by 2\*cp=16"):
        plan.validate(odd, HW, plan.Config(dp=1, tp=2, cp=8), 16)


def test_search_includes_cp_when_asked():
    plain, n = plan.search(MODEL, HW, 16)
    assert all(e.config.cp == 1 for e in plain)
    with_cp, m = plan.search(MODEL, HW, 16, max_cp=16)
    assert m > n and {e.config.cp for e in with_cp} > {1}
    assert with_cp[0].step_s <= plain[0].step_s
    assert plan.mesh_collectives(2, 4, 2) == {"dp": {"reduce_scatter": 2, "all_gather": 4}, "tp": {"all_reduce": 4}}


def test_the_step_counts_the_attention_that_hides_the_ring():
    """Each cp rank computes 1/cp of the causal attention (4 b s^2 h per layer forward, half masked; x3 with
    backward, +1 forward recomputed): 15.46 s steps used to hold a 30.37 s ring because these FLOPs were left out."""
    a = plan.Assumptions(mfu=0.5, recompute="none", sequence_parallel=False)
    hw = plan.Hardware(1, 4, gpu_memory=1e12, peak_flops=1e15, intra=HW.intra, inter=HW.inter)
    e = plan.estimate(MODEL, hw, plan.Config(dp=1, cp=4), 1, a)
    b, s, h, layers = 1, MODEL.seq, MODEL.hidden, MODEL.layers
    attention = 3 * 4 * b * s * s * h * layers / 2
    assert plan.attention_flops(MODEL, b, s) == pytest.approx(attention)
    assert plan.attention_flops(MODEL, b, s, "selective") == pytest.approx(attention * 4 / 3)
    assert e.times["compute"] == pytest.approx((plan.step_flops(MODEL, b * s // 4) + attention / 4) / (1e15 * 0.5))


@pytest.mark.parametrize("assume", [plan.Assumptions(), plan.Assumptions(dp_overlap=1.0)], ids=["default", "overlap"])
def test_no_part_of_a_step_is_longer_than_the_step(assume):
    long = dataclasses.replace(plan.MODELS["llama2_7b"], seq=131072)   # chapter 8's job
    fits, _ = plan.search(long, HW, 16, assume, max_cp=HW.world)
    short, _ = plan.search(plan.MODELS["llama2_7b"], HW, 64, assume, zero_stages=(2, 3))
    assert fits and short
    for e in fits + short:
        for part, seconds in e.times.items():
            assert seconds <= e.step_s * (1 + 1e-9), (part, seconds, e.step_s, e.config.describe())
