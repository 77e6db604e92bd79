"""commlib.exercises: right answers pass, wrong ones are rejected with a hint that fits the mistake."""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

from commlib import exercises as ex

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("answer, ok, hint", [
    (10, True, "1 + 2 + ... + 4 = 10"),
    (10.0, True, ""),
    (None, False, "Replace the None"),
    (..., False, "Replace the None"),
    ("10", False, "should be a number"),
    (True, False, "should be a number"),
    (4, False, "number of ranks"),
    (3, False, "same result"),
    (24, False, "rank r holds r + 1"),
])
def test_ch0_all_reduce_value(answer, ok, hint):
    v = ex.ch0_all_reduce_value(answer, world_size=4)
    assert v.ok is ok and bool(v) is ok
    assert hint in v.message
    assert repr(v).startswith("Correct." if ok else "Not yet.")


def test_ch0_all_reduce_value_other_world_size():
    assert ex.ch0_all_reduce_value(15, world_size=5).ok
    assert not ex.ch0_all_reduce_value(10, world_size=5).ok


def right_max():
    t = torch.tensor(float((3 * dist.get_rank()) % dist.get_world_size()))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t


def own_value():
    return (3 * dist.get_rank()) % dist.get_world_size()


def summed():
    t = torch.tensor(float((3 * dist.get_rank()) % dist.get_world_size()))
    dist.all_reduce(t)
    return t.item()


def raises():
    raise KeyError("oops")


def only_rank_0_reduces():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.zeros(1))


def test_ch0_rank_max(cluster4):
    assert ex.ch0_rank_max(cluster4, right_max).ok
    assert "every rank returned 3" in ex.ch0_rank_max(cluster4, right_max).message
    assert "Replace the None" in ex.ch0_rank_max(cluster4, None).message
    assert "no parentheses" in ex.ch0_rank_max(cluster4, 3).message
    assert "ReduceOp.MAX" in ex.ch0_rank_max(cluster4, own_value).message
    assert "that is the sum" in ex.ch0_rank_max(cluster4, summed).message
    assert "KeyError" in ex.ch0_rank_max(cluster4, raises).message


def test_ch0_rank_max_that_hangs_is_rejected_not_hung(cluster4):
    cluster4.timeout = 2
    try:
        v = ex.ch0_rank_max(cluster4, only_rank_0_reduces)
    finally:
        cluster4.timeout = 30
    assert not v.ok and "same collective" in v.message
