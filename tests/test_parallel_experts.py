"""commlib.parallel.experts: the expert-parallel MoE against one process; all-to-all bytes against plan."""

import sys

import cloudpickle
import pytest

from commlib import plan
from commlib.parallel import Comm, live
from commlib.parallel import experts as ex

cloudpickle.register_pickle_by_value(sys.modules[__name__])

T, H, E = 12, 8, 8   # tokens per rank, hidden, experts; T * k * f / ep whole for k = 2, f = 1..4


def moe_both_ways(ep, topk, impl, imbalance=None):
    r = live.expert_parallel(ep, topk, impl, imbalance, tokens=T, hidden=H, experts=E)
    return r["errors"], r["sent"]


@pytest.mark.parametrize("topk", [1, 2])
@pytest.mark.parametrize("ep", [1, 2, 4])
def test_expert_parallel_moe_equals_one_process(cluster4, ep, topk):
    for rank, (errors, sent) in enumerate(cluster4.run(moe_both_ways, ep, topk, "commlib" if ep == 4 else "torch")):
        assert max(errors.values()) < 1e-5, (rank, errors)
        assert sent.get("all_to_all_sizes", 0) == (ep - 1) * (E // ep) * 8  # E/ep int64 counts to each other rank


@pytest.mark.parametrize("imbalance", [1, 2, 4])
def test_all_to_all_bytes_equal_the_plan(cluster4, imbalance):
    out = cluster4.run(moe_both_ways, 4, 2, "commlib", imbalance)
    for errors, _ in out:
        assert max(errors.values()) < 1e-5
    sent = [s["all_to_all"] for _, s in out]
    assert sent[0] == plan.ep_bytes_per_rank(T, H, 2, 4, act_bytes=4, imbalance=imbalance)   # the hot rank
    assert max(sent) == sent[0]
    if imbalance == 1:
        assert sent == [4 * T * 2 * H * 4 * 3 / 4] * 4   # balanced: 4 T k h (ep-1)/ep each


def test_bytes_grow_with_k():
    one, two = (plan.ep_bytes_per_rank(1024, 4096, k, 8) for k in (1, 2))
    assert two == 2 * one == 2 * 4 * 1024 * 4096 * 2 * 7 / 8


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="topk must be in"):
        ex.MoE(4, 2, topk=3)
    with pytest.raises(ValueError, match="topk <= experts/ep"):
        ex.skewed_routing(8, 3, 8, 4, 0)
    with pytest.raises(ValueError, match=r"imbalance must be in \[1, ep=4\]"):
        ex.skewed_routing(8, 2, 8, 4, 1, imbalance=2)   # 8 of 16 copies to rank 0 leaves 8 for 3 ranks


def moe_experts_not_divisible():
    try:
        ex.ExpertParallelMoE(ex.MoE(4, 6, 1), Comm())
    except ValueError as e:
        return str(e)


def test_experts_must_divide_by_ep(cluster4):
    error = cluster4.run(moe_experts_not_divisible)[0]
    assert "experts (6) must be divisible by the expert-parallel size ep=4" in error
