"""commlib.exercises.ch3: right answers pass, each typical mistake gets its hint, odd answers never raise."""

import math

import numpy as np
import pytest

from commlib import cost
from commlib.exercises import ch3 as ex
from commlib import topology as topo

ODD = [None, ..., "200", True, np.array([1.0, 2.0]), float("nan"), float("inf"), -1, 10**400, [], {}, object()]
NUMBER_CHECKERS = [ex.ch3_multi_ring_busbw, ex.ch3_all_to_all_time, ex.ch3_hierarchical_inter_bytes,
                   ex.ch3_share_after_move]


@pytest.mark.parametrize("checker", NUMBER_CHECKERS + [ex.ch3_best_all_reduce])
# the same ids in every process (pytest-xdist's workers collect apart), not object()'s address
@pytest.mark.parametrize("answer", ODD, ids=lambda a: "object()" if type(a) is object else repr(a))
def test_odd_answers_get_a_verdict_not_an_exception(checker, answer):
    v = checker(answer)
    assert v.ok is False and v.message
    if answer is None or answer is Ellipsis:
        assert "Replace the None" in v.message


def test_numpy_numbers_are_numbers():
    assert ex.ch3_multi_ring_busbw(np.float64(200.0)).ok and ex.ch3_hierarchical_inter_bytes(np.int64(187_500_000)).ok


@pytest.mark.parametrize("checker, answer, ok, hint", [(ex.ch3_multi_ring_busbw, *case) for case in [
    (200, True, "min(4 NICs x 50 GB/s, 8/7 x 450 GB/s) = 200 GB/s"),
    (50, False, "one NIC: the flat ring's bound"),
    (400, False, "count the NICs, not the GPUs"),
    (450, False, "NVLink bound"),
    (8 / 7 * 450, False, "NVLink bound"),
    (200 / 1.875, False, "Give busbw"),
    (1600, False, "not bits"),
    (123, False, "take the smaller"),
]] + [(ex.ch3_all_to_all_time, *case) for case in [
    (0.015, True, "750 MB to other nodes"),
    (0.75e9 / 400e9, False, "cannot add up a node's NICs"),
    (31 / 32 * 1e9 / 50e9, False, "only the bytes for GPUs on other nodes"),
    (1e9 / 50e9, False, "only the bytes for GPUs on other nodes"),
    (0.03, False, "each byte once"),
    (15, False, "not milliseconds"),
    (0.5, False, "its own NIC's"),
]] + [(ex.ch3_hierarchical_inter_bytes, *case) for case in [
    (187.5e6, True, "2(N-1)/N x n/g = 187.5 MB"),
    (1.5e9, False, "only its shard"),
    (93.75e6, False, "that is one phase"),
    (2 * 31 / 32 * 1e9, False, "every byte of a flat ring"),
    (2 * 31 / 32 * 1e9 / 8, False, "multi-ring's off-node bytes"),
    (1.75e9, False, "inside its node"),
    (1.0, False, "three phases"),
]])
def test_each_mistake_gets_its_hint(checker, answer, ok, hint):
    v = checker(answer)
    assert v.ok is ok and hint in v.message


def test_multi_ring_bound_is_the_models_busbw_at_large_sizes():
    """The checker's formula and topology's model agree (latency-free links, a huge message)."""
    for nodes, g, k, intra, inter in [(2, 8, 4, "nvlink4", "ib_ndr"), (4, 8, 8, "nvlink3", "ib_hdr"),
                                      (2, 4, 4, "pcie4_x16", "ib_ndr")]:
        zero = lambda name: cost.Link(name, cost.LINKS[name].bandwidth, 0.0, "")  # noqa: E731
        t = topo.Topology(nodes, g, zero(intra), zero(inter), k)
        busbw = topo.breakdown("all_reduce", 1e12, t, "multi_ring")["busbw_GBps"]
        assert ex.ch3_multi_ring_busbw(busbw, nodes, g, k, intra, inter).ok


def test_hierarchical_inter_bytes_is_what_the_algorithm_sends():
    t = topo.Topology(4, 8, "nvlink4", "ib_ndr", 8)
    exact = topo.bytes_by_rank("all_reduce", 2**20 * 4, t, "hierarchical", itemsize=4)
    assert ex.ch3_hierarchical_inter_bytes(max(e["inter"] for e in exact), nbytes=2**20 * 4).ok


def test_ch3_best_all_reduce():
    one_nic = ex.ch3_best_all_reduce("hierarchical")
    assert one_nic.ok and "flat_ring" in one_nic.message
    assert "one NIC per node" in ex.ch3_best_all_reduce("multi_ring").message
    assert "leaves each node through one NIC" in ex.ch3_best_all_reduce("flat_ring").message
    assert "one of ['flat_ring', 'multi_ring', 'hierarchical']" in ex.ch3_best_all_reduce("ring").message
    assert ex.ch3_best_all_reduce("multi_ring", nics_per_node=8).ok  # with a NIC per GPU the rings win
    assert "one after another" in ex.ch3_best_all_reduce("hierarchical", nics_per_node=8).message


def test_ch3_share_after_move():
    before = topo.best_algorithm("all_reduce", 4e9, topo.preset("dgx_a100", 2, achievable=True))[1]
    after = topo.best_algorithm("all_reduce", 4e9, topo.preset("dgx_a100", 1, achievable=True))[1]
    want = topo.share_after(0.6, before, after)
    assert 0.45 < want < 0.6  # 8 NICs per node: one node is barely faster than two
    assert ex.ch3_share_after_move(want).ok
    assert "percentage" in ex.ch3_share_after_move(want * 100).message
    assert "seed's figure" in ex.ch3_share_after_move(0.15).message
    assert "compute stays the same" in ex.ch3_share_after_move(after / before * 0.6).message
    one_nic = topo.Topology(2, 8, topo.ACHIEVABLE["nvlink3"], topo.ACHIEVABLE["ib_hdr"], 1)
    wrong = topo.share_after(0.6, topo.best_algorithm("all_reduce", 4e9, one_nic)[1], after)
    assert "one NIC each" in ex.ch3_share_after_move(wrong).message
    assert not math.isclose(wrong, want, rel_tol=0.1)
