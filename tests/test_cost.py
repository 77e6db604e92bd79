"""commlib.cost against the published expressions (Thakur, Rabenseifner, Gropp 2005; nccl-tests)."""

import math

import numpy as np
import pytest

from commlib import cost

LINK = cost.Link("test", bandwidth=1e9, latency=1e-5, source="round numbers")
A, B, G = 1e-5, 1e-9, 2e-10
N = 8 * 2**20


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_power_of_two_formulas(p):
    lg, f = math.log2(p), (p - 1) / p
    t = lambda op, alg: cost.collective_time(op, N, p, LINK, alg, gamma=G)  # noqa: E731
    assert t("all_reduce", "ring") == pytest.approx(2 * (p - 1) * A + 2 * f * N * B + f * N * G)
    assert t("all_reduce", "recursive_doubling") == pytest.approx(lg * (A + N * B + N * G))
    assert t("all_reduce", "rabenseifner") == pytest.approx(2 * lg * A + 2 * f * N * B + f * N * G)
    assert t("all_reduce", "tree") == pytest.approx(2 * lg * (A + N * B) + lg * N * G)
    assert t("all_reduce", "naive") == pytest.approx(2 * (p - 1) * (A + N * B) + (p - 1) * N * G)
    assert t("all_gather", "ring") == pytest.approx((p - 1) * A + f * N * B)
    assert t("reduce_scatter", "ring") == pytest.approx((p - 1) * A + f * N * (B + G))
    assert t("broadcast", "tree") == pytest.approx(lg * (A + N * B))
    assert t("all_to_all", "ring") == pytest.approx((p - 1) * (A + N / p * B))


@pytest.mark.parametrize("p", [3, 5, 6, 7])
def test_non_powers_of_two(p):
    clg, lg2 = math.ceil(math.log2(p)), math.floor(math.log2(p))
    assert cost.collective_time("broadcast", N, p, LINK, "tree") == pytest.approx(clg * (A + N * B))
    fold = 2 * (A + N * B)  # MPICH: hand the data over first, the result back at the end
    assert cost.collective_time("all_reduce", N, p, LINK, "recursive_doubling") == pytest.approx(
        lg2 * (A + N * B) + fold)
    with pytest.raises(ValueError, match="power-of-two world_size, got 6"):
        cost.collective_time("all_gather", N, 6, LINK, "recursive_doubling")


def test_one_rank_costs_nothing():
    for op, algs in cost.PAIRS.items():
        for a in algs:
            assert cost.collective_time(op, N, 1, LINK, a, gamma=G) == 0.0
            assert cost.bytes_sent_per_rank(op, N, 1, a) == 0.0
    assert cost.bus_factor("all_reduce", 1) == 0.0


def test_bus_factors_are_nccl_tests():
    assert cost.bus_factor("all_reduce", 8) == 2 * 7 / 8
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert cost.bus_factor(op, 8) == 7 / 8
    assert cost.bus_factor("broadcast", 8) == cost.bus_factor("reduce", 8) == 1.0


def test_links_are_per_direction():
    assert cost.LINKS["nvlink3"].bandwidth == 300e9  # A100: 600 GB/s is both directions
    assert cost.LINKS["nvlink4"].bandwidth == 450e9
    assert cost.LINKS["nvlink5"].bandwidth == 900e9
    assert cost.LINKS["ib_hdr"].bandwidth == 25e9 and cost.LINKS["ib_ndr"].bandwidth == 50e9
    assert all("per direction" in link.source for link in cost.LINKS.values())
    # the classic 1e9-parameter FP32 example: 4 GB over NVLink4 vs HDR InfiniBand, ring, 8 ranks
    nv = cost.collective_time("all_reduce", 4e9, 8, "nvlink4")
    ib = cost.collective_time("all_reduce", 4e9, 8, "ib_hdr")
    assert nv == pytest.approx(6.6e-6 + 14 * 0.6e-6 + 1.75 * 4e9 / 450e9)  # NCCL's call + per-hop latency (LL)
    assert ib / nv == pytest.approx(18, rel=0.01)  # not "24x": per-direction bandwidths 450 vs 25


