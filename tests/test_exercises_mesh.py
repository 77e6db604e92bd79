"""commlib.exercises.ch8: right answers pass, each typical mistake gets its hint, odd answers never raise."""

import numpy as np
import pytest

from commlib import plan
from commlib.exercises import ch8 as ex

FWD = plan.cp_bytes_per_rank(1, 131072, 1024, 8, 2)
BLOCK = 2 * (131072 // 8) * 1024 * 2


@pytest.mark.parametrize("answer, ok, hint", [
    (FWD, True, "leaves it 7 times"),
    (np.int64(FWD), True, ""),
    (FWD / 2, False, "K *and* V"),
    (8 * BLOCK, False, "cp - 1 hops"),
    (FWD / 2 * 1, False, "K *and* V"),
    (FWD / 2 / 1 * 1, False, ""),
    (FWD * 8, False, "s/cp tokens"),
    (BLOCK, False, "that is one block"),
    (FWD + plan.cp_backward_bytes_per_rank(1, 131072, 1024, 8, 2), False, "adds the backward"),
    (123, False, "count how many"),
    ("lots", False, "should be a number"),
])
def test_ch8_cp_bytes(answer, ok, hint):
    v = ex.ch8_cp_bytes(answer)
    assert v.ok is ok and hint in v.message


@pytest.mark.parametrize("balance, answer, ok, hint", [
    ("contiguous", 31, True, "zigzag: 17"),
    ("zigzag", 17, True, "contiguous: 31"),
    ("contiguous", 32, False, "upper half of the diagonal"),
    ("contiguous", 17, False, "zig-zag's"),
    ("zigzag", 31, False, "contiguous layout's last rank"),
    ("contiguous", 136, False, "all ranks together"),
    ("contiguous", 3, False, "the first rank"),
    ("zigzag", 5, False, "draw the 2cp x 2cp grid"),
])
def test_ch8_busiest(balance, answer, ok, hint):
    v = ex.ch8_busiest(answer, 8, balance)
    assert v.ok is ok and hint in v.message


@pytest.mark.parametrize("src, dst, answer, ok, hint", [
    ("Partial", "Shard(0)", "reduce_scatter", True, "reduce_scatter"),
    ("Partial", "Shard(0)", "all_reduce", False, "half the work"),
    ("Partial", "Replicate", "all_reduce", True, ""),
    ("Shard(0)", "Shard(1)", "all_to_all", True, "Gloo has no all-to-all"),
    ("Shard(0)", "Shard(1)", "all_gather", False, "one piece each"),
    ("Shard(0)", "Replicate", "reduce_scatter", False, "nothing to add"),
    ("Replicate", "Shard(1)", "none", True, "takes its piece"[:0] or "keeps its piece"),
    ("Replicate", "Shard(1)", "all_gather", False, "already holds everything"),
    ("Partial", "Shard(0)", "broadcast", False, "choose one of"),
    ("Partial", "Shard(0)", 3, False, "a name, in quotes"),
])
def test_ch8_redistribute(src, dst, answer, ok, hint):
    v = ex.ch8_redistribute(answer, src, dst)
    assert v.ok is ok and hint in v.message


@pytest.mark.parametrize("answer, ok, hint", [
    (0.007, True, "7 ms exposed"),
    (7, False, "not milliseconds"),
    (0.028, False, "without overlap"),
    (0.008, False, "the first step uses the rank's own block"),
    (0.001, False, "that is one step"),
    (0.5, False, "max(transfer, attention)"),
])
def test_ch8_ring_exposed(answer, ok, hint):
    v = ex.ch8_ring_exposed(answer, 8, 0.004, 0.003)
    assert v.ok is ok and hint in v.message


@pytest.mark.parametrize("call, words", [
    (lambda: ex.ch8_busiest(5, cp=0), "cp"),
    (lambda: ex.ch8_busiest(5, balance="striped"), "balance must be one of"),
    (lambda: ex.ch8_redistribute("none", "Shard(2)", "Replicate"), "src must be one of"),
    (lambda: ex.ch8_redistribute("none", "Shard(0)", "Partial"), "internal use only"),
    (lambda: ex.ch8_ring_exposed(0.1, cp=1), "cp"),
    (lambda: ex.ch8_ring_exposed(0.1, transfer_s=-1), "transfer_s"),
    (lambda: ex.ch8_cp_bytes(0.1, seq=100), "seq"),
])
def test_bad_parameters_name_themselves(call, words):
    with pytest.raises((ValueError, TypeError), match=words):
        call()
