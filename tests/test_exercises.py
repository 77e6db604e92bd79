"""commlib.exercises: right answers pass, wrong ones are rejected with a hint that fits the mistake."""

import sys

import cloudpickle
import numpy as np
import pytest
import torch
import torch.distributed as dist

from commlib import cost as ex_cost
from commlib import exercises as ex
from commlib.exercises import ch4
from conftest import timeout_of
from odd_answers import ODD_ANSWERS, verdict_failures

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("answer, ok, hint", [
    (10, True, "1 + 2 + ... + 4 = 10"),
    (10.0, True, ""),
    (None, False, "Replace the None"),
    (..., False, "Replace the None"),
    ("10", False, "should be a number"),
    (True, False, "should be a number"),
    (4, False, "number of ranks"),
    (3, False, "same result"),
    (24, False, "rank r holds r + 1"),
])
def test_ch0_all_reduce_value(answer, ok, hint):
    v = ex.ch0_all_reduce_value(answer, world_size=4)
    assert v.ok is ok and bool(v) is ok
    assert hint in v.message
    assert repr(v).startswith("Correct." if ok else "Not yet.")


def test_ch0_all_reduce_value_other_world_size():
    assert ex.ch0_all_reduce_value(15, world_size=5).ok
    assert not ex.ch0_all_reduce_value(10, world_size=5).ok


def right_max():
    t = torch.tensor(float((3 * dist.get_rank()) % dist.get_world_size()))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t


def own_value():
    return (3 * dist.get_rank()) % dist.get_world_size()


def summed():
    t = torch.tensor(float((3 * dist.get_rank()) % dist.get_world_size()))
    dist.all_reduce(t)
    return t.item()


def raises():
    raise KeyError("oops")


def only_rank_0_reduces():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.zeros(1))


def test_ch0_rank_max(cluster4):
    assert ex.ch0_rank_max(cluster4, right_max).ok
    assert "every rank returned 3" in ex.ch0_rank_max(cluster4, right_max).message
    assert "Replace the None" in ex.ch0_rank_max(cluster4, None).message
    assert "no parentheses" in ex.ch0_rank_max(cluster4, 3).message
    assert "ReduceOp.MAX" in ex.ch0_rank_max(cluster4, own_value).message
    assert "that is the sum" in ex.ch0_rank_max(cluster4, summed).message
    assert "KeyError" in ex.ch0_rank_max(cluster4, raises).message


def local_max():
    p = dist.get_world_size()
    return float(max((3 * r) % p for r in range(p)))   # the right values, computed alone


def barrier_then_local_max():
    dist.barrier()                                      # a collective that exchanges no values
    return local_max()


def max_by_imported_name():
    from torch.distributed import all_reduce

    t = torch.tensor(float((3 * dist.get_rank()) % dist.get_world_size()))
    all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def max_of_all_gather():
    mine = torch.tensor([float((3 * dist.get_rank()) % dist.get_world_size())])
    pieces = [torch.zeros(1) for _ in range(dist.get_world_size())]
    dist.all_gather(pieces, mine)
    return max(t.item() for t in pieces)


def test_ch0_rank_max_needs_a_collective_not_only_the_values(cluster4):
    """Issue 66: a local max passed 'use one collective'. The checker counts the calls each rank's process group made."""
    for fn in (local_max, barrier_then_local_max):
        v = ex.ch0_rank_max(cluster4, fn)
        assert not v.ok and "called no collective" in v.message and "ReduceOp.MAX" in v.message
    assert ex.ch0_rank_max(cluster4, max_by_imported_name).ok   # however the learner imported it
    assert ex.ch0_rank_max(cluster4, max_of_all_gather).ok      # another single collective
    assert ex.ch0_rank_max(cluster4, right_max).ok              # and the counting leaves the cluster as it was


def test_ch0_rank_max_that_hangs_is_rejected_not_hung(cluster4):
    with timeout_of(cluster4, 2):
        v = ex.ch0_rank_max(cluster4, only_rank_0_reduces)
    assert not v.ok and "same collective" in v.message