def test_ethernet_is_split_into_rdma_and_tcp():
    assert cost.LINKS["roce400"].latency == cost.LINKS["ib_ndr"].latency          # RDMA: a few us, like IB
    assert cost.LINKS["tcp400"].latency >= 4 * cost.LINKS["roce400"].latency     # kernel TCP: tens of us
    assert cost.LINKS["roce400"].bandwidth == cost.LINKS["tcp400"].bandwidth == 50e9


def test_call_latency_is_paid_once_per_collective():
    link = cost.Link("c", 1e9, A, "test", call_latency=7e-6)
    assert cost.collective_time("all_reduce", N, 8, link) == pytest.approx(
        7e-6 + cost.collective_time("all_reduce", N, 8, LINK))
    assert cost.collective_time("all_reduce", N, 1, link) == 0.0   # nothing to send, nothing to launch
    small = cost.breakdown("all_reduce", 8, 8, "nvlink4")
    assert small["latency_s"] == pytest.approx(6.6e-6 + 14 * 0.6e-6)


@pytest.mark.parametrize("field, kwargs", [
    ("bandwidth", dict(bandwidth=0.0, latency=1e-6)), ("bandwidth", dict(bandwidth=-1e9, latency=1e-6)),
    ("bandwidth", dict(bandwidth=float("nan"), latency=1e-6)), ("latency", dict(bandwidth=1e9, latency=-1e-6)),
    ("latency", dict(bandwidth=1e9, latency=float("inf"))),
    ("call_latency", dict(bandwidth=1e9, latency=1e-6, call_latency=-1.0)),
])
def test_links_reject_nonsense(field, kwargs):
    with pytest.raises(ValueError, match=f"Link {field} must be"):
        cost.Link("bad", **kwargs)


def test_published_figures_carry_sources_and_nvls_exceeds_the_wire():
    for fig in cost.PUBLISHED:
        assert "nccl-tests issue #" in fig.source and fig.link in cost.LINKS
        line = cost.LINKS[fig.link].bandwidth
        if fig.algorithm == "ring":      # point-to-point: busbw is what the wire carried, below its line rate
            assert 0.7 * line < fig.busbw < line
        else:                            # NVLS reduces in the switch: busbw is no longer a wire rate
            assert fig.busbw > line


def test_fit_recovers_alpha_beta_despite_noise_and_outliers():
    rng = np.random.default_rng(0)
    n = np.logspace(3, 8, 30)
    t = (50e-6 + n * 2e-9) * rng.lognormal(0, 0.05, n.size)
    t[[3, 17]] *= 6  # two stalls
    alpha, beta = cost.fit_alpha_beta(n, t)
    assert alpha == pytest.approx(50e-6, rel=0.1) and beta == pytest.approx(2e-9, rel=0.05)


