"""commlib.algorithms against torch.distributed's built-ins, for world sizes 1-5 and 8.

The comparisons run inside the ranks (one run() per world size covers every algorithm, dtype, op
and size) and come back as a list of mismatches, which must be empty. Integers must match exactly;
floats must lie within the rounding bound of a p-term sum in their dtype.
"""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

import commlib as cl
from commlib import algorithms as alg
from commlib.algorithms import p2p
from commlib import cost

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WORLD_SIZES = [1, 2, 3, 4, 5, 8]
ALL_REDUCES = {
    "ring": alg.ring_all_reduce,
    "naive": alg.naive_all_reduce,
    "tree": alg.tree_all_reduce,
    "recursive_doubling": alg.recursive_doubling_all_reduce,
    "rabenseifner": alg.rabenseifner_all_reduce,
}
BUILTIN_OP = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def sizes_for(p):
    return sorted({0, 1, max(p - 1, 1), p + 1, 1003})


def matrix(p):
    """Every dtype and op up to p = 5; at p = 8 (slow on 2 cores) one float, one low-precision, one int."""
    dtypes = alg.DTYPES if p <= 5 else (torch.float32, torch.bfloat16, torch.int64)
    return [(d, op) for d in dtypes for op in alg.REDUCE_OPS if not (op == "avg" and not d.is_floating_point)]


def data(rank, numel, dtype, case):
    g = torch.Generator().manual_seed(7919 * rank + case)
    if dtype.is_floating_point:
        return torch.randn(numel, generator=g, dtype=torch.float64).to(dtype)
    return torch.randint(-1000, 1000, (numel,), generator=g, dtype=torch.int64).to(dtype)


def reference(x, op):
    """The built-in's answer, and the float64 exact answer with a bound on rounding error."""
    p = dist.get_world_size()
    builtin = x.clone()
    dist.all_reduce(builtin, op=BUILTIN_OP["sum" if op == "avg" else op])
    if op == "avg":
        builtin = builtin / p
    exact = x.to(torch.float64, copy=True)  # .double() would alias a float64 x
    dist.all_reduce(exact, op=BUILTIN_OP["sum" if op == "avg" else op])
    if op == "avg":
        exact /= p
    mag = x.double().abs()
    dist.all_reduce(mag)
    eps = torch.finfo(x.dtype).eps if x.dtype.is_floating_point else 0.0
    bound = (p + 1) * eps * mag + (torch.finfo(x.dtype).tiny if x.dtype.is_floating_point else 0.0)
    return builtin, exact, bound


def compare(name, got, x, op, ref, failures):
    builtin, exact, bound = ref
    if got.dtype != x.dtype or got.shape != x.shape:
        failures.append(f"{name}: dtype/shape {got.dtype}{tuple(got.shape)} != {x.dtype}{tuple(x.shape)}")
    elif not x.dtype.is_floating_point or op in ("max", "min"):
        if not torch.equal(got, builtin):
            failures.append(f"{name}: not exactly equal to the built-in")
    elif not torch.all((got.double() - exact).abs() <= bound):
        worst = ((got.double() - exact).abs() - bound).max().item()
        failures.append(f"{name}: off the exact sum by more than the rounding bound (excess {worst:.3g})")


