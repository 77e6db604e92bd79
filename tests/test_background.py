"""commlib.algorithms.background: commlib's collectives as async work on a background thread, checked against
torch.distributed's all_reduce and against BucketedDDP without it; and what a recorded job's trace then holds
(commlib:* calls read by traces.py, with their queue and wait marks); a dead or hung peer is named, not a hang."""

import os
import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

import commlib as cl
from conftest import timeout_of
from commlib.profiling import diagnosis as dg
from commlib.profiling.replay import graph
from commlib.profiling import traces as tr

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster():
    with cl.Cluster(world_size=2, timeout=120) as c:
        yield c


def sums_like_torch(algorithm, gpus_per_node=None):
    from commlib.algorithms.background import Background

    torch.manual_seed(dist.get_rank())
    xs = [torch.randn(n) for n in (1, 1000, 4097)]
    want = [x.clone() for x in xs]
    for w in want:
        dist.all_reduce(w)
    with Background(algorithm, gpus_per_node) as bg:
        futs = [bg.all_reduce(x) for x in xs]   # queued at once: they run in issue order
        got = [bg.wait(f) for f in futs]
    return max(float((g - w).abs().max()) for g, w in zip(got, want)), [s for s, *_ in bg.done]


@pytest.mark.parametrize("algorithm, gpus_per_node", [("ring", None), ("hierarchical", 1), ("hierarchical", 2)])
def test_background_all_reduces_equal_torchs_in_issue_order(cluster, algorithm, gpus_per_node):
    for err, order in cluster.run(sums_like_torch, algorithm, gpus_per_node):   # 2 nodes of 1 GPU, 1 node of 2
        assert err < 1e-4 and order == [0, 1, 2]


def ddp_grads(hooked):
    from commlib import overlap
    from commlib.algorithms.background import Background, average_hook

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    model = overlap.BucketedDDP(net, bucket_cap_mb=0.01)
    bg = Background("ring")
    if hooked:
        model.register_comm_hook(bg, average_hook)
    x = torch.randn(8, 64) * (1 + dist.get_rank())
    for _ in range(2):   # the second step runs DDP's rebuilt buckets
        for p in model.parameters():
            p.grad = None
        model(x).square().mean().backward()
    bg.close()
    return [p.grad.clone() for p in model.parameters()], len(model.buckets)


def test_bucketed_ddp_through_the_background_ring_gives_the_same_gradients(cluster):
    plain, hooked = cluster.run(ddp_grads, False), cluster.run(ddp_grads, True)
    assert hooked[0][1] > 1   # several buckets, so several all-reduces in flight
    for (a, _), (b, _) in zip(plain, hooked):
        assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(a, b))


def test_bad_arguments_are_refused_by_name(cluster):
    def bad():
        from commlib.algorithms.background import Background

        out = []
        for kw in ({"algorithm": "nope"}, {"algorithm": "hierarchical"}):
            try:
                Background(**kw)
            except ValueError as e:
                out.append(str(e))
        return out

    msgs = cluster.run(bad)[0]
    assert "algorithm must be one of" in msgs[0] and "gpus_per_node" in msgs[1]


def test_a_recorded_jobs_trace_holds_its_background_calls_and_their_marks(cluster, tmp_path):
    from commlib.profiling.jobs import emulated_job as ej

    out = cluster.run(ej.train, str(tmp_path), bandwidth=400e6, latency=1e-4, layers=4, width=128, layer_s=5e-4,
                      bucket_mb=0.05, steps=1, recorded=1)   # a bucket per layer
    ranks = tr.load(str(tmp_path))
    nbytes = 129 * 128 * 4   # one Linear(128, 128): weight and bias, float32
    for r in ranks:
        assert r.backend == "gloo" and len(r.calls) == 4 and {c.op for c in r.calls} == {"all_reduce"}
        assert [c.bytes for c in r.calls] == [nbytes] * 4 and {c.group_size for c in r.calls} == {2}
        assert {c.algorithm for c in r.calls} == {"ring"}
        assert sorted(r.issued) == [0, 1, 2, 3] and sorted(r.waits) == [0, 1, 2, 3]
        for i, c in enumerate(r.calls):   # queued before it ran; the wait for it ended after it
            assert r.issued[i] <= c.start_us and r.waits[i][1] >= c.end_us - 1.0
        assert len(r.compute) > 0
    report = dg.diagnose(str(tmp_path))
    assert len(report["calls"]) == 8 and not report["notes"]
    replayed = graph.replay(graph.build(ranks))   # the identity replay of a live job, to the microsecond
    assert [replayed["ranks"][r.rank]["step_us"] for r in ranks] == pytest.approx([r.wall[1] - r.wall[0] for r in ranks])
    assert sum(len(g.waits) for g in graph.build(ranks).ranks) == 8   # the stated waits, none inferred beside them
    assert os.path.basename(out[0]["path"]) == "rank0.json"