@pytest.mark.parametrize("call, exc, words", [
    (lambda: cost.collective_time("allreduce", N, 4, LINK), ValueError, "op must be one of"),
    (lambda: cost.collective_time("all_reduce", N, 4, LINK, "butterfly"), ValueError, "algorithm must be one of"),
    (lambda: cost.collective_time("broadcast", N, 4, LINK, "rabenseifner"), ValueError,
     "no algorithm 'rabenseifner' for broadcast"),
    (lambda: cost.pipelined_ring_time("all_reduce", N, 4, LINK, 0), ValueError, "segment_bytes"),
    (lambda: cost.pipelined_ring_time("broadcast", N, 4, LINK, 1024), ValueError, "op must be"),
    (lambda: cost.collective_time("all_reduce", -1, 4, LINK), ValueError, "nbytes"),
    (lambda: cost.collective_time("all_reduce", N, 0, LINK), ValueError, "world_size"),
    (lambda: cost.collective_time("all_reduce", N, 2.5, LINK), TypeError, "world_size"),
    (lambda: cost.collective_time("all_reduce", N, 4, "nvlink9"), ValueError, "nvlink4"),
    (lambda: cost.bytes_sent_per_rank("all_reduce", float("nan"), 4), ValueError, "nbytes"),
    (lambda: cost.fit_alpha_beta([1, 1], [1e-3, 2e-3]), ValueError, "two different sizes"),
    (lambda: cost.fit_alpha_beta([1, 2], [1e-3]), ValueError, "equal length"),
    (lambda: cost.shard_sizes(-1, 4), ValueError, "numel"),
    # bytes_sent_by_rank: the element size and the root
    (lambda: cost.bytes_sent_by_rank("all_reduce", N, 4, itemsize=0), ValueError, "itemsize must be an int >= 1"),
    (lambda: cost.bytes_sent_by_rank("all_reduce", N, 4, itemsize=-4), ValueError, "itemsize must be an int >= 1"),
    (lambda: cost.bytes_sent_by_rank("all_reduce", N, 4, itemsize="4"), TypeError, "itemsize"),
    (lambda: cost.bytes_sent_by_rank("all_reduce", N, 4, itemsize=2.5), TypeError, "itemsize"),
    (lambda: cost.bytes_sent_by_rank("broadcast", N, 4, "tree", root=4), ValueError, "root must be an int >= 0 and <= 3"),
    (lambda: cost.bytes_sent_by_rank("broadcast", N, 4, "tree", root=-1), ValueError, "root must be"),
    (lambda: cost.bytes_sent_by_rank("reduce", N, 4, "ring", root=1.0), TypeError, "root"),
    # gamma, nbytes and world_size: NaN, infinity, ints beyond float, wrong types
    (lambda: cost.collective_time("all_reduce", N, 4, LINK, gamma=math.inf), ValueError, "gamma must be a finite"),
    (lambda: cost.collective_time("all_reduce", N, 4, LINK, gamma=math.nan), ValueError, "gamma"),
    (lambda: cost.collective_time("all_reduce", N, 4, LINK, gamma="0"), TypeError, "gamma"),
    (lambda: cost.pipelined_ring_time("all_reduce", N, 4, LINK, 4096, gamma=math.inf), ValueError, "gamma"),
    (lambda: cost.crossover_bytes("all_reduce", "ring", "tree", 8, LINK, gamma=math.inf), ValueError, "gamma"),
    (lambda: cost.collective_time("all_reduce", 10**400, 4, LINK), ValueError, "nbytes must be a finite"),
    (lambda: cost.collective_time("all_reduce", math.inf, 4, LINK), ValueError, "nbytes"),
    (lambda: cost.collective_time("all_reduce", "1e6", 4, LINK), TypeError, "nbytes"),
    (lambda: cost.collective_time("all_reduce", N, True, LINK), TypeError, "world_size"),
    (lambda: cost.is_power_of_two(2.5), TypeError, "p must be an int"),
    # crossover_bytes and pipelined_ring_time name the argument that is wrong
    (lambda: cost.crossover_bytes("all_reduce", "ring", "butterfly", 8, LINK), ValueError, "algorithm_b must be"),
    (lambda: cost.crossover_bytes("all_reduce", "scatter_allgather", "ring", 8, LINK), ValueError,
     "no algorithm_a 'scatter_allgather'"),
    (lambda: cost.crossover_bytes("all_reduce", "ring", "tree", 0, LINK), ValueError, "world_size"),
    (lambda: cost.pipelined_ring_time("all_reduce", N, 4, LINK, math.nan), ValueError, "segment_bytes"),
    (lambda: cost.pipelined_ring_time("all_reduce", N, 4, LINK, "4K"), TypeError, "segment_bytes"),
    (lambda: cost.collective_time(["all_reduce"], N, 4, LINK), ValueError, "op must be one of"),
    # fit_alpha_beta: iterations and degenerate sizes or times
    (lambda: cost.fit_alpha_beta([1, 2], [1e-3, 2e-3], iterations=0), ValueError, "iterations must be an int >= 1"),
    (lambda: cost.fit_alpha_beta([1, 2], [1e-3, 2e-3], iterations=2.0), TypeError, "iterations"),
    (lambda: cost.fit_alpha_beta([1, 2], [1e-3, math.nan]), ValueError, "seconds_list must hold finite"),
    (lambda: cost.fit_alpha_beta([1, 2], [1e-3, math.inf]), ValueError, "seconds_list"),
    (lambda: cost.fit_alpha_beta([1, 2], [1e-3, 0.0]), ValueError, "seconds_list must hold finite times in seconds > 0"),
    (lambda: cost.fit_alpha_beta([1, 2], [1e-3, -1e-3]), ValueError, "seconds_list"),
    (lambda: cost.fit_alpha_beta([1, -2], [1e-3, 2e-3]), ValueError, "nbytes_list must hold finite sizes"),
    (lambda: cost.fit_alpha_beta([1, math.inf], [1e-3, 2e-3]), ValueError, "nbytes_list"),
    (lambda: cost.fit_alpha_beta(["1K", "2K"], [1e-3, 2e-3]), TypeError, "nbytes_list must be a list of numbers"),
    (lambda: cost.fit_alpha_beta([1, 2], [1e-3, None]), ValueError, "seconds_list"),
    # Link: every field
    (lambda: cost.Link("x", math.inf, 1e-6), ValueError, "Link bandwidth must be a finite number of bytes/s > 0"),
    (lambda: cost.Link("x", 1e9, 1e-6, call_latency=math.nan), ValueError, "Link call_latency"),
    (lambda: cost.Link("x", "1e9", 1e-6), TypeError, "Link bandwidth"),
    (lambda: cost.Link("x", 1e9, True), TypeError, "Link latency"),
    (lambda: cost.Link("x", 1e9, 1e-6, source=None), TypeError, "Link source must be a str"),
    (lambda: cost.Link(None, 1e9, 1e-6), TypeError, "Link name must be a str"),
])
def test_invalid_inputs_name_the_value(call, exc, words):
    with pytest.raises(exc, match=None) as info:
        call()
    assert words in str(info.value)


