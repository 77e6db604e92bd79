"""commlib.overlap: hand-computed timelines, DDP's bucketing, and BucketedDDP against torch DDP."""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

import commlib as cl
from commlib import cost, overlap

cloudpickle.register_pickle_by_value(sys.modules[__name__])
MiB = 2**20


def test_without_overlap_the_step_is_the_sum():
    tl = overlap.simulate([0.01, 0.02, 0.03], [0.005, 0.005, 0.01], overlap=False)
    assert tl.total_s == pytest.approx(0.06 + 0.02)
    assert tl.exposed_comm_s == pytest.approx(0.02) and tl.overlap_fraction == 0.0
    comm = [e for e in tl.events if e.kind == "comm"]
    assert comm[0].start == pytest.approx(0.06) and comm[-1].end == pytest.approx(0.08)


def test_comm_shorter_than_compute_leaves_only_the_last_bucket_exposed():
    tl = overlap.simulate([0.010] * 3, [0.005] * 3)
    comm = [x for e in tl.events if e.kind == "comm" for x in (e.start, e.end)]
    assert comm == pytest.approx([0.01, 0.015, 0.02, 0.025, 0.03, 0.035])
    assert tl.total_s == pytest.approx(0.030 + 0.005)
    assert tl.exposed_comm_s == pytest.approx(0.005)
    assert tl.overlap_fraction == pytest.approx(10 / 15)


def test_comm_bound_queue_on_one_stream():
    tl = overlap.simulate([0.001] * 3, [0.010] * 3)
    assert tl.total_s == pytest.approx(0.001 + 0.030)  # the stream never idles after the first bucket
    assert tl.exposed_comm_s == pytest.approx(0.031 - 0.003)


def test_the_classic_100ms_compute_80ms_comm():
    assert overlap.simulate([0.100], [0.080]).total_s == pytest.approx(0.180)  # one bucket: nothing to overlap
    tl = overlap.simulate([0.010] * 10, [0.008] * 10)
    assert tl.total_s == pytest.approx(0.108)  # compute + the last bucket's 8 ms
    assert tl.total_s != pytest.approx(max(0.100, 0.080))  # "max(compute, comm)" forgets the last bucket


def test_buckets_like_torch_ddp():
    # forward order: 6 layers of 3 MiB; backward meets the last first. With the default cap (None: 25 MiB) the
    # first bucket closes at >= 1 MiB; an explicit cap applies to the first bucket too (torch 2.13).
    assert overlap.make_buckets([3 * MiB] * 6) == [[5], [4, 3, 2, 1, 0]]
    assert overlap.make_buckets([3 * MiB] * 6, bucket_cap_mb=5) == [[5, 4], [3, 2], [1, 0]]
    assert overlap.make_buckets([3 * MiB] * 6, bucket_cap_mb=25) == [[5, 4, 3, 2, 1, 0]]
    assert overlap.make_buckets([3 * MiB] * 6, bucket_cap_mb=5, first_bucket_mb=1) == [[5], [4, 3], [2, 1], [0]]
    # rebuilt in the order the gradients became ready (here: a model whose layer 2 finishes first)
    assert overlap.make_buckets([3 * MiB] * 6, bucket_cap_mb=5, order=[2, 5, 4, 3, 1, 0]) == [[2, 5], [4, 3], [1, 0]]
    compute, comm, sizes = overlap.buckets_from_layers([3 * MiB] * 6, [0.01] * 6, 8, "nvlink4", bucket_cap_mb=5)
    assert sizes == [6 * MiB] * 3 and compute == pytest.approx([0.02] * 3)
    assert comm[1] == pytest.approx(cost.collective_time("all_reduce", 6 * MiB, 8, "nvlink4"))


