"""commlib.parallel.tensor: Megatron TP and SP against the dense block; bytes against plan.tp_bytes_per_rank."""

import sys

import cloudpickle
import pytest
import torch

from commlib import plan
from commlib.parallel import Comm, live
from commlib.parallel import tensor as tp

cloudpickle.register_pickle_by_value(sys.modules[__name__])

S, B, H, HEADS = 8, 2, 16, 4


def block_both_ways(t, sequence_parallel, impl):
    r = live.tensor_parallel_block(t, sequence_parallel, impl, seq=S, batch=B, hidden=H, heads=HEADS)
    return r["errors"], r["sent"]


@pytest.mark.parametrize("sequence_parallel", [False, True])
@pytest.mark.parametrize("t", [1, 2, 4])
def test_parallel_block_equals_the_dense_one(cluster4, t, sequence_parallel):
    impl = "commlib" if t == 4 else "torch"  # t = 4: commlib's ring, so the bytes are the messages it sent
    for rank, (errors, sent) in enumerate(cluster4.run(block_both_ways, t, sequence_parallel, impl)):
        assert max(errors.values()) < 1e-5, (rank, errors)
        per_layer = plan.tp_bytes_per_rank(B, S, H, t, act_bytes=4, sequence_parallel=sequence_parallel)
        if t == 1:
            assert sent == {}
        elif sequence_parallel:  # 4 all-gathers + 4 reduce-scatters of bsh; + the replicated gradients
            assert sent["all_gather"] == sent["reduce_scatter"] == per_layer / 2
            replicated = 4 * H + 2 * H   # two LayerNorms (weight, bias) and the two row-parallel biases
            assert sent["all_reduce_replicated"] == 2 * (t - 1) / t * replicated * 4
        else:                    # 4 all-reduces of bsh: 8 bsh (t-1)/t
            assert sent == {"all_reduce": per_layer}


def bad_shapes():
    comm = Comm()
    errors = []
    for call in (lambda: tp.ParallelBlock(tp.Block(H, 2), comm),
                 lambda: tp.split_sequence(torch.zeros(6, B, H), comm)):
        try:
            call()
        except ValueError as e:
            errors.append(str(e))
    return errors


def test_sizes_that_do_not_divide_are_named(cluster4):
    errors = cluster4.run(bad_shapes)[0]
    assert "heads (2) must be divisible by the tensor-parallel size tp=4" in errors[0]
    assert "seq (6) must be divisible by tp=4" in errors[1]