@pytest.mark.parametrize("answer, ok, hint", [
    (1.5e6, True, "2(p-1)/p"),
    (0.75e6, False, "one phase"),
    (2e6, False, "limit for many ranks"),
    (6e6, False, "not the whole tensor"),
    (3e6, False, "not the whole tensor"),
    (1e6, False, "count the steps"),
    (None, False, "Replace the None"),
    (123, False, "count the steps"),
])
def test_ch1_ring_bytes(answer, ok, hint):
    v = ex.ch1_ring_bytes(answer, 1e6, 4)
    assert v.ok is ok and hint in v.message


def right_all_gather(shard):
    p, r = dist.get_world_size(), dist.get_rank()
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(p)]
    mine = torch.tensor([shard.numel()])
    # learn the lengths with send/recv (everyone to everyone), then a ring
    for q in range(p):
        if q != r:
            dist.send(mine, dst=q) if r < q else None
            dist.recv(sizes[q], src=q)
            dist.send(mine, dst=q) if r > q else None
    sizes[r] = mine
    lens = [int(s) for s in sizes]
    offs = [sum(lens[:q]) for q in range(p + 1)]
    out = torch.empty(offs[-1])
    out[offs[r]:offs[r + 1]] = shard
    for s in range(p - 1):
        c_send, c_recv = (r - s) % p, (r - s - 1) % p
        reqs = [dist.isend(out[offs[c_send]:offs[c_send + 1]].clone(), (r + 1) % p),
                dist.irecv(out[offs[c_recv]:offs[c_recv + 1]], (r - 1) % p)]
        for q in reqs:
            q.wait()
    return out


def uses_builtin(shard):
    out = [torch.zeros_like(shard) for _ in range(dist.get_world_size())]
    dist.all_gather(out, shard)
    return torch.cat(out)


def wrong_order(shard):
    return right_all_gather(shard).flip(0)


def deadlocks(shard):
    buf = torch.zeros_like(shard)
    dist.recv(buf, src=(dist.get_rank() - 1) % dist.get_world_size())
    return buf


def test_ch1_ring_all_gather(cluster4):
    assert ex.ch1_ring_all_gather(cluster4, right_all_gather).ok
    v = ex.ch1_ring_all_gather(cluster4, uses_builtin)
    assert not v.ok and "only dist.send/recv" in v.message
    v = ex.ch1_ring_all_gather(cluster4, wrong_order)
    assert not v.ok and "offset" in v.message
    assert "Replace the None" in ex.ch1_ring_all_gather(cluster4, None).message
    with timeout_of(cluster4, 2):
        v = ex.ch1_ring_all_gather(cluster4, deadlocks)
    assert not v.ok and "never finished" in v.message


def test_ch2_ring_time():
    from commlib import cost

    link = cost.LINKS["ib_hdr"]
    n, p = 1e6, 8  # all terms matter: 6.6 us per call, 14 x 5 us latency, 1.75 MB / 25 GB/s = 70 us bandwidth
    want = cost.collective_time("all_reduce", n, p, link, "ring")
    assert want == pytest.approx(6.6e-6 + 14 * 5e-6 + 2 * 7 / 8 * n / 25e9)
    assert ex.ch2_ring_time(want, n, p, link).ok
    assert "latency terms" in ex.ch2_ring_time(2 * 7 / 8 * n / 25e9, n, p, link).message
    assert "call latency c = 6.6 µs" in ex.ch2_ring_time(14 * 5e-6 + 2 * 7 / 8 * n / 25e9, n, p, link).message
    assert "per direction" in ex.ch2_ring_time(6.6e-6 + 14 * 5e-6 + 2 * 7 / 8 * n / 50e9, n, p, link).message
    assert "2(p-1) chunks" in ex.ch2_ring_time(n / 25e9, n, p, link).message
    assert "not the whole tensor" in ex.ch2_ring_time(14 * (5e-6 + n / 25e9), n, p, link).message
    assert not ex.ch2_ring_time(1.0, n, p, link).ok


def test_ch2_busbw():
    n, t, p = 1e8, 0.01, 4  # algbw 10 GB/s, busbw 15 GB/s
    assert ex.ch2_busbw(15.0, n, t, p).ok
    assert "that is algbw" in ex.ch2_busbw(10.0, n, t, p).message
    assert "2(p-1)/p" in ex.ch2_busbw(7.5, n, t, p).message
    assert "not bits" in ex.ch2_busbw(120.0, n, t, p).message