def test_numpy_numbers_are_accepted_wherever_python_numbers_are():
    want = cost.collective_time("all_reduce", N, 4, LINK, gamma=G)
    assert cost.collective_time("all_reduce", np.float32(N), np.int64(4), LINK, gamma=np.float64(G)) == want
    assert cost.breakdown("all_reduce", np.float32(N), np.int64(4), LINK) == cost.breakdown("all_reduce", N, 4, LINK)
    assert cost.bytes_sent_by_rank("broadcast", np.float64(N), np.int32(4), "tree", itemsize=np.int64(4),
                                   root=np.int8(1)) == cost.bytes_sent_by_rank("broadcast", N, 4, "tree", 4, 1)
    assert cost.pipelined_ring_time("all_reduce", N, np.int64(4), LINK, np.float32(4096)) == \
        cost.pipelined_ring_time("all_reduce", N, 4, LINK, 4096)
    assert cost.crossover_bytes("all_reduce", "ring", "recursive_doubling", np.int64(8), LINK) == \
        cost.crossover_bytes("all_reduce", "ring", "recursive_doubling", 8, LINK)
    assert cost.shard_sizes(np.int64(10), np.int16(4)) == [3, 3, 2, 2] and cost.is_power_of_two(np.int64(8))
    assert cost.Link("np", np.float32(1e9), np.float64(1e-6)).beta == pytest.approx(1e-9)
    n = np.array([1e3, 1e5, 1e7])
    assert cost.fit_alpha_beta(n, 1e-5 + n * 1e-9, iterations=np.int64(5)) == pytest.approx((1e-5, 1e-9))


def test_fit_with_identical_times_is_all_latency():
    alpha, beta = cost.fit_alpha_beta([1e3, 1e5, 1e7], [2e-3] * 3)
    assert alpha == pytest.approx(2e-3) and 0 <= beta * 1e7 < 1e-12