def check_everything(ring_only=False):
    """Every algorithm, dtype, op and size against the built-ins. ring_only: the ring's three collectives alone
    (the only code p2p.GROUP_P2P changes: ring.py's _rings_pass_), every case as for all."""
    p, r = dist.get_world_size(), dist.get_rank()
    failures, case = [], 0
    results = {}  # to check afterwards that all ranks end with bitwise-equal results
    all_reduces = {"ring": ALL_REDUCES["ring"]} if ring_only else ALL_REDUCES
    for dtype, op in matrix(p):
        for numel in sizes_for(p):
            case += 1
            x = data(r, numel, dtype, case)
            ref = reference(x, op)
            for name, fn in all_reduces.items():
                t = x.clone()
                out = fn(t, op=op)
                label = f"{name}_all_reduce {dtype} {op} numel={numel}"
                if out.data_ptr() != t.data_ptr():
                    failures.append(f"{label}: not in place")
                compare(label, t, x, op, ref, failures)
                results[label] = t
            # reduce-scatter: this rank's shard of the ring all-reduce just checked (same input, same result)
            shard = alg.ring_reduce_scatter(x, op=op)
            full = results[f"ring_all_reduce {dtype} {op} numel={numel}"]
            off = sum(alg.shard_sizes(numel, p)[:r])
            want = full[off:off + alg.shard_sizes(numel, p)[r]]
            if not torch.equal(shard, want) or not torch.equal(x, data(r, numel, dtype, case)):
                failures.append(f"ring_reduce_scatter {dtype} {op} numel={numel}: wrong shard or input changed")
            # tree reduce to every root
            for dst in range(0 if ring_only else p):
                t = x.clone()
                alg.tree_reduce(t, dst=dst, op=op)
                if r == dst:
                    compare(f"tree_reduce dst={dst} {dtype} {op} numel={numel}", t, x, op, ref, failures)
    for dtype in alg.DTYPES if not ring_only else ():
        for numel in sizes_for(p):
            case += 1
            x = data(r, numel, dtype, case)
            for src in range(p):
                mine, builtin = x.clone(), x.clone()
                alg.tree_broadcast(mine, src=src)
                dist.broadcast(builtin, src=src)
                if not torch.equal(mine, builtin):
                    failures.append(f"tree_broadcast src={src} {dtype} numel={numel}")
    # all-gather: even shards vs the built-in, uneven and 2-D shards vs the known concatenation
    for dtype in alg.DTYPES:
        case += 1
        x = data(r, 6, dtype, case)
        pieces = [torch.empty_like(x) for _ in range(p)]
        dist.all_gather(pieces, x)
        if not torch.equal(alg.ring_all_gather(x), torch.cat(pieces)):
            failures.append(f"ring_all_gather even {dtype}")
        uneven = [data(q, q % 3 + (q == 1) * 5, dtype, case) for q in range(p)]
        if not torch.equal(alg.ring_all_gather(uneven[r]), torch.cat(uneven)):
            failures.append(f"ring_all_gather uneven {dtype}")
        rows = [data(q, 3 * (q + 1), dtype, case).view(q + 1, 3) for q in range(p)]
        if not torch.equal(alg.ring_all_gather(rows[r]), torch.cat(rows)):
            failures.append(f"ring_all_gather 2-D {dtype}")
    # multi-dimensional and non-contiguous inputs stay in place
    t = torch.arange(24.0).view(4, 6).t() * (r + 1)
    alg.ring_all_reduce(t)
    if not torch.equal(t, torch.arange(24.0).view(4, 6).t() * (p * (p + 1) / 2)):
        failures.append("ring_all_reduce on a non-contiguous 2-D tensor")
    return failures, {k: v for k, v in results.items() if "numel=1003" in k}


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda p: f"p{p}")
def cluster(request):
    with cl.Cluster(world_size=request.param, timeout=240) as c:
        yield c


def test_every_algorithm_matches_the_builtin(cluster):
    out = cluster.run(check_everything)
    for rank, (failures, _) in enumerate(out):
        assert failures == [], f"rank {rank}: {failures[:10]}"
    results = [res for _, res in out]
    for label, t in results[0].items():
        for rank in range(1, cluster.world_size):
            assert torch.equal(t.view(torch.uint8), results[rank][label].view(torch.uint8)), \
                f"{label}: rank {rank} differs bitwise from rank 0"


def check_everything_grouped():
    """The schedule NCCL gets (each ring step's receives and sends posted as one group), run over Gloo: the ring's
    collectives, every case (the other algorithms do not read GROUP_P2P: check_everything covers them once)."""
    p2p.GROUP_P2P = True
    try:
        return check_everything(ring_only=True)
    finally:
        p2p.GROUP_P2P = None


def test_grouped_schedule_matches_the_builtin_too(cluster):
    if cluster.world_size == 8:
        pytest.skip("p = 8 takes a minute on 2 cores; p = 1-5 cover the same code")
    out = cluster.run(check_everything_grouped)
    for rank, (failures, _) in enumerate(out):
        assert failures == [], f"rank {rank}: {failures[:10]}"


