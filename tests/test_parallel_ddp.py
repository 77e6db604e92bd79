"""commlib.parallel.ddp: BucketedDDP against torch DDP, and its CUDA clock's timeline."""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

import commlib as cl
from commlib.parallel import ddp

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def grads_both_ways(bucket_cap_mb, use_overlap, steps=3):
    torch.manual_seed(1000 + dist.get_rank())  # different data and different initial weights per rank
    data = [(torch.randn(32, 64), torch.randint(0, 10, (32,))) for _ in range(steps)]
    ours = ddp.BucketedDDP(make_model(), bucket_cap_mb=bucket_cap_mb, overlap=use_overlap)
    kw = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
    theirs = torch.nn.parallel.DistributedDataParallel(make_model(), **kw)
    opt_a = torch.optim.SGD(ours.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(theirs.parameters(), lr=0.1)
    out, first_layout = [], None
    for x, y in data:
        for model, opt in ((ours, opt_a), (theirs, opt_b)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        first_layout = first_layout or ([list(b) for b in ours.buckets], len(ours.timeline.events))
        out.append(([p.grad.clone() for p in ours.parameters()], [p.grad.clone() for p in theirs.parameters()]))
    torch_buckets = theirs._get_ddp_logging_data().get("rebuilt_per_bucket_param_indices")
    torch_buckets = [[int(i) for i in b.split()] for b in torch_buckets.split(",")]
    tl = ours.timeline
    return out, first_layout, ours.buckets, torch_buckets, [(e.kind, e.start, e.end) for e in tl.events]


@pytest.fixture(scope="module")
def cluster2():
    """One 2-rank cluster for the module's 2-rank tests. A test whose ranks raise leaves none behind: the Cluster
    restarts its ranks at the next run()."""
    with cl.Cluster(world_size=2, timeout=120) as c:
        yield c


@pytest.fixture
def cluster(request, cluster2):
    """A cluster of request.param ranks: the module's for 2, a fresh one otherwise."""
    if request.param == 2:
        yield cluster2
        return
    with cl.Cluster(world_size=request.param, timeout=120) as c:
        yield c


@pytest.mark.parametrize("cluster", [2, 3], ids=["world_size2", "world_size3"], indirect=True)
def test_bucketed_ddp_gradients_and_buckets_equal_torch_ddps(cluster):
    world_size, c = cluster.world_size, cluster
    for cap, use_overlap in [(0.25, True), (None, True), (0.25, False)]:
        results = c.run(grads_both_ways, cap, use_overlap)
        for rank, (steps, first, buckets, torch_buckets, events) in enumerate(results):
            for ours, theirs in steps:
                for a, b in zip(ours, theirs):
                    if world_size == 2:  # a + b: any summation order gives the same bits
                        assert torch.equal(a, b), (cap, use_overlap, rank)
                    else:
                        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7), (cap, use_overlap, rank)
            # iteration 1: one bucket of everything (reverse order), one all-reduce
            assert first == ([list(range(7, -1, -1))], 2)
            # then rebuilt in gradient-ready order, exactly torch's rebuilt buckets
            assert buckets == torch_buckets, (cap, buckets, torch_buckets)
            assert len(events) == 2 * len(buckets) and all(end >= start for _, start, end in events)
        for rank_steps, *_ in results[1:]:  # every rank ends with the same averaged gradients
            assert all(torch.equal(a, b) for a, b in zip(rank_steps[-1][0], results[0][0][-1][0]))


def overlap_shows_in_the_timeline():
    model = ddp.BucketedDDP(make_model(), bucket_cap_mb=0.1, first_bucket_mb=0.05)
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    for _ in range(2):  # the second iteration runs with the rebuilt buckets
        torch.nn.functional.cross_entropy(model(x), y).backward()
    tl = model.timeline
    backward_end = max(e.end for e in tl.events if e.kind == "compute")
    first_comm = min(e.start for e in tl.events if e.kind == "comm")
    return len(model.buckets), first_comm < backward_end


def test_overlap_starts_communication_during_backward(cluster2):
    n_buckets, early = cluster2.run(overlap_shows_in_the_timeline)[0]
    assert n_buckets >= 3 and early


def unused_parameter():
    class TwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.a(x)

    model = ddp.BucketedDDP(TwoHeads(), first_bucket_mb=1e-6, bucket_cap_mb=1e-6)
    model(torch.randn(2, 4)).sum().backward()


def test_unused_parameters_give_a_clear_error(cluster2):
    with pytest.raises(cl.RankError, match=r"parameters \[2, 3\] \(indices.*got no gradient"):
        cluster2.run(unused_parameter)  # head b's weight and bias, and only those; the next run() restarts the ranks


def test_bucketed_ddp_needs_a_module_and_a_process_group():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        ddp.BucketedDDP(lambda x: x)
    with pytest.raises(RuntimeError, match="inside a rank"):
        ddp.BucketedDDP(torch.nn.Linear(2, 2))


class FakeCudaEvent:
    """Stands in for torch.cuda.Event: a GPU time in seconds; elapsed_time in ms, as CUDA's."""

    def __init__(self, t):
        self.t, self.synced = t, False

    def synchronize(self):
        self.synced = True

    def elapsed_time(self, other):
        assert self.synced and other.synced, "elapsed_time before both events completed"
        return (other.t - self.t) * 1e3


def test_cuda_timeline_reads_the_events_not_the_host_clock():
    """BucketedDDP's CUDA clock: bucket b computes from the previous ready event to its own; its all-reduce
    runs between the communication stream's start and done events (already in stream order)."""
    ev = FakeCudaEvent
    t0 = ev(10.0)
    ready = [ev(10.2), ev(10.5)]
    start, done = [ev(10.2), ev(10.6)], [ev(10.4), ev(10.9)]
    tl = ddp._CudaClock.timeline(t0, ready, start, done, None)
    got = [(e.kind, e.bucket, round(e.start, 9), round(e.end, 9)) for e in tl.events]
    assert got == [("compute", 0, 0.0, 0.2), ("comm", 0, 0.2, 0.4), ("compute", 1, 0.2, 0.5), ("comm", 1, 0.6, 0.9)]
    assert tl.total_s == pytest.approx(0.9) and tl.exposed_comm_s == pytest.approx(0.4)