def test_fit_does_not_depend_on_the_units():
    n = np.logspace(3, 8, 12)
    t = (50e-6 + n * 2e-9) * np.random.default_rng(1).lognormal(0, 0.05, n.size)
    alpha, beta = cost.fit_alpha_beta(n, t)
    for scale in (1e-300, 1e-12, 1e12):  # subnormal or huge times: no overflow in 1/t, the same fit
        a, b = cost.fit_alpha_beta(n, t * scale)
        assert a == pytest.approx(alpha * scale, rel=1e-9) and b == pytest.approx(beta * scale, rel=1e-9)


def test_shard_sizes():
    assert cost.shard_sizes(10, 4) == [3, 3, 2, 2]
    assert cost.shard_sizes(2, 4) == [1, 1, 0, 0]
    assert sum(cost.shard_sizes(1003, 7)) == 1003


def test_breakdown_terms_add_up_and_name_the_bottleneck():
    small = cost.breakdown("all_reduce", 1024, 8, LINK, "ring", gamma=G)
    big = cost.breakdown("all_reduce", 1e9, 8, LINK, "ring", gamma=G)
    for b in (small, big):
        assert b["time_s"] == pytest.approx(b["latency_s"] + b["bandwidth_s"] + b["reduction_s"])
        assert b["busbw_GBps"] == pytest.approx(b["algbw_GBps"] * 2 * 7 / 8)
    assert small["bottleneck"] == "latency" and big["bottleneck"] == "bandwidth"
    assert small["latency_s"] == 14 * A and big["bytes_per_rank"] == 2 * 7 / 8 * 1e9
    assert cost.critical_path("sendrecv", N, 4) == (1, N, 0.0)
    assert cost.collective_time("sendrecv", N, 4, LINK) == pytest.approx(A + N * B)


def test_crossover_between_recursive_doubling_and_ring():
    p = 8
    n = cost.crossover_bytes("all_reduce", "recursive_doubling", "ring", p, LINK)
    # lg p (a + n b) = 2(p-1) a + 2(p-1)/p n b  ->  n = (2(p-1) - lg p) a / ((lg p - 2(p-1)/p) b)
    assert n == pytest.approx((14 - 3) * A / ((3 - 1.75) * B))
    assert cost.collective_time("all_reduce", n, p, LINK, "ring") == pytest.approx(
        cost.collective_time("all_reduce", n, p, LINK, "recursive_doubling"))
    assert cost.crossover_bytes("all_reduce", "ring", "ring", p, LINK) is None
    assert cost.crossover_bytes("all_reduce", "rabenseifner", "ring", p, LINK) is None  # same bytes, fewer messages


@pytest.mark.parametrize("p", [2, 4, 8, 16, 32])
def test_double_binary_tree_is_nccls(p):
    trees = cost.double_binary_tree(p)
    for tree in trees:  # one root, every parent/child pair consistent, at most two children
        assert sum(parent < 0 for parent, _ in tree) == 1
        for r, (parent, children) in enumerate(tree):
            assert len(children) <= 2 and all(tree[c][0] == r for c in children)
            assert parent < 0 or r in tree[parent][1]
    inner = [{r for r, (_, ch) in enumerate(t) if ch} for t in trees]
    assert not inner[0] & inner[1]       # even p: a rank is inner in at most one tree (the mirror)
    h = math.floor(math.log2(p))
    assert [cost.tree_height(t) for t in trees] == [h, h]
    # NCCL's tuning model: algbw = busBw / 2, i.e. 2n bytes at the link rate; latency 2 log2 p hops
    assert cost.collective_time("all_reduce", N, p, LINK, "double_binary_tree", gamma=G) == pytest.approx(
        2 * h * A + (2 if p > 2 else 1) * N * B + (N if p > 2 else N / 2) * G)
    sent = cost.bytes_sent_by_rank("all_reduce", N, p, "double_binary_tree")
    assert max(sent) == cost.bytes_sent_per_rank("all_reduce", N, p, "double_binary_tree") == (2 * N if p > 2 else N)