def ring_in_small_segments(grouped):
    """The ring with 16-byte segments (4 float32): many segments per chunk, uneven last segments."""
    p, r = dist.get_world_size(), dist.get_rank()
    p2p.GROUP_P2P = grouped
    try:
        failures = []
        for numel in (1003, 4 * p, 1):
            x = data(r, numel, torch.float32, numel)
            for op in ("sum", "max"):
                ref = reference(x, op)
                t, tr = x.clone(), alg.Trace()
                alg.ring_all_reduce(t, op=op, trace=tr, segment_bytes=16)
                compare(f"ring_all_reduce {op} numel={numel} segments of 16 B", t, x, op, ref, failures)
                sizes = alg.shard_sizes(numel, p)
                want = sum(-(-sizes[c] // 4) for c in range(p) if c != r) + sum(-(-sizes[c] // 4) for c in range(p)
                                                                              if c != (r + 1) % p)
                if len(tr.events) != want or any(e.numel > 4 for e in tr.events):
                    failures.append(f"numel={numel}: {len(tr.events)} messages, want {want} of <= 4 elements")
            sizes = alg.shard_sizes(numel, p)
            starts = [sum(sizes[:q]) for q in range(p)]
            pieces = [data(q, numel, torch.float32, numel)[starts[q]:starts[q] + sizes[q]] for q in range(p)]
            if not torch.equal(alg.ring_all_gather(pieces[r].clone(), segment_bytes=16), torch.cat(pieces)):
                failures.append(f"ring_all_gather numel={numel} segments of 16 B")
        return failures
    finally:
        p2p.GROUP_P2P = None


@pytest.mark.parametrize("grouped", [None, True], ids=["pipelined", "grouped"])
def test_ring_in_many_segments_matches_the_builtin(cluster, grouped):
    for rank, failures in enumerate(cluster.run(ring_in_small_segments, grouped)):
        assert failures == [], f"rank {rank}: {failures[:10]}"


def traced_bytes(numel, dtype):
    p = dist.get_world_size()
    out = {}
    for name, fn in ALL_REDUCES.items():
        tr = alg.Trace()
        fn(torch.ones(numel, dtype=dtype), trace=tr)
        out[("all_reduce", name)] = tr.bytes_sent
    for op, fn in [("reduce_scatter", alg.ring_reduce_scatter)]:
        tr = alg.Trace()
        fn(torch.ones(numel, dtype=dtype), trace=tr)
        out[(op, "ring")] = tr.bytes_sent
    tr = alg.Trace()
    sizes = alg.shard_sizes(numel, p)
    alg.ring_all_gather(torch.ones(sizes[dist.get_rank()], dtype=dtype), trace=tr)
    out[("all_gather", "ring")] = tr.bytes_sent
    for op, fn in [("broadcast", alg.tree_broadcast), ("reduce", alg.tree_reduce)]:
        tr = alg.Trace()
        fn(torch.ones(numel, dtype=dtype), 0, trace=tr)
        out[(op, "tree")] = tr.bytes_sent
    return out


@pytest.mark.parametrize("numel, dtype", [(1000, torch.float32), (1003, torch.float16), (3, torch.int64)])
def test_bytes_sent_equal_the_cost_model(cluster, numel, dtype):
    p = cluster.world_size
    itemsize = torch.tensor([], dtype=dtype).element_size()
    measured = cluster.run(traced_bytes, numel, dtype)
    for (op, algorithm) in measured[0]:
        want = cost.bytes_sent_by_rank(op, numel * itemsize, p, algorithm, itemsize=itemsize)
        got = [m[(op, algorithm)] for m in measured]
        assert got == want, f"{op}/{algorithm} p={p} numel={numel}: measured {got}, model {want}"
    if numel % p == 0:  # the closed forms: ring all-reduce 2(p-1)/p n, busiest rank for the others
        for (op, algorithm) in measured[0]:
            busiest = max(m[(op, algorithm)] for m in measured)
            assert busiest == pytest.approx(cost.bytes_sent_per_rank(op, numel * itemsize, p, algorithm))


def ring_trace(numel, grouped=None):
    p2p.GROUP_P2P = grouped
    try:
        tr = alg.Trace()
        alg.ring_all_reduce(torch.ones(numel), trace=tr)
        return tr.events
    finally:
        p2p.GROUP_P2P = None


@pytest.mark.parametrize("grouped", [None, True], ids=["pipelined", "grouped"])
def test_ring_trace_is_the_textbook_schedule(cluster, grouped):
    p = cluster.world_size
    events = cluster.run(ring_trace, 10 * p, grouped)
    for r, evs in enumerate(events):
        assert [e.step for e in evs] == list(range(2 * (p - 1)))
        assert all(e.src == r and e.dst == (r + 1) % p for e in evs)
        assert [e.chunk for e in evs] == [(r - s - 1) % p for s in range(p - 1)] + [(r - s) % p for s in range(p - 1)]
        assert [e.phase for e in evs] == ["reduce_scatter"] * (p - 1) + ["all_gather"] * (p - 1)
        assert all(e.numel == 10 and e.nbytes == 40 for e in evs)


def mismatched_numel():
    alg.ring_all_reduce(torch.ones(10 + (dist.get_rank() == 1)))


def mismatched_dtype():
    alg.tree_broadcast(torch.ones(4, dtype=torch.float64 if dist.get_rank() == 0 else torch.float32))


def mismatched_op():
    alg.rabenseifner_all_reduce(torch.ones(4), op="max" if dist.get_rank() == 0 else "sum")


@pytest.mark.parametrize("fn, words", [(mismatched_numel, "different numel"),
                                       (mismatched_dtype, "different dtype"),
                                       (mismatched_op, "different op")])
def test_mismatched_ranks_raise_a_clear_error_not_a_hang(fn, words, cluster3):
    with pytest.raises(cl.RankError) as info:
        cluster3.run(fn)
    assert not isinstance(info.value, cl.ClusterTimeout)
    assert words in str(info.value) and "ValueError" in str(info.value)


@pytest.fixture(scope="module")
def cluster3():
    """One 3-rank cluster for the three mismatches: each RankError restarts its ranks for the next (not 3 starts)."""
    with cl.Cluster(world_size=3, timeout=20) as c:
        yield c


def bad_inputs():
    cases = {
        "op": lambda: alg.ring_all_reduce(torch.ones(3), op="prod"),
        "avg_int": lambda: alg.ring_all_reduce(torch.ones(3, dtype=torch.int32), op="avg"),
        "dtype": lambda: alg.ring_all_reduce(torch.ones(3, dtype=torch.complex64)),
        "tensor": lambda: alg.ring_all_reduce([1.0, 2.0]),
        "src": lambda: alg.tree_broadcast(torch.ones(3), src=5),
        "dst": lambda: alg.tree_reduce(torch.ones(3), dst=-1),
    }
    return errors_of(cases)


def errors_of(cases: dict, expected=(ValueError, TypeError)) -> dict:
    """Call each case -> {name: 'ErrorType: message', or None if it raised nothing}."""
    errors = {}
    for name, call in cases.items():
        try:
            call()
            errors[name] = None
        except expected as e:
            errors[name] = f"{type(e).__name__}: {e}"
    return errors


def test_bad_inputs_are_named(cluster4):
    errors = cluster4.run(bad_inputs)[0]
    assert "ValueError" in errors["op"] and "'sum', 'max', 'min', 'avg'" in errors["op"]
    assert "ValueError" in errors["avg_int"] and "floating-point" in errors["avg_int"]
    assert "ValueError" in errors["dtype"] and "complex64" in errors["dtype"]
    assert "TypeError" in errors["tensor"] and "torch.Tensor" in errors["tensor"]
    assert "ValueError" in errors["src"] and "[0, 3]" in errors["src"]
    assert "ValueError" in errors["dst"] and "dst" in errors["dst"]


def test_replay_of_a_real_ring_trace(cluster4):
    p = cluster4.world_size
    states = alg.replay(cluster4.run(ring_trace, 3 * p), p)
    assert len(states) == 2 * (p - 1) + 1
    assert all(states[0][r][c] == {r} for r in range(p) for c in range(p))
    full = frozenset(range(p))
    # after the reduce-scatter, rank r holds the whole sum of chunk r (and only of that chunk)
    assert all((states[p - 1][r][c] == full) == (c == r) for r in range(p) for c in range(p))
    assert all(b == full for row in states[-1] for b in row)
