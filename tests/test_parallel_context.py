"""commlib.parallel.context: ring attention and all-gathered K/V against torch's attention on the whole sequence."""

import sys

import cloudpickle
import pytest

from commlib import plan
from commlib.parallel import collective_matmul as cmm
from commlib.parallel import context as cpx
from commlib.parallel import live

cloudpickle.register_pickle_by_value(sys.modules[__name__])

B, HEADS, S, D = 2, 2, 32, 8


@pytest.mark.parametrize("balance", ["zigzag", "contiguous"])
@pytest.mark.parametrize("cp", [1, 2, 4])  # cp = 1: a ring of one rank sends nothing (it sent to itself: a Gloo error)
def test_ring_attention_equals_one_process(cluster4, cp, balance):
    results = cluster4.run(live.context_parallel_attention, cp, True, balance, batch=B, heads=HEADS, seq=S, head_dim=D)
    block = 2 * B * (S // cp) * HEADS * D * 4
    for rank, r in enumerate(results):
        assert r["max_err_out"] < 1e-5 and r["max_err_grad"] < 1e-5, (rank, r)
        assert r["sent_bytes"] == r["expected_bytes"] == (cp - 1) * block == plan.cp_bytes_per_rank(B, S, HEADS * D, cp, 4)
        assert r["backward_bytes"] == (2 * cp - 1) * block * (cp > 1) == plan.cp_backward_bytes_per_rank(B, S, HEADS * D, cp, 4)
        assert r["work"] == cpx.work_per_rank(cp, True, balance)
        assert r["kv_memory"] == 2 * block
    work = results[0]["work"]
    if balance == "zigzag":
        assert work == [2 * cp + 1] * cp
    else:
        assert work == [4 * i + 3 for i in range(cp)]


def test_without_a_mask_every_rank_computes_every_pair(cluster4):
    for r in cluster4.run(live.context_parallel_attention, 4, False, "zigzag", batch=1, heads=1, seq=16, head_dim=4):
        assert r["max_err_out"] < 1e-5 and r["max_err_grad"] < 1e-5
        assert r["work"] == [16] * 4


@pytest.mark.parametrize("cp", [2, 4])
def test_all_gather_kv_equals_one_process_with_the_same_forward_bytes(cluster4, cp):
    for r in cluster4.run(live.context_parallel_attention, cp, True, "zigzag", "all_gather", batch=B, heads=HEADS,
                          seq=S, head_dim=D):
        assert r["max_err_out"] < 1e-5 and r["max_err_grad"] < 1e-5
        assert r["sent_bytes"] == r["expected_bytes"]        # (cp-1)/cp of the whole K/V, as the ring
        assert r["backward_bytes"] == r["expected_bytes"]    # one reduce-scatter of the K/V gradients
        assert r["kv_memory"] == cp * 2 * B * (S // cp) * HEADS * D * 4    # the whole sequence's K/V


def test_layouts():
    assert cpx.positions(16, 4, 1, "zigzag").tolist() == [2, 3, 12, 13]
    assert cpx.positions(16, 4, 1, "contiguous").tolist() == [4, 5, 6, 7]
    assert sum(cpx.work_per_rank(4, True, "zigzag")) == sum(cpx.work_per_rank(4, True, "contiguous")) == 36
    with pytest.raises(ValueError, match="balance must be one of"):
        cpx.chunks_of(0, 2, "striped")
    with pytest.raises(ValueError, match=r"seq \(12\) must be divisible by 2\*cp = 8"):
        cpx.positions(12, 4, 0)


@pytest.mark.parametrize("kwargs, message", [
    ({"cp": 0}, "cp must be an int >= 1"),
    ({"seq": 30}, r"seq \(30\) must be divisible by cp=4"),
    ({"itemsize": 0}, "itemsize must be an int >= 1"),
])
def test_cp_bytes_bad_input_names_the_parameter(kwargs, message):
    args = {"batch": 1, "seq": 32, "kv_hidden": 8, "cp": 4, "itemsize": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        plan.cp_bytes_per_rank(**args)


def test_cp_bytes_closed_form():
    assert plan.cp_bytes_per_rank(2, 1024, 128, 4, 2) == 3 * 2 * 2 * 256 * 128 * 2
    assert plan.cp_bytes_per_rank(2, 1024, 128, 1, 2) == 0


def test_ring_model():
    """Balanced steps: each of the p-1 transfers exposes max(0, transfer - compute); no overlap: all of them."""
    compute = [[0.01] * 4 for _ in range(4)]
    for message, exposed in ((0.03, 3 * 0.02), (0.005, 0.0)):
        for tl in cmm.ring_timelines(compute, message):
            assert cmm.exposed_s(tl) == pytest.approx(exposed)
            assert tl.compute_s == pytest.approx(0.04)
        for tl in cmm.ring_timelines(compute, message, overlap=False):
            assert cmm.exposed_s(tl) == pytest.approx(3 * message)
    # one slow rank holds up its successor: rank 2 waits for rank 1's block
    slow = [[0.01] * 4, [0.05, 0.01, 0.01, 0.01], [0.01] * 4, [0.01] * 4]
    tls = cmm.ring_timelines(slow, 0.001)
    assert cmm.exposed_s(tls[1]) == pytest.approx(0.0)
    assert cmm.exposed_s(tls[2]) == pytest.approx(0.04 + 0.001 - 0.01)
    assert plan.ring_exposed_s(4, 0.03, 0.01) == pytest.approx(0.06)


def bad_sizes():
    errors = []
    for call in (lambda: live.context_parallel_attention(3), lambda: live.collective_matmul(0),
                 lambda: live.mesh_training(2, 1), lambda: live.context_parallel_attention(2, variant="ulysses"),
                 lambda: live.context_parallel_attention(4, seq=12), lambda: live.tensor_parallel_block(4, heads=2),
                 lambda: live.mesh_training(1, 4, heads=2), lambda: live.tensor_parallel_block(2, True, seq=5),
                 lambda: live.context_parallel_attention(2, batch=0), lambda: live.expert_parallel(4, 1, experts=6),
                 lambda: live.collective_matmul(4, rows=10**9), lambda: live.mesh_training(2, 2, heads=3, hidden=12)):
        try:
            call()
            errors.append("no error")
        except (ValueError, TypeError) as e:
            errors.append(str(e))
    return errors


def test_bad_sizes_name_the_parameter(cluster4):
    errors = cluster4.run(bad_sizes)[0]
    assert "cp must be an int >= 1 dividing the world size 4, got 3" in errors[0]
    assert "tp must be an int >= 1 dividing the world size 4, got 0" in errors[1]
    assert "dp*tp = 2*1 must equal the world size 4" in errors[2]
    assert "variant must be 'ring' or 'all_gather'" in errors[3]
    # before: raw torch errors (a shape mismatch, "Gloo pair not connected"), on some ranks only
    assert errors[4:] == ["seq must be divisible by 2*cp (two chunks per rank) (8), got 12",
                          "heads must be >= t (4), got 2", "heads must be >= tp (4), got 2",
                          "seq must be divisible by t (2), got 5", "batch must be an int >= 1 and <= 4096, got 0",
                          "experts must be divisible by ep (4), got 6", "rows must be an int >= 1 and <= 4096, got 1000000000",
                          "heads must be divisible by tp (2), got 3"]