def test_double_binary_tree_matches_ncclGetBtree_picture():
    # the 14-rank picture in NCCL's src/graph/trees.cc: 0-8, 8-(4, 12), 12-(10, 13), 4-(2, 6), ...
    tree = cost.binary_tree(14)
    assert tree[0] == (-1, [8]) and tree[8] == (0, [4, 12]) and tree[12] == (8, [10, 13])
    assert tree[4] == (8, [2, 6]) and tree[13] == (12, []) and tree[1] == (2, [])
    shifted = cost.double_binary_tree(13)[1]   # odd p: the second tree is the first shifted by one rank
    assert shifted[1] == (-1, [9]) and shifted[9] == (1, [5, 0])


@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_long_broadcasts_are_not_lg_p_whole_tensors(p):
    f, clg = (p - 1) / p, math.ceil(math.log2(p))
    assert cost.collective_time("broadcast", N, p, LINK, "ring") == pytest.approx((p - 1) * A + N * B)
    assert cost.collective_time("broadcast", N, p, LINK, "scatter_allgather") == pytest.approx(
        (clg + p - 1) * A + 2 * f * N * B)
    for root in range(p):
        sent = cost.bytes_sent_by_rank("broadcast", N, p, "scatter_allgather", root=root)
        assert max(sent) == pytest.approx(2 * f * N) and sent[root] == max(sent)
        chain = cost.bytes_sent_by_rank("broadcast", N, p, "ring", root=root)
        assert sum(chain) == (p - 1) * N and chain[(root - 1) % p] == 0


def test_pipelined_ring_pays_alpha_per_segment():
    p, n = 4, 4 * 2**20
    whole = cost.collective_time("all_reduce", n, p, LINK, "ring", gamma=G)
    assert cost.pipelined_ring_time("all_reduce", n, p, LINK, n, gamma=G) == pytest.approx(whole)
    seg = 4096
    m = math.ceil(n / p / seg)
    assert cost.pipelined_ring_time("all_reduce", n, p, LINK, seg) == pytest.approx(
        2 * (p - 1) * m * A + 2 * 3 / 4 * n * B)
    times = [cost.pipelined_ring_time("all_reduce", n, p, LINK, s) for s in (2**12, 2**14, 2**16, 2**18, 2**20)]
    assert times == sorted(times, reverse=True)   # smaller segments: more alphas, lower busbw


def test_family_says_what_nccl_implements():
    assert "NCCL" not in cost.FAMILY["recursive_doubling"] and "NCCL" not in cost.FAMILY["rabenseifner"]
    assert "NCCL" in cost.FAMILY["ring"] and "NCCL" in cost.FAMILY["double_binary_tree"]
    assert set(cost.FAMILY) == set(cost.ALGORITHMS)


def test_nccls_simple_buffer_holds_four_ring_all_reduce_slices():
    """NCCL 2.30.7: NCCL_STEPS = 8 (device.h), ALLREDUCE_SLICESTEPS = NCCL_STEPS / 4 (collectives.h), 4 MiB buffer."""
    from commlib.cost import links

    assert (links.NCCL_STEPS, links.NCCL_BUFFSIZE) == (8, 4 * 2**20)
    assert links.NCCL_SLICE_STEPS["all_reduce"] == links.NCCL_STEPS // 4 == 2
    assert links.nccl_slices("all_reduce") == (4, 2**20)           # a slice is 2 steps of 512 KiB
    assert links.nccl_slices("reduce_scatter") == links.nccl_slices("all_gather") == (4, 2**20)
    assert links.nccl_slices("broadcast") == (8, 2**19)            # BROADCAST_SLICESTEPS = 1
    assert links.nccl_slices("all_reduce", 2**20) == (4, 2**18)    # NCCL_BUFFSIZE=1M: smaller slices, as many
    for bad in [dict(op="scan"), dict(op="all_reduce", buffsize=4)]:
        with pytest.raises(ValueError, match=next(reversed(bad))):
            links.nccl_slices(**bad)


