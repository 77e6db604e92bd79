"""commlib.cost.timeline: hand-computed timelines and DDP's bucketing."""

import pytest

from commlib import cost
from commlib.cost import timeline

MiB = 2**20


def test_without_overlap_the_step_is_the_sum():
    tl = timeline.simulate([0.01, 0.02, 0.03], [0.005, 0.005, 0.01], overlap=False)
    assert tl.total_s == pytest.approx(0.06 + 0.02)
    assert tl.exposed_comm_s == pytest.approx(0.02) and tl.overlap_fraction == 0.0
    comm = [e for e in tl.events if e.kind == "comm"]
    assert comm[0].start == pytest.approx(0.06) and comm[-1].end == pytest.approx(0.08)


def test_comm_shorter_than_compute_leaves_only_the_last_bucket_exposed():
    tl = timeline.simulate([0.010] * 3, [0.005] * 3)
    comm = [x for e in tl.events if e.kind == "comm" for x in (e.start, e.end)]
    assert comm == pytest.approx([0.01, 0.015, 0.02, 0.025, 0.03, 0.035])
    assert tl.total_s == pytest.approx(0.030 + 0.005)
    assert tl.exposed_comm_s == pytest.approx(0.005)
    assert tl.overlap_fraction == pytest.approx(10 / 15)


def test_comm_bound_queue_on_one_stream():
    tl = timeline.simulate([0.001] * 3, [0.010] * 3)
    assert tl.total_s == pytest.approx(0.001 + 0.030)  # the stream never idles after the first bucket
    assert tl.exposed_comm_s == pytest.approx(0.031 - 0.003)


def test_the_classic_100ms_compute_80ms_comm():
    assert timeline.simulate([0.100], [0.080]).total_s == pytest.approx(0.180)  # one bucket: nothing to overlap
    tl = timeline.simulate([0.010] * 10, [0.008] * 10)
    assert tl.total_s == pytest.approx(0.108)  # compute + the last bucket's 8 ms
    assert tl.total_s != pytest.approx(max(0.100, 0.080))  # "max(compute, comm)" forgets the last bucket


def test_buckets_like_torch_ddp():
    # forward order: 6 layers of 3 MiB; backward meets the last first. With the default cap (None: 25 MiB) the
    # first bucket closes at >= 1 MiB; an explicit cap applies to the first bucket too (torch 2.13).
    assert timeline.make_buckets([3 * MiB] * 6) == [[5], [4, 3, 2, 1, 0]]
    assert timeline.make_buckets([3 * MiB] * 6, bucket_cap_mb=5) == [[5, 4], [3, 2], [1, 0]]
    assert timeline.make_buckets([3 * MiB] * 6, bucket_cap_mb=25) == [[5, 4, 3, 2, 1, 0]]
    assert timeline.make_buckets([3 * MiB] * 6, bucket_cap_mb=5, first_bucket_mb=1) == [[5], [4, 3], [2, 1], [0]]
    # rebuilt in the order the gradients became ready (here: a model whose layer 2 finishes first)
    assert timeline.make_buckets([3 * MiB] * 6, bucket_cap_mb=5, order=[2, 5, 4, 3, 1, 0]) == [[2, 5], [4, 3], [1, 0]]
    compute, comm, sizes = timeline.buckets_from_layers([3 * MiB] * 6, [0.01] * 6, 8, "nvlink4", bucket_cap_mb=5)
    assert sizes == [6 * MiB] * 3 and compute == pytest.approx([0.02] * 3)
    assert comm[1] == pytest.approx(cost.collective_time("all_reduce", 6 * MiB, 8, "nvlink4"))


