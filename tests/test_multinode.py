"""commlib.algorithms.nodes (via commlib.algorithms) against torch.distributed's built-ins at node shapes 2x2, 4x1, 1x4
(4 ranks) and 2x3, 3x2 (6 ranks); their bytes per rank, intra- and inter-node, against commlib.topology."""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist
from test_algorithms import compare, data, errors_of, reference

import commlib as cl
from commlib import algorithms as alg
from commlib.algorithms import p2p
from commlib import topology as topo

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SHAPES = {4: [(2, 2), (4, 1), (1, 4)], 6: [(2, 3), (3, 2)]}  # world size -> (nodes, gpus_per_node)
NODE_ALL_REDUCES = {"hierarchical": alg.hierarchical_all_reduce, "multi_ring": alg.multi_ring_all_reduce}
CASES = [(torch.float32, "sum"), (torch.bfloat16, "avg"), (torch.int64, "max"), (torch.float64, "min")]


def check_against_builtins(shapes):
    p, r = dist.get_world_size(), dist.get_rank()
    failures, case = [], 0
    for nodes, g in shapes:
        for grouped in (None, True):  # the pipelined Gloo schedule and NCCL's grouped one
            p2p.GROUP_P2P = grouped
            try:
                for dtype, op in CASES:
                    for numel in sorted({0, 1, p - 1, p + 1, 1003}):
                        case += 1
                        x = data(r, numel, dtype, case)
                        ref = reference(x, op)
                        for name, fn in NODE_ALL_REDUCES.items():
                            t = x.clone().view(-1, 1) if numel else x.clone()  # 2-D: the result comes back shaped
                            out = fn(t, g, op=op)
                            label = f"{name} {nodes}x{g} grouped={grouped} {dtype} {op} numel={numel}"
                            if out.data_ptr() != t.data_ptr():
                                failures.append(f"{label}: not in place")
                            compare(label, t.view(-1), x, op, ref, failures)
            finally:
                p2p.GROUP_P2P = None
        x = data(r, 2 * p * 3, torch.float32, case).view(2 * p, 3)
        want = torch.empty_like(x)
        dist.all_to_all_single(want, x)
        if not torch.equal(alg.pairwise_all_to_all(x, g), want):
            failures.append(f"pairwise_all_to_all {nodes}x{g}")
    return failures


@pytest.fixture(scope="module", params=sorted(SHAPES), ids=lambda p: f"p{p}")
def cluster(request):
    with cl.Cluster(world_size=request.param, timeout=240) as c:
        yield c


def test_node_algorithms_match_the_builtins(cluster):
    for rank, failures in enumerate(cluster.run(check_against_builtins, SHAPES[cluster.world_size])):
        assert failures == [], f"rank {rank}: {failures[:10]}"


def in_small_segments(shapes):
    """Many 16-byte segments per chunk on the sub-rings (uneven last segments), both schedules."""
    p, r = dist.get_world_size(), dist.get_rank()
    failures = []
    for grouped in (None, True):
        p2p.GROUP_P2P, p2p.SEGMENT_BYTES = grouped, 16
        try:
            for nodes, g in shapes:
                x = data(r, 1003, torch.float32, 5)
                ref = reference(x, "sum")
                for name, fn in NODE_ALL_REDUCES.items():
                    t = x.clone()
                    compare(f"{name} {nodes}x{g} grouped={grouped} segments of 16 B", fn(t, g), x, "sum", ref, failures)
        finally:
            p2p.GROUP_P2P, p2p.SEGMENT_BYTES = None, 1 << 21
    return failures


def test_node_algorithms_in_many_segments(cluster):
    for rank, failures in enumerate(cluster.run(in_small_segments, SHAPES[cluster.world_size])):
        assert failures == [], f"rank {rank}: {failures[:10]}"


def traced(nodes, g, numel, dtype):
    """-> {algorithm: (bytes sent intra, inter, [(src, dst, inter_node) of every message])} on this rank."""
    out = {}
    for name, fn in NODE_ALL_REDUCES.items():
        tr = alg.Trace()
        fn(torch.ones(numel, dtype=dtype), g, trace=tr)
        out[name] = tr
    tr = alg.Trace()
    p = dist.get_world_size()
    alg.pairwise_all_to_all(torch.ones(numel // p * p, dtype=dtype), g, trace=tr)
    out["pairwise"] = tr
    return {name: (sum(e.nbytes for e in tr.events if not e.inter_node),
                   sum(e.nbytes for e in tr.events if e.inter_node),
                   [(e.src, e.dst, e.inter_node) for e in tr.events]) for name, tr in out.items()}


@pytest.mark.parametrize("numel, dtype", [(1003, torch.float16), (96, torch.float32)])
def test_bytes_per_rank_intra_and_inter_equal_the_topology_formula(cluster, numel, dtype):
    p = cluster.world_size
    itemsize = torch.tensor([], dtype=dtype).element_size()
    for nodes, g in SHAPES[p]:
        shape = topo.Topology(nodes, g, "nvlink4", "ib_ndr", g)
        got = cluster.run(traced, nodes, g, numel, dtype)
        for name, op in [("hierarchical", "all_reduce"), ("multi_ring", "all_reduce"), ("pairwise", "all_to_all")]:
            n = (numel // p * p if op == "all_to_all" else numel) * itemsize
            want = topo.bytes_by_rank(op, n, shape, name, itemsize=itemsize)
            assert [got[r][name][:2] for r in range(p)] == [(w["intra"], w["inter"]) for w in want], \
                f"{name} {nodes}x{g}"
            for src, dst, inter in (m for r in range(p) for m in got[r][name][2]):
                assert inter == (src // g != dst // g)
                if name == "hierarchical" and inter:
                    assert src % g == dst % g, "off-node hierarchical traffic stays on its rail"


def bad_inputs():
    r = dist.get_rank()
    cases = {
        "multiple": lambda: alg.hierarchical_all_reduce(torch.ones(4), 3),
        "zero": lambda: alg.multi_ring_all_reduce(torch.ones(4), 0),
        "numpy": lambda: alg.hierarchical_all_reduce(torch.ones(4), __import__("numpy").int64(2)),
        "blocks": lambda: alg.pairwise_all_to_all(torch.ones(5)),
        "differ": lambda: alg.hierarchical_all_reduce(torch.ones(4), 2 if r == 0 else 4),
        "op": lambda: alg.multi_ring_all_reduce(torch.ones(4), 2, op="prod"),
    }
    return errors_of(cases)


def test_bad_inputs_are_named(cluster):
    if cluster.world_size != 4:
        pytest.skip("one world size is enough")
    errors = cluster.run(bad_inputs)
    for e in errors:
        assert "world size (4) must be a multiple of gpus_per_node (3)" in e["multiple"]
        assert "gpus_per_node must be an int >= 1" in e["zero"]
        assert e["numpy"] is None
        assert "t.shape[0] must be a multiple of the world size (4)" in e["blocks"]
        assert "different gpus_per_node" in e["differ"]
        assert "op must be one of" in e["op"]