def test_nccl_ring_model_gives_each_protocol_its_own_latency_and_bandwidth():
    """Exercise 2.1 (1 MB, 8 nodes x 1 GPU, 25 GB/s) in tuning.cc's terms: LL 6.6 + 14 x 5.0 us at half the line rate,
    LL128 14.0 + 14 x 8.5 us at 0.92 of it, Simple (8.4 + 14 x 14.0) x 1.4 us at the line rate; algbw = busbw 8/14."""
    from commlib.cost import links

    hdr, n = cost.LINKS["ib_hdr"], 1e6
    model = {p: links.nccl_ring_model("all_reduce", n, 8, 1, hdr.bandwidth, p) for p in links.PROTOCOLS}
    assert model["LL"] == pytest.approx((76.6e-6, 12.5e9 * 8 / 14))
    assert model["LL128"] == pytest.approx((133.0e-6, 23e9 * 8 / 14))
    assert model["Simple"] == pytest.approx(((8.4 + 14 * 14.0) * 1.4e-6, 25e9 * 8 / 14))
    ours = cost.breakdown("all_reduce", n, 8, hdr, "ring")
    assert ours["latency_s"] == pytest.approx(model["LL"][0]) and n / ours["bandwidth_s"] == pytest.approx(
        model["Simple"][1])                                    # the chapter's model: LL's latency, Simple's bandwidth
    for p, (lat, algbw) in model.items():
        assert links.nccl_ring_time("all_reduce", n, 8, 1, hdr.bandwidth, p) == pytest.approx(lat + n / algbw)
        assert lat + n / algbw > ours["time_s"]


@pytest.mark.parametrize("nodes, gpus, link", [(8, 1, "ib_hdr"), (64, 1, "ib_ndr"), (1, 8, "nvlink3"), (1, 8, "nvlink4")])
@pytest.mark.parametrize("nbytes", [1e3, 1e6, 1e9])
def test_the_links_model_is_below_nccls_for_every_protocol(nodes, gpus, link, nbytes):
    """A Link pairs LL's latencies with the line rate: no protocol has both, so every protocol prices a ring higher."""
    from commlib.cost import links

    line = cost.LINKS[link]
    ours = cost.collective_time("all_reduce", nbytes, nodes * gpus, line, "ring")
    gpu = "hopper" if link == "nvlink4" else "ampere"
    assert all(ours <= links.nccl_ring_time("all_reduce", nbytes, nodes, gpus, line.bandwidth, p, gpu=gpu) * (1 + 1e-12)
               for p in links.PROTOCOLS)


def test_nccl_ring_model_caps_and_refusals():
    from commlib.cost import links

    one_node = links.nccl_ring_model("all_reduce", 1e6, 1, 8, 450e9, "LL", gpu="hopper")[1]
    assert one_node == pytest.approx(141e9 * 8 / 14)                      # llMaxBws, Hopper on one node
    amd = links.nccl_ring_model("all_reduce", 1e6, 2, 8, 400e9, "LL", cpu="amd")[1]
    assert amd == pytest.approx(22.5e9 * 16 / 30)                          # AMD CPUs, 2 nodes
    ll128 = links.nccl_ring_model("all_gather", 1e6, 1, 8, 450e9, "LL128", gpu="hopper", channels=4)[1]
    assert ll128 == pytest.approx(4 * 36.7e9 * 8 / 7)                      # perChMaxRingLL128Bws x channels
    volta = links.nccl_ring_model("all_reduce", 1e6, 2, 8, 25e9, "Simple", gpu="volta")[0]
    assert volta == pytest.approx(links.nccl_latency("all_reduce", 2, 8, "ring", "Simple") * 1.9)
    assert links.nccl_ring_model("all_reduce", 64, 2, 8, 25e9, "Simple")[0] == links.nccl_latency(
        "all_reduce", 2, 8, "ring", "Simple")                             # under 64 B per channel and rank: no plateau
    for bad in [dict(nodes=1, gpus_per_node=1), dict(gpu="tpu"), dict(cpu="arm"), dict(bandwidth=0.0),
                dict(protocol="simple"), dict(channels=0)]:
        kw = dict(op="all_reduce", nbytes=1e6, nodes=2, gpus_per_node=8, bandwidth=25e9) | bad
        with pytest.raises(ValueError):
            links.nccl_ring_model(**kw)