@pytest.mark.parametrize("call, words", [
    (lambda: timeline.simulate([], []), "at least one bucket"),
    (lambda: timeline.simulate([0.1], [0.1, 0.2]), "one entry per bucket"),
    (lambda: timeline.simulate([-0.1], [0.1]), "seconds >= 0"),
    (lambda: timeline.make_buckets([1], bucket_cap_mb=0), "bucket_cap_mb"),
    (lambda: timeline.make_buckets([1], bucket_cap_mb=float("nan")), "bucket_cap_mb"),
    (lambda: timeline.make_buckets([1, 2], order=[0, 0]), "order must list every parameter"),
    (lambda: timeline.buckets_from_layers([1, 2], [0.1], 2, "nvlink4"), "one entry per layer"),
    # sizes and times that are negative, NaN or infinite, and empty lists
    (lambda: timeline.simulate([0.1, float("inf")], [0.1, 0.1]), "compute_s[1] must be a finite number of seconds >= 0"),
    (lambda: timeline.simulate([0.1], [float("nan")]), "comm_s[0] must be a finite number of seconds"),
    (lambda: timeline.simulate([0.1], [float("-inf")]), "comm_s[0]"),
    (lambda: timeline.simulate([0.1], [0.1], forward_s=float("inf")), "forward_s must be a finite number of seconds"),
    (lambda: timeline.simulate([0.1], [0.1], forward_s=float("nan")), "forward_s"),
    (lambda: timeline.simulate([0.1], [0.1], forward_s=-0.01), "forward_s"),
    (lambda: timeline.simulate([0.1], []), "comm_s must list at least one bucket"),
    (lambda: timeline.make_buckets([]), "param_bytes must list at least one parameter"),
    (lambda: timeline.make_buckets([MiB, -MiB]), "param_bytes[1] must be a finite number of bytes >= 0"),
    (lambda: timeline.make_buckets([float("nan")]), "param_bytes[0]"),
    (lambda: timeline.make_buckets([float("inf")]), "param_bytes[0]"),
    (lambda: timeline.make_buckets([1], bucket_cap_mb=float("inf")), "bucket_cap_mb"),
    (lambda: timeline.make_buckets([1], first_bucket_mb=-1), "first_bucket_mb"),
    (lambda: timeline.make_buckets([1, 2], order=[]), "order must list at least one parameter index"),
    (lambda: timeline.buckets_from_layers([], [], 2, "nvlink4"), "param_bytes must list at least one layer"),
    (lambda: timeline.buckets_from_layers([MiB, MiB], [0.01, -0.01], 2, "nvlink4"), "backward_s[1]"),
    (lambda: timeline.buckets_from_layers([MiB, MiB], [0.01, float("nan")], 2, "nvlink4"), "backward_s[1]"),
    (lambda: timeline.buckets_from_layers([MiB, float("inf")], [0.01, 0.01], 2, "nvlink4"), "param_bytes[1]"),
    (lambda: timeline.buckets_from_layers([MiB], [0.01], 0, "nvlink4"), "world_size"),
    (lambda: timeline.buckets_from_layers([MiB], [0.01], 2, "nvlink4", gamma=float("inf")), "gamma"),
])
def test_bad_inputs(call, words):
    with pytest.raises(ValueError) as info:
        call()
    assert words in str(info.value)


@pytest.mark.parametrize("call, words", [
    (lambda: timeline.simulate(0.1, 0.1), "compute_s must be a list"),
    (lambda: timeline.simulate("0.1", [0.1]), "compute_s must be a list"),
    (lambda: timeline.simulate([0.1], [None]), "comm_s[0] must be a finite number"),
    (lambda: timeline.simulate([0.1], [0.1], forward_s="0"), "forward_s"),
    (lambda: timeline.make_buckets([1, 2], order=["a", "b"]), "order[0] must be an int"),
    (lambda: timeline.make_buckets([1, 2], order=[1.5, 0]), "order[0] must be an int"),
    (lambda: timeline.make_buckets([1, True]), "param_bytes[1]"),
    (lambda: timeline.buckets_from_layers(7, [0.1], 2, "nvlink4"), "param_bytes must be a list"),
])
def test_wrong_types(call, words):
    with pytest.raises(TypeError) as info:
        call()
    assert words in str(info.value)


def test_numpy_numbers_and_arrays_are_accepted():
    import numpy as np

    tl = timeline.simulate(np.array([0.01, 0.02], dtype=np.float32), [np.float64(0.015)] * 2, forward_s=np.float32(0.01))
    assert tl.total_s == pytest.approx(timeline.simulate([0.01, 0.02], [0.015] * 2, forward_s=0.01).total_s)
    sizes = np.full(6, 3 * MiB, dtype=np.int64)
    assert timeline.make_buckets(sizes, bucket_cap_mb=np.float32(5), order=np.array([2, 5, 4, 3, 1, 0])) == \
        [[2, 5], [4, 3], [1, 0]]
    assert timeline.buckets_from_layers(sizes, np.full(6, 0.01), np.int64(8), "nvlink4", bucket_cap_mb=5) == \
        timeline.buckets_from_layers([3 * MiB] * 6, [0.01] * 6, 8, "nvlink4", bucket_cap_mb=5)
    layers = (n for n in [MiB, MiB])  # any iterable of sizes
    assert timeline.buckets_from_layers(layers, (0.01, 0.01), 2, "nvlink4")[2] == [MiB, MiB]  # 1 MiB first bucket


def test_the_source_chapters_example_with_forward_split_off():
    """The source chapter's 100 ms is the whole step's compute: ~1/3 forward, which no gradient all-reduce of this step can
    hide behind, and ~2/3 backward. 80 ms of communication in 10 buckets is then longer than backward."""
    tl = timeline.simulate([0.200 / 3 / 10] * 10, [0.008] * 10, forward_s=0.100 / 3)
    assert tl.events[0] == timeline.Span("forward", -1, 0.0, 0.100 / 3)
    assert tl.compute_s == pytest.approx(0.100)
    assert tl.total_s == pytest.approx(0.100 / 3 + 0.200 / 3 / 10 + 0.080)   # forward + first bucket + all comm
    assert min(e.start for e in tl.events if e.kind == "comm") >= 0.100 / 3
    serial = timeline.simulate([0.200 / 3 / 10] * 10, [0.008] * 10, overlap=False, forward_s=0.100 / 3)
    assert serial.total_s == pytest.approx(0.180)