def test_ch2_fastest():
    v = ex.ch2_fastest("recursive_doubling", "all_reduce", 8192, 8, "ib_ndr")
    assert v.ok, v.message
    v = ex.ch2_fastest("ring", "all_reduce", 8192, 8, "ib_ndr")
    assert not v.ok and "latency term" in v.message
    assert ex.ch2_fastest("ring", "all_reduce", 1e9, 8, "ib_ndr").ok or ex.ch2_fastest("rabenseifner", "all_reduce", 1e9, 8, "ib_ndr").ok
    assert "choose one of" in ex.ch2_fastest("bcube", "all_reduce", 1e9, 8, "ib_ndr").message


def test_ch4_checkers():
    assert ex.ch4_overflow_world_size(22).ok
    assert "still fits" in ex.ch4_overflow_world_size(21).message
    assert "whole numbers" in ex.ch4_overflow_world_size(65504 / 3000).message
    assert ex.ch4_predivide_factor(8, 32).ok
    assert "plain pre-division" in ex.ch4_predivide_factor(32, 32).message
    assert "power of two" in ex.ch4_predivide_factor(32 ** 0.5, 32).message
    assert ex.ch4_safe_strategy("bf16").ok
    assert "4 bytes" in ex.ch4_safe_strategy("fp32_accumulate").message
    assert "overflow" in ex.ch4_safe_strategy("fp16").message
    assert "overflow" in ex.ch4_safe_strategy("pre_post_divide").message
    assert "flushes" in ex.ch4_safe_strategy("predivide").message
    assert "choose one of" in ex.ch4_safe_strategy("fp8").message
    for name in ("BF16", "Bf16", " bf16 "):                   # issue 66: the name in any case is the name
        assert ex.ch4_safe_strategy(name).ok
    assert "overflow" in ex.ch4_safe_strategy("FP16").message and "4 bytes" in ex.ch4_safe_strategy("FP32_Accumulate").message


def test_ch6_checkers():
    assert ex.ch6_overlapped_step(0.108).ok
    assert "forgets the last bucket" in ex.ch6_overlapped_step(0.100).message
    assert "without overlap" in ex.ch6_overlapped_step(0.180).message
    assert "does not subtract" in ex.ch6_overlapped_step(0.020).message
    from commlib import overlap

    per_layer = 1e8 * 4 / 96  # ~4 MiB layers, 100 ms of backward, 256 ranks on InfiniBand NDR
    times = {}
    for cap in (1, 4, 25, 100, 400, 1600):
        c, m, _ = overlap.buckets_from_layers([per_layer] * 96, [0.1 / 96] * 96, 256, "ib_ndr", bucket_cap_mb=cap)
        times[cap] = overlap.simulate(c, m).total_s
    assert min(times, key=times.get) == 25  # an interior optimum: the exercise has a point
    assert times[1] > 2 * times[25] and times[1600] > 1.1 * times[25]
    assert ex.ch6_best_bucket(25).ok
    assert "latency" in ex.ch6_best_bucket(1).message
    assert "exposed" in ex.ch6_best_bucket(1600).message
    assert "choose one of" in ex.ch6_best_bucket(7).message


