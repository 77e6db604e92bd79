"""commlib.exercises.ch7: right answers pass, each typical mistake gets its hint, odd answers never raise."""

import numpy as np
import pytest

from commlib.exercises import ch7 as ex
from commlib import plan

P, N = 7e9, 16
BSH = 1 * 4096 * 4096 * 2
TP = plan.tp_bytes_per_rank(1, 4096, 4096, 8)


def _raises():
    raise RuntimeError("boom")


ODD = [None, ..., "7", b"7", True, np.array([1.0, 2.0]), float("nan"), float("inf"), -1, 10 ** 400, [1, 2], {"a": 1},
       _raises, object(), np.float64("nan"), 1 + 2j]


@pytest.mark.parametrize("answer, ok, hint", [
    (16 * P / N, True, "ZeRO-3 shards all three"),
    (np.float64(16 * P / N), True, ""),
    (np.int64(7_000_000_000), True, ""),
    (7.0, False, "give bytes, not GB"),
    (16 * P, False, "(DDP)"),
    (4 * P + 12 * P / N, False, "that is ZeRO-1"),
    (2 * P + 14 * P / N, False, "that is ZeRO-2"),
    (4 * P / N, False, "Adam's fp32 master weights"),
    (12 * P / N, False, "optimizer state only"),
    (8 * P / N, False, "16 bytes per parameter"),
    (16 * P * (N - 1) / N, False, "does *not* hold"),
    (123.0, False, "2 + 2 + 12 bytes per parameter"),
    (None, False, "Replace the None"),
])
def test_ch7_zero3_memory(answer, ok, hint):
    v = ex.ch7_zero3_memory(answer, P, N)
    assert v.ok is ok and hint in v.message


@pytest.mark.parametrize("answer, ok, hint", [
    (TP, True, "Sequence parallelism sends the same"),
    (TP / 2, False, "forward only"),
    (TP / 4, False, "that is one all-reduce"),
    (8 * BSH, False, "not twice all of it"),
    (4 * BSH, False, "there are 4 of them"),
    (TP / 8, False, "not split over the TP ranks"),
    (TP * 2, False, "not 8"),
    (1.0, False, "count the all-reduces"),
])
def test_ch7_tp_bytes(answer, ok, hint):
    v = ex.ch7_tp_bytes(answer)
    assert v.ok is ok and hint in v.message


def test_ch7_tp_bytes_counts_bytes_not_elements():
    assert "each is 4 bytes" in ex.ch7_tp_bytes(plan.tp_bytes_per_rank(2, 8, 16, 4, 4) / 4, 2, 8, 16, 4, 4).message
    assert ex.ch7_tp_bytes(plan.tp_bytes_per_rank(2, 8, 16, 4, 4), 2, 8, 16, 4, 4).ok


@pytest.mark.parametrize("answer, ok, hint", [
    (3 / 11, True, "GPipe and 1F1B alike"),
    (0.2727, True, ""),
    (100 * 3 / 11, False, "not a percentage"),
    (3 / 8, False, "relative to the ideal"),
    (3 / 12, False, "m + p - 1 slots"),
    (4 / 11, False, "m + p - 1 slots"),
    (1 / 8, False, "draw the schedule"),
    (0.9, False, "count the slots"),
])
def test_ch7_bubble(answer, ok, hint):
    v = ex.ch7_bubble(answer, 4, 8)
    assert v.ok is ok and hint in v.message


@pytest.mark.parametrize("answer, ok, hint", [
    ((8, 4), True, "GPipe runs all 8 forwards"),
    ([8, 4], True, ""),
    (np.array([8, 4]), True, ""),
    ((4, 8), False, "the other way round"),
    ((4, 4), False, "GPipe runs every forward"),
    ((8, 1), False, "that is the last stage"),
    ((8, 3), False, "one more"),
    ((8, 6), False, "alternates"),
    ((8,), False, "give two numbers"),
    ("8, 4", False, "give two numbers"),
    ((8, "4"), False, "give two numbers"),
    (8, False, "give two numbers"),
])
def test_ch7_in_flight(answer, ok, hint):
    v = ex.ch7_in_flight(answer, 4, 8)
    assert v.ok is ok and hint in v.message


def test_ch7_in_flight_with_fewer_microbatches_than_stages():
    assert ex.ch7_in_flight((2, 2), pp=4, microbatches=2).ok


@pytest.mark.parametrize("answer, ok, hint", [
    ("D", True, "A: 107.8 (model states)"),
    (" d ", True, ""),
    ("A", False, "model states alone take 107.8 GB"),
    ("B", False, "ZeRO-3's gathered layers"),
    ("C", False, "+ 2.1 (fp32 logits) = 102.0 GB > 80 GB"),
    ("E", False, "one letter of"),
    (4, False, "one letter of"),
])
def test_ch7_which_fits(answer, ok, hint):
    v = ex.ch7_which_fits(answer)
    assert v.ok is ok and hint in v.message


def test_exactly_one_option_fits():
    m, hw = plan.MODELS["llama2_7b"], plan.hardware("dgx_h100", 2)
    fits = [k for k, c in ex.fits_options().items() if plan.estimate(m, hw, c, 128).fits]
    assert fits == ["D"]


@pytest.mark.parametrize("answer", ODD)
def test_odd_answers_never_raise(answer):
    for check in (ex.ch7_zero3_memory, ex.ch7_tp_bytes, ex.ch7_bubble, ex.ch7_in_flight, ex.ch7_which_fits):
        v = check(answer)
        assert v.ok is False and v.message, (check.__name__, answer)
