"""commlib.algorithms.nccl (NCCL's Tree all-reduce and chain broadcast, from send/recv) against the
built-ins, and their bytes against commlib.cost, for world sizes 1-5 and 8."""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

import commlib as cl
from commlib import algorithms as alg
from commlib import cost
from commlib.algorithms.nccl import double_binary_tree_all_reduce, ring_broadcast
from test_algorithms import compare, data, matrix, reference, sizes_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def check_nccl_algorithms(segment_bytes):
    """Default segments: every dtype, op and size. Small segments (many in flight at once): fewer cases."""
    p, r = dist.get_world_size(), dist.get_rank()
    failures, case = [], 0
    cases = matrix(p) if segment_bytes is None else [(torch.float32, "sum"), (torch.int64, "max")]
    for dtype, op in cases:
        for numel in (sizes_for(p) if segment_bytes is None else [1003]):
            case += 1
            x = data(r, numel, dtype, case)
            ref = reference(x, op)
            t = x.clone()
            out = double_binary_tree_all_reduce(t, op=op, segment_bytes=segment_bytes)
            if out.data_ptr() != t.data_ptr():
                failures.append("double_binary_tree_all_reduce: not in place")
            compare(f"double_binary_tree {dtype} {op} numel={numel} seg={segment_bytes}", t, x, op, ref, failures)
    for dtype in ((torch.float32, torch.int64, torch.bfloat16) if segment_bytes is None else (torch.float32,)):
        for numel in (sizes_for(p) if segment_bytes is None else [1003]):
            x = data(r, numel, dtype, numel)
            for src in range(p):
                mine, builtin = x.clone(), x.clone()
                ring_broadcast(mine, src=src, segment_bytes=segment_bytes)
                dist.broadcast(builtin, src=src)
                if not torch.equal(mine, builtin):
                    failures.append(f"ring_broadcast src={src} {dtype} numel={numel} seg={segment_bytes}")
    return failures


def traced_bytes(numel, segment_bytes):
    tree, chain = alg.Trace(), alg.Trace()
    double_binary_tree_all_reduce(torch.ones(numel), trace=tree, segment_bytes=segment_bytes)
    ring_broadcast(torch.ones(numel), src=1 % dist.get_world_size(), trace=chain, segment_bytes=segment_bytes)
    return tree.bytes_sent, chain.bytes_sent, max((e.numel for e in tree.events), default=0)


@pytest.fixture(scope="module", params=[1, 2, 3, 4, 5, 8], ids=lambda p: f"p{p}")
def cluster(request):
    with cl.Cluster(world_size=request.param, timeout=240) as c:
        yield c


def test_match_the_builtins(cluster):
    for seg in (None, 200):   # 200 B: about 10 segments per tree in flight, an uneven last one
        for rank, failures in enumerate(cluster.run(check_nccl_algorithms, seg)):
            assert failures == [], f"rank {rank}: {failures[:10]}"


@pytest.mark.parametrize("numel", [1003, 7])
def test_bytes_are_the_cost_models(cluster, numel):
    p = cluster.world_size
    out = cluster.run(traced_bytes, numel, 64)
    assert [tree for tree, _, _ in out] == cost.bytes_sent_by_rank("all_reduce", 4 * numel, p, "double_binary_tree",
                                                                      itemsize=4)
    assert [chain for _, chain, _ in out] == cost.bytes_sent_by_rank("broadcast", 4 * numel, p, "ring", itemsize=4,
                                                                       root=1 % p)
    assert all(largest <= 16 for _, _, largest in out)   # 64-byte segments of float32


def test_segment_bytes_is_validated(cluster):
    def bad():
        double_binary_tree_all_reduce(torch.ones(4), segment_bytes=0)
    with pytest.raises(cl.RankError, match="segment_bytes must be an int >= 1"):
        cluster.run(bad)