def test_ch9_checkers():
    from commlib import cost

    t = cost.collective_time("all_reduce", 4096, 8, "ib_ndr", "ring")
    assert ex.ch9_chunked_time(4096 * t, 16 << 20, 4096, 8, "ib_ndr").ok
    assert "many small ones" in ex.ch9_chunked_time(
        cost.collective_time("all_reduce", 16 << 20, 8, "ib_ndr"), 16 << 20, 4096, 8, "ib_ndr").message
    bw = cost.breakdown("all_reduce", 4096, 8, "ib_ndr")["bandwidth_s"]
    assert "latency" in ex.ch9_chunked_time(4096 * bw, 16 << 20, 4096, 8, "ib_ndr").message
    assert ex.ch9_exposed(0.020, 0.080, 0.050, 0.030).ok
    assert "overlapped part" in ex.ch9_exposed(0.050, 0.080, 0.050, 0.030).message
    assert "busy time" in ex.ch9_exposed(0.100, 0.080, 0.050, 0.030).message
    algbw = 26550272 / 2636.669e-6 / 1e9
    assert ex.ch9_trace_busbw(algbw, 26550272, 2636.669, "all_reduce", 2).ok          # factor 1 on 2 ranks
    assert ex.ch9_trace_busbw(algbw * 1.5, 26550272, 2636.669, "all_reduce", 4).ok
    assert "algbw" in ex.ch9_trace_busbw(algbw, 26550272, 2636.669, "all_reduce", 4).message
    assert "units" in ex.ch9_trace_busbw(algbw * 1e3, 26550272, 2636.669, "all_reduce", 2).message
    assert ex.ch9_kernel_algorithm("ring", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)").ok
    assert ex.ch9_kernel_algorithm("unknown", "ncclDevKernel_AllReduce_Sum_f32_RING_LL").ok
    assert ex.ch9_kernel_algorithm("tree", "ncclDevKernel_AllReduce_Sum_bf16_TREE_LL").ok
    assert "does not prove a ring" in ex.ch9_kernel_algorithm("ring", "ncclDevKernel_AllReduce_Sum_f32_RING_LL").message
    assert ex.ch9_straggler(1, [400.0, 120.0, 390.0]).ok
    assert "arrived first" in ex.ch9_straggler(0, [400.0, 120.0, 390.0]).message
    assert not ex.ch9_straggler(2, [400.0, 120.0, 390.0]).ok
    assert ex.ch9_reprice(0.006, 0.012, 0.008, 0.002).ok
    assert "model alone" in ex.ch9_reprice(0.002, 0.012, 0.008, 0.002).message
    assert "ratio" in ex.ch9_reprice(0.003, 0.012, 0.008, 0.002).message
    assert ex.ch9_replay_wait(0.130, 0.075, 0.045, 0.001, 0.009).ok
    assert "wake-up" in ex.ch9_replay_wait(0.129, 0.075, 0.045, 0.001, 0.009).message
    assert ex.ch9_replay_blind("c").ok and not ex.ch9_replay_blind("b").ok
    sizes = [3, 0.5, 0.5, 1, 2.5]   # MiB, forward order: buckets {2.5}, {1, 0.5, 0.5}, {3} at a 2 MiB cap
    assert ex.ch9_bucket_count(3, sizes, 2).ok
    assert "not split" in ex.ch9_bucket_count(4, sizes, 2).message
    assert "per parameter" in ex.ch9_bucket_count(5, sizes, 2).message
    assert not ex.ch9_bucket_count(2, sizes, 2).ok