def dies_or_waits():
    from commlib.algorithms.background import Background

    bg = Background("ring")
    if dist.get_rank() == 1:
        os._exit(3)   # before it issues the all-reduce rank 0 waits on
    with bg:
        bg.wait(bg.all_reduce(torch.ones(1000)))


def one_rank_never_issues():
    import threading

    from commlib.algorithms.background import Background

    if dist.get_rank() == 1:
        threading.Event().wait()   # blocked for good (a hung peer), never issuing the all-reduce
    with Background("ring") as bg:
        bg.wait(bg.all_reduce(torch.ones(1000)))


def closes():
    import threading

    from commlib.algorithms import background

    kept, background.KEPT = background.KEPT, 2
    try:
        with background.Background("ring") as bg:
            total = [float(bg.wait(bg.all_reduce(torch.ones(10)))[0]) for _ in range(3)]
    finally:
        background.KEPT = kept
    alive = [t for t in threading.enumerate() if t.name == "commlib-background"]
    return total, len(alive), bg in background.LIVE, [seq for seq, *_ in bg.done]


def test_a_dead_peer_is_named_and_the_thread_ends_with_the_job_remembering_little(cluster):
    with pytest.raises(cl.RankDied) as e:   # not a hang: the Cluster names the rank that died
        cluster.run(dies_or_waits)
    assert e.value.rank == 1
    # the restarted ranks: summed, the thread joined and forgotten, only the last KEPT works remembered
    assert cluster.run(closes) == [([2.0] * 3, 0, False, [1, 2])] * 2


def test_a_peer_that_never_issues_is_named_by_the_clusters_timeout(cluster):
    with timeout_of(cluster, 2.0), pytest.raises(cl.ClusterTimeout) as e:   # not Gloo's 30 minutes
        cluster.run(one_rank_never_issues)
    assert "rank 1 never entered" in str(e.value)   # rank 0's background thread waits in the ring for it
    assert cluster.run(dist.get_rank) == [0, 1]


def test_the_host_clock_is_placed_by_the_marks_ends_never_late():
    """Each commlib:clock mark's end is stamped just before the host clock is read after it: a lower bound of the
    offset, the largest the tightest. A mark whose start came late (the profiler's entry work, a preemption) no
    longer shifts background work past the wait that saw it finish (issue 40's race, 318 us under load)."""
    from commlib.profiling.jobs.recording import _trace_offset

    true = 5_000_000.0   # trace us = host s * 1e6 + true
    after = [1.0, 1.001, 1.002]
    gaps = [40.0, 3.0, 900.0]   # us between each mark's end and the host's read after it (a preemption: 900)
    marks = [{"ts": t * 1e6 + true - g - 150.0, "dur": 150.0} for t, g in zip(after, gaps)]
    offset = _trace_offset(marks, after)
    assert offset == pytest.approx(true - 3.0) and offset <= true


def test_the_emulated_jobs_recorded_steps_are_marked_and_regrouped_per_step(cluster, tmp_path):
    """Its recorded steps share one ProfilerStep: each is marked commlib:step, and whatif splits at the marks. Cut
    at waits instead, one rank's steps came out 4 and the other's 5, and chapter 9's bucket what-if was refused."""
    from commlib.profiling.jobs import emulated_job as ej
    from commlib.profiling.replay import whatif

    cluster.run(ej.train, str(tmp_path), bandwidth=400e6, latency=1e-4, layers=4, width=128, layer_s=5e-4,
                bucket_mb=0.05, steps=1, recorded=3)
    assert [len(r.steps) for r in tr.load(str(tmp_path))] == [3, 3]
    report = whatif.whatif(str(tmp_path), [whatif.Scenario(topology="dgx_h100", bucket_mb=0.1)], steps=3)
    said = report["scenarios"][-1]["assumptions"][0]
    assert report["steps"] == 3 and "regrouped into 3 bucket(s) of 0.1 MiB per step" in said, said