@pytest.mark.parametrize("call, words", [
    (lambda: overlap.simulate([], []), "at least one bucket"),
    (lambda: overlap.simulate([0.1], [0.1, 0.2]), "one entry per bucket"),
    (lambda: overlap.simulate([-0.1], [0.1]), "seconds >= 0"),
    (lambda: overlap.make_buckets([1], bucket_cap_mb=0), "bucket_cap_mb"),
    (lambda: overlap.make_buckets([1], bucket_cap_mb=float("nan")), "bucket_cap_mb"),
    (lambda: overlap.make_buckets([1, 2], order=[0, 0]), "order must list every parameter"),
    (lambda: overlap.buckets_from_layers([1, 2], [0.1], 2, "nvlink4"), "one entry per layer"),
    # sizes and times that are negative, NaN or infinite, and empty lists
    (lambda: overlap.simulate([0.1, float("inf")], [0.1, 0.1]), "compute_s[1] must be a finite number of seconds >= 0"),
    (lambda: overlap.simulate([0.1], [float("nan")]), "comm_s[0] must be a finite number of seconds"),
    (lambda: overlap.simulate([0.1], [float("-inf")]), "comm_s[0]"),
    (lambda: overlap.simulate([0.1], [0.1], forward_s=float("inf")), "forward_s must be a finite number of seconds"),
    (lambda: overlap.simulate([0.1], [0.1], forward_s=float("nan")), "forward_s"),
    (lambda: overlap.simulate([0.1], [0.1], forward_s=-0.01), "forward_s"),
    (lambda: overlap.simulate([0.1], []), "comm_s must list at least one bucket"),
    (lambda: overlap.make_buckets([]), "param_bytes must list at least one parameter"),
    (lambda: overlap.make_buckets([MiB, -MiB]), "param_bytes[1] must be a finite number of bytes >= 0"),
    (lambda: overlap.make_buckets([float("nan")]), "param_bytes[0]"),
    (lambda: overlap.make_buckets([float("inf")]), "param_bytes[0]"),
    (lambda: overlap.make_buckets([1], bucket_cap_mb=float("inf")), "bucket_cap_mb"),
    (lambda: overlap.make_buckets([1], first_bucket_mb=-1), "first_bucket_mb"),
    (lambda: overlap.make_buckets([1, 2], order=[]), "order must list at least one parameter index"),
    (lambda: overlap.buckets_from_layers([], [], 2, "nvlink4"), "param_bytes must list at least one layer"),
    (lambda: overlap.buckets_from_layers([MiB, MiB], [0.01, -0.01], 2, "nvlink4"), "backward_s[1]"),
    (lambda: overlap.buckets_from_layers([MiB, MiB], [0.01, float("nan")], 2, "nvlink4"), "backward_s[1]"),
    (lambda: overlap.buckets_from_layers([MiB, float("inf")], [0.01, 0.01], 2, "nvlink4"), "param_bytes[1]"),
    (lambda: overlap.buckets_from_layers([MiB], [0.01], 0, "nvlink4"), "world_size"),
    (lambda: overlap.buckets_from_layers([MiB], [0.01], 2, "nvlink4", gamma=float("inf")), "gamma"),
])
def test_bad_inputs(call, words):
    with pytest.raises(ValueError) as info:
        call()
    assert words in str(info.value)


@pytest.mark.parametrize("call, words", [
    (lambda: overlap.simulate(0.1, 0.1), "compute_s must be a list"),
    (lambda: overlap.simulate("0.1", [0.1]), "compute_s must be a list"),
    (lambda: overlap.simulate([0.1], [None]), "comm_s[0] must be a finite number"),
    (lambda: overlap.simulate([0.1], [0.1], forward_s="0"), "forward_s"),
    (lambda: overlap.make_buckets([1, 2], order=["a", "b"]), "order[0] must be an int"),
    (lambda: overlap.make_buckets([1, 2], order=[1.5, 0]), "order[0] must be an int"),
    (lambda: overlap.make_buckets([1, True]), "param_bytes[1]"),
    (lambda: overlap.buckets_from_layers(7, [0.1], 2, "nvlink4"), "param_bytes must be a list"),
])
def test_wrong_types(call, words):
    with pytest.raises(TypeError) as info:
        call()
    assert words in str(info.value)