# ------------------------------------------------------------------ odd answers: a Verdict, never an exception
# Every checker, with the parameters its notebook passes (grep "exercises.ch" notebooks/*.ipynb).
ANSWER_CHECKERS = {
    "ch0_all_reduce_value": lambda a: ex.ch0_all_reduce_value(a, world_size=4),
    "ch1_ring_bytes": lambda a: ex.ch1_ring_bytes(a, nbytes=100e6, world_size=8),
    "ch2_ring_time": lambda a: ex.ch2_ring_time(a, nbytes=1e6, world_size=8, link=ex_cost.LINKS["ib_hdr"]),
    "ch2_busbw": lambda a: ex.ch2_busbw(a, nbytes=1e9, time_s=0.010, world_size=8),
    "ch2_fastest": lambda a: ex.ch2_fastest(a, "all_reduce", 8e3, 8, "ib_ndr"),
    "ch4_overflow_world_size": lambda a: ex.ch4_overflow_world_size(a, value=3000.0),
    "ch4_predivide_factor": lambda a: ex.ch4_predivide_factor(a, world_size=32),
    "ch4_safe_strategy": lambda a: ex.ch4_safe_strategy(a, world_size=64),
    "ch6_overlapped_step": lambda a: ex.ch6_overlapped_step(a, compute_s=0.100, comm_s=0.080, buckets=10),
    "ch6_best_bucket": lambda a: ex.ch6_best_bucket(a),
    "ch9_chunked_time": lambda a: ex.ch9_chunked_time(a, total_bytes=16 << 20, chunk_bytes=4096, world_size=8,
                                                      link="ib_ndr"),
    "ch9_exposed": lambda a: ex.ch9_exposed(a, compute_s=0.080, comm_s=0.050, overlapped_s=0.030),
    "ch9_trace_busbw": lambda a: ex.ch9_trace_busbw(a, nbytes=26550272, duration_us=2636.669, op="all_reduce",
                                                    group_size=2),
    "ch9_kernel_algorithm": lambda a: ex.ch9_kernel_algorithm(a, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
    "ch9_straggler": lambda a: ex.ch9_straggler(a, [400.0, 120.0, 390.0]),
    "ch9_reprice": lambda a: ex.ch9_reprice(a, measured_s=0.012, model_old_s=0.008, model_new_s=0.002),
    "ch9_replay_wait": lambda a: ex.ch9_replay_wait(a, last_arrival_s=0.075, transfer_s=0.045, wake_s=0.001,
                                                    after_s=0.009),
    "ch9_replay_blind": lambda a: ex.ch9_replay_blind(a),
    "ch9_bucket_count": lambda a: ex.ch9_bucket_count(a, [3, 0.5, 0.5, 1, 2.5], 2),
    "ch10_kind": lambda a: ex.ch10_kind(a, "nan_skip"),
    "ch10_culprit": lambda a: ex.ch10_culprit(a, {"kind": "mismatch", "ranks": [2], "detail": "rank 2 differs"}),
    # chapters 3 and 7 keep their checkers in their own modules; commlib.exercises re-exports them
    "ch3_multi_ring_busbw": lambda a: ex.ch3_multi_ring_busbw(a, nodes=2, gpus_per_node=8, nics_per_node=4,
                                                              intra="nvlink4", inter="ib_ndr"),
    "ch3_all_to_all_time": lambda a: ex.ch3_all_to_all_time(a, nodes=4, gpus_per_node=8, nics_per_node=8, nbytes=1e9),
    "ch3_hierarchical_inter_bytes": lambda a: ex.ch3_hierarchical_inter_bytes(a, nodes=4, gpus_per_node=8, nbytes=1e9),
    "ch3_best_all_reduce": lambda a: ex.ch3_best_all_reduce(a, nodes=2, gpus_per_node=8, nics_per_node=1,
                                                            intra="nvlink3", inter="ib_hdr"),
    "ch3_share_after_move": lambda a: ex.ch3_share_after_move(a, share_before=0.6, preset="dgx_a100", nodes=2,
                                                              nbytes=4e9),
    "ch5_powersgd_bytes": lambda a: ex.ch5_powersgd_bytes(a, m=1024, n=4096, rank=4, world_size=8),
    "ch5_topk_bytes": lambda a: ex.ch5_topk_bytes(a, numel=10**6, fraction=0.01, world_size=16),
    "ch5_crossover": lambda a: ex.ch5_crossover(a),
    "ch5_allreduce_compatible": lambda a: ex.ch5_allreduce_compatible(a),
    "ch7_zero3_memory": lambda a: ex.ch7_zero3_memory(a, params=7e9, dp=16),
    "ch7_tp_bytes": lambda a: ex.ch7_tp_bytes(a, batch=1, seq=4096, hidden=4096, tp=8),
    "ch7_bubble": lambda a: ex.ch7_bubble(a, pp=4, microbatches=8),
    "ch7_in_flight": lambda a: ex.ch7_in_flight(a, pp=4, microbatches=8),
    "ch7_which_fits": lambda a: ex.ch7_which_fits(a),
    "ch8_cp_bytes": lambda a: ex.ch8_cp_bytes(a),
    "ch8_busiest": lambda a: ex.ch8_busiest(a, cp=8, balance="contiguous"),
    "ch8_redistribute": lambda a: ex.ch8_redistribute(a, "Partial", "Shard(0)"),
    "ch8_ring_exposed": lambda a: ex.ch8_ring_exposed(a),
}
FUNCTION_CHECKERS = ("ch0_rank_max", "ch1_ring_all_gather", "ch10_fix_exchange")  # their answers are functions: below


def test_every_checker_is_in_the_odd_answer_tables():
    public = {name for name in dir(ex) if name.startswith(("ch", "check")) and callable(getattr(ex, name))}
    assert public == set(ANSWER_CHECKERS) | set(FUNCTION_CHECKERS)


@pytest.mark.parametrize("name", ANSWER_CHECKERS)
def test_odd_answers_get_a_verdict_never_an_exception(name):
    assert verdict_failures(ANSWER_CHECKERS[name], ODD_ANSWERS) == []


def test_bucket_choices_take_numpy_and_reject_odd_numbers():
    assert ex.ch6_best_bucket(np.int64(25)).ok and ex.ch6_best_bucket(25.0).ok
    assert "choose one of [1, 4, 25, 100, 400, 1600] (MiB): the answer should be a finite" in \
        ex.ch6_best_bucket(float("nan")).message
    assert "not an array of shape (2,)" in ex.ch6_best_bucket(np.array([25, 100])).message


# Parameters are the notebook author's: a nonsensical one is a clear error naming it, and never a hang.
@pytest.mark.timeout(20)
@pytest.mark.parametrize("call, exc, words", [
    (lambda: ex.ch4_overflow_world_size(22, value=0), ValueError, "value must be"),
    (lambda: ex.ch4_overflow_world_size(22, value=float("nan")), ValueError, "value must be"),
    (lambda: ex.ch4_overflow_world_size(22, value=-3000.0), ValueError, "value must be"),
    (lambda: ex.ch4_overflow_world_size(22, value=1.0), ValueError, "value must be large enough"),  # swamps at 2048
    (lambda: ex.ch4_overflow_world_size(22, value=16.0), ValueError, "value must be large enough"),
    (lambda: ex.ch4_overflow_world_size(22, value=1e-9), ValueError, "value must be"),  # 0 in fp16
    (lambda: ex.ch4_overflow_world_size(22, value=1e6), ValueError, "value must be"),   # inf in fp16
    (lambda: ex.ch4_overflow_world_size(22, value="3000"), TypeError, "value must be"),
    (lambda: ex.ch0_all_reduce_value(10, world_size=0), ValueError, "world_size"),
    (lambda: ex.ch1_ring_bytes(1.5e6, nbytes=-1, world_size=4), ValueError, "nbytes"),
    (lambda: ex.ch2_busbw(15.0, nbytes=1e9, time_s=0, world_size=8), ValueError, "time_s"),
    (lambda: ex.ch2_fastest("ring", "allreduce", 8e3, 8, "ib_ndr"), ValueError, "op must be one of"),
    (lambda: ex.ch2_fastest("ring", "all_reduce", 8e3, 2.5, "ib_ndr"), TypeError, "world_size"),
    (lambda: ex.ch4_predivide_factor(8, world_size=0), ValueError, "world_size"),
    (lambda: ex.ch4_safe_strategy("bf16", world_size=0), ValueError, "world_size"),
    (lambda: ex.ch6_overlapped_step(0.108, buckets=0), ValueError, "buckets"),
    (lambda: ex.ch6_overlapped_step(0.108, compute_s="0.1"), TypeError, "compute_s"),
    (lambda: ex.ch6_best_bucket(25, layers=0), ValueError, "layers"),
    (lambda: ex.ch6_best_bucket(25, options=(25, "big")), TypeError, "options[1]"),
    (lambda: ex.ch9_chunked_time(1.0, 16 << 20, 0, 8, "ib_ndr"), ValueError, "chunk_bytes"),
    (lambda: ex.ch9_trace_busbw(1.0, 1e6, 0, "all_reduce", 2), ValueError, "duration_us"),
    (lambda: ex.ch9_kernel_algorithm("ring", "aten::mm"), ValueError, "kernel must be"),
    (lambda: ex.ch9_straggler(0, [1.0]), ValueError, "durations_us"),
    (lambda: ex.ch9_exposed(0.02, compute_s=0.08, comm_s=float("nan"), overlapped_s=0.03), ValueError, "comm_s"),
])
def test_bad_parameters_name_the_parameter(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value)


@pytest.mark.parametrize("value", [17.0, 100.0, 1000.5, 3000.0, 40000.0, 65504.0])
def test_overflow_count_is_the_simulated_sequential_fp16_sum(value):
    from commlib import precision

    p = ch4._fp16_overflow_ranks(value)
    overflows = lambda q: bool(torch.isinf(  # noqa: E731
        precision.simulate_reduction([torch.tensor([value])] * q, "fp16", "sequential")).any())
    assert overflows(p) and not overflows(p - 1)
    assert ex.ch4_overflow_world_size(p, value=value).ok


# The function checkers: answers that are functions doing odd things on the ranks.
def returns_none(*_):
    return None


def returns_text(*_):
    return "3"


def returns_several(*_):
    return torch.arange(3.0)


def returns_array(*_):
    return np.arange(3)


def returns_huge(*_):
    return 10**400


def returns_nan(*_):
    return float("nan")


def returns_list(*_):
    return [torch.zeros(1)]


def returns_lock(*_):
    import threading

    return threading.Lock()  # cannot be pickled back to the parent


def returns_meta(*_):
    return torch.empty(12, device="meta")


def returns_2d(*_):
    return torch.zeros(3, 4)


def returns_complex(*_):
    return torch.zeros(12, dtype=torch.complex64)


def rank_1_dies(*_):
    import os

    if dist.get_rank() == 1:
        os._exit(3)
    return 3.0


def takes_two_arguments(a, b):
    return a


class Returner:  # callable: calling it makes an instance
    pass


def right_exchange(t):
    peer = dist.get_rank() ^ 1
    out = torch.empty_like(t)
    if dist.get_rank() % 2 == 0:
        dist.send(t, peer)
        dist.recv(out, peer)
    else:
        dist.recv(out, peer)
        dist.send(t, peer)
    return out


ODD_FUNCTIONS = [(f.__name__, f) for f in (returns_none, returns_text, returns_several, returns_array, returns_huge,
                                           returns_nan, returns_list, returns_lock, returns_meta, returns_2d,
                                           returns_complex, rank_1_dies, takes_two_arguments, Returner)]
ODD_FUNCTIONS += [("print", print), ("lambda", lambda *_: None)]
ODD_FUNCTIONS += [(label, a) for label, a in ODD_ANSWERS if not callable(a)][::6]  # not functions at all


@pytest.mark.parametrize("name", FUNCTION_CHECKERS)
def test_odd_functions_get_a_verdict_never_an_exception(cluster4, name):
    check = getattr(ex, name)
    with timeout_of(cluster4, 10):
        assert verdict_failures(lambda fn: check(cluster4, fn), ODD_FUNCTIONS) == []
    right = {"ch0_rank_max": right_max, "ch1_ring_all_gather": right_all_gather, "ch10_fix_exchange": right_exchange}
    assert check(cluster4, right[name]).ok  # the cluster still works


def test_function_checkers_name_what_went_wrong(cluster4):
    assert "rank 0 returned None: end your function with return" in ex.ch0_rank_max(cluster4, returns_none).message
    assert "the result of rank 0 should be one number, got a tensor of shape (3,)" in \
        ex.ch0_rank_max(cluster4, returns_several).message
    assert "the result of rank 0 is far too large" in ex.ch0_rank_max(cluster4, returns_huge).message
    v = ex.ch0_rank_max(cluster4, rank_1_dies)
    assert not v.ok and "rank 1" in v.message and "died" in v.message
    v = ex.ch1_ring_all_gather(cluster4, rank_1_dies)
    assert not v.ok and v.message.startswith("with equal shards, rank 1") and "died" in v.message
    assert "rank 0 returned a torch.float32 tensor on meta" in ex.ch1_ring_all_gather(cluster4, returns_meta).message
    assert "(12 values, shape (3, 4))" in ex.ch1_ring_all_gather(cluster4, returns_2d).message


# ------------------------------------------------------------------ the checkers' own parameters (issue 24)
ODD_PARAMETERS = [0, -1, 2.5, float("nan"), float("inf"), 1e300, 10**400, True, None, "x", [2], np.int64(0)]


def _keyword_checkers():
    import inspect

    for name in dir(ex):
        fn = getattr(ex, name)
        if not (name.startswith("ch") and inspect.isfunction(fn)):
            continue
        params = inspect.signature(fn).parameters
        if list(params)[:1] != ["answer"]:
            continue
        for p, prm in params.items():
            if p != "answer" and prm.default is not inspect.Parameter.empty:
                yield pytest.param(fn, p, id=f"{name}-{p}")


@pytest.mark.parametrize("checker, parameter", list(_keyword_checkers()))
def test_odd_parameters_give_a_verdict_or_name_the_parameter(checker, parameter):
    """Before: OverflowError for world_size=10**400, ZeroDivisionError for compress_s=0, world_size=0,
    act_bytes=0; ch6_overlapped_step(buckets=10**7) ran 50 s into a MemoryError."""
    import signal

    def too_slow(*_):
        raise TimeoutError(f"{checker.__name__}({parameter}=...) ran past 20 s")

    old = signal.signal(signal.SIGALRM, too_slow)
    try:
        for odd in ODD_PARAMETERS + [10**7]:
            signal.alarm(20)
            try:
                assert isinstance(checker(1.0, **{parameter: odd}), ex.Verdict)
            except (ValueError, TypeError) as e:
                assert parameter in str(e), (parameter, odd, e)
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, old)
