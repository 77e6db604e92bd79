"""commlib.exercises.ch5: right answers pass, each typical mistake gets its hint, odd answers never raise."""

import math

import numpy as np
import pytest

from commlib.exercises import ch5 as ex
from commlib.compression import bytes_per_rank, crossover_bandwidth

M, N, R, P = 1024, 4096, 4, 8
RING = 2 * (P - 1) / P
K = 10_000  # round(0.01 * 10**6)
TOPK_P = 16
BW = crossover_bandwidth("powersgd", (4096, 4096), 8, 2e-3, "tcp100", rank=4)
SAVED = bytes_per_rank("none", (4096, 4096), 8) - bytes_per_rank("powersgd", (4096, 4096), 8, rank=4)

ODD = [None, ..., "12", True, float("nan"), float("inf"), -1, 10**400, np.float32(3.0), [1, 2], {"a": 1},
       object(), np.arange(3), lambda: 1]


@pytest.mark.parametrize("answer, ok, hint", [
    (RING * R * (M + N) * 4, True, "fewer"),
    (np.float64(RING * R * (M + N) * 4), True, ""),
    (RING * M * N * 4, False, "plain all-reduce"),
    (R * (M + N) * 4, False, "2(p-1)/p"),
    (RING * R * M * 4, False, "both factors"),
    (RING * R * (M + N), False, "values, not bytes"),
    ((P - 1) / P * R * (M + N) * 4, False, "not gathered"),
    (12345, False, "count the values"),
])
def test_ch5_powersgd_bytes(answer, ok, hint):
    v = ex.ch5_powersgd_bytes(answer, m=M, n=N, rank=R, world_size=P)
    assert v.ok is ok and hint in v.message


@pytest.mark.parametrize("answer, ok, hint", [
    ((TOPK_P - 1) * K * 8, True, "would send more"),
    ((TOPK_P - 1) * K * 4, False, "index"),
    (2 * (TOPK_P - 1) / TOPK_P * K * 8, False, "grow like p - 1"),
    (TOPK_P * K * 8, False, "to itself"),
    (K * 8, False, "one rank's message"),
    (7, False, "k = round"),
])
def test_ch5_topk_bytes(answer, ok, hint):
    v = ex.ch5_topk_bytes(answer, numel=10**6, fraction=0.01, world_size=TOPK_P)
    assert v.ok is ok and hint in v.message


@pytest.mark.parametrize("answer, ok, hint", [
    (BW, True, "GB/s"),
    (BW * 1.01, True, ""),
    (BW / 1e9, False, "bytes per second"),
    (BW * 8, False, "bits"),
    (SAVED / 2e-3, False, "latencies again"),
    (1e12, False, "set the two times equal"),
])
def test_ch5_crossover(answer, ok, hint):
    v = ex.ch5_crossover(answer)
    assert v.ok is ok and hint in v.message


def test_ch5_crossover_says_whether_it_pays_on_the_link():
    assert BW > 12.5e9 and "pays there" in ex.ch5_crossover(BW).message  # tcp100: 12.5 GB/s, below the crossover
    nvlink = crossover_bandwidth("powersgd", (4096, 4096), 8, 2e-3, "nvlink4", rank=4)
    assert nvlink < 450e9 and "loses there" in ex.ch5_crossover(nvlink, link="nvlink4").message


@pytest.mark.parametrize("answer, ok, hint", [
    (["fp16", "powersgd"], True, "linear"),
    (["fp16", "powersgd"], True, "one scale per rank, are all-gathered"),
    ({"powersgd", "fp16", "none"}, True, ""),
    (("PowerSGD ", "FP16"), True, ""),
    (["fp16", "powersgd", "topk"], False, "all-gather"),
    (["powersgd", "int8"], False, "own scale"),
    (["fp16", "powersgd", "fp8"], False, "FP8 floats themselves add"),      # not int8's wrap-around: the per-rank scale
    (["fp16", "powersgd", "fp8"], False, "one scale per rank"),
    (["fp16", "powersgd", "int8", "fp8"], False, "log2(p) more bits"),
    (["fp16"], False, "linear in M"),
    ("powersgd", False, "fp16 values add"),
    (["fp16", "powersgd", "gzip"], False, "unknown"),
    (42, False, "list of method names"),
])
def test_ch5_allreduce_compatible(answer, ok, hint):
    v = ex.ch5_allreduce_compatible(answer)
    assert v.ok is ok and hint in v.message


@pytest.mark.parametrize("checker", [ex.ch5_powersgd_bytes, ex.ch5_topk_bytes, ex.ch5_crossover,
                                     ex.ch5_allreduce_compatible])
@pytest.mark.parametrize("answer", ODD, ids=lambda a: type(a).__name__)
def test_odd_answers_get_a_verdict_not_an_exception(checker, answer):
    v = checker(answer)
    assert v.ok is False and isinstance(v.message, str) and v.message


def test_none_asks_for_an_answer():
    assert all("Replace the None" in c(None).message for c in (ex.ch5_powersgd_bytes, ex.ch5_topk_bytes,
                                                               ex.ch5_crossover, ex.ch5_allreduce_compatible))
    assert math.isfinite(BW)


def test_ch5_fp8_hint_is_not_int8s():
    """Issue 63: FP8 floats can be summed in flight (NCCL's ncclFloat8e4m3/e5m2 on sm90+); commlib's fp8 codes cannot
    because of their per-rank scale, not because codes wrap around as int8's do."""
    fp8, int8 = (ex.ch5_allreduce_compatible(["fp16", "powersgd", m]).message for m in ("fp8", "int8"))
    assert fp8 != int8 and "log2(p)" not in fp8 and "ncclFloat8e4m3" in fp8