def test_numpy_numbers_and_arrays_are_accepted():
    import numpy as np

    tl = overlap.simulate(np.array([0.01, 0.02], dtype=np.float32), [np.float64(0.015)] * 2, forward_s=np.float32(0.01))
    assert tl.total_s == pytest.approx(overlap.simulate([0.01, 0.02], [0.015] * 2, forward_s=0.01).total_s)
    sizes = np.full(6, 3 * MiB, dtype=np.int64)
    assert overlap.make_buckets(sizes, bucket_cap_mb=np.float32(5), order=np.array([2, 5, 4, 3, 1, 0])) == \
        [[2, 5], [4, 3], [1, 0]]
    assert overlap.buckets_from_layers(sizes, np.full(6, 0.01), np.int64(8), "nvlink4", bucket_cap_mb=5) == \
        overlap.buckets_from_layers([3 * MiB] * 6, [0.01] * 6, 8, "nvlink4", bucket_cap_mb=5)
    layers = (n for n in [MiB, MiB])  # any iterable of sizes
    assert overlap.buckets_from_layers(layers, (0.01, 0.01), 2, "nvlink4")[2] == [MiB, MiB]  # 1 MiB first bucket


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def grads_both_ways(bucket_cap_mb, use_overlap, steps=3):
    torch.manual_seed(1000 + dist.get_rank())  # different data and different initial weights per rank
    data = [(torch.randn(32, 64), torch.randint(0, 10, (32,))) for _ in range(steps)]
    ours = overlap.BucketedDDP(make_model(), bucket_cap_mb=bucket_cap_mb, overlap=use_overlap)
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


@pytest.mark.parametrize("world_size", [2, 3])
def test_bucketed_ddp_gradients_and_buckets_equal_torch_ddps(world_size):
    with cl.Cluster(world_size=world_size, timeout=120) as c:
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
    model = overlap.BucketedDDP(make_model(), bucket_cap_mb=0.1, first_bucket_mb=0.05)
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    for _ in range(2):  # the second iteration runs with the rebuilt buckets
        torch.nn.functional.cross_entropy(model(x), y).backward()
    tl = model.timeline
    backward_end = max(e.end for e in tl.events if e.kind == "compute")
    first_comm = min(e.start for e in tl.events if e.kind == "comm")
    return len(model.buckets), first_comm < backward_end


def test_overlap_starts_communication_during_backward():
    with cl.Cluster(world_size=2, timeout=60) as c:
        n_buckets, early = c.run(overlap_shows_in_the_timeline)[0]
    assert n_buckets >= 3 and early


def unused_parameter():
    class TwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.a(x)

    model = overlap.BucketedDDP(TwoHeads(), first_bucket_mb=1e-6, bucket_cap_mb=1e-6)
    model(torch.randn(2, 4)).sum().backward()


def test_unused_parameters_give_a_clear_error():
    with cl.Cluster(world_size=2, timeout=60) as c:
        with pytest.raises(cl.RankError, match=r"parameters \[2, 3\] \(indices.*got no gradient"):
            c.run(unused_parameter)  # head b's weight and bias, and only those


def test_bucketed_ddp_needs_a_module_and_a_process_group():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        overlap.BucketedDDP(lambda x: x)
    with pytest.raises(RuntimeError, match="inside a rank"):
        overlap.BucketedDDP(torch.nn.Linear(2, 2))


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
    tl = overlap._CudaClock.timeline(t0, ready, start, done, None)
    got = [(e.kind, e.bucket, round(e.start, 9), round(e.end, 9)) for e in tl.events]
    assert got == [("compute", 0, 0.0, 0.2), ("comm", 0, 0.2, 0.4), ("compute", 1, 0.2, 0.5), ("comm", 1, 0.6, 0.9)]
    assert tl.total_s == pytest.approx(0.9) and tl.exposed_comm_s == pytest.approx(0.4)


def test_the_seeds_example_with_forward_split_off():
    """The seed's 100 ms is the whole step's compute: ~1/3 forward, which no gradient all-reduce of this step can
    hide behind, and ~2/3 backward. 80 ms of communication in 10 buckets is then longer than backward."""
    tl = overlap.simulate([0.200 / 3 / 10] * 10, [0.008] * 10, forward_s=0.100 / 3)
    assert tl.events[0] == overlap.Span("forward", -1, 0.0, 0.100 / 3)
    assert tl.compute_s == pytest.approx(0.100)
    assert tl.total_s == pytest.approx(0.100 / 3 + 0.200 / 3 / 10 + 0.080)   # forward + first bucket + all comm
    assert min(e.start for e in tl.events if e.kind == "comm") >= 0.100 / 3
    serial = overlap.simulate([0.200 / 3 / 10] * 10, [0.008] * 10, overlap=False, forward_s=0.100 / 3)
    assert serial.total_s == pytest.approx(0.180)
