"""commlib.precision: constructed cases with exactly known answers, and live runs that match the simulation."""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

import commlib as cl
from commlib import precision as pr

cloudpickle.register_pickle_by_value(sys.modules[__name__])
MAX16 = 65504.0


def per_rank(values):
    return [torch.tensor(v, dtype=torch.float32) for v in values]


def test_fp16_overflows_exactly_when_a_partial_sum_passes_65504():
    # 4 ranks of 20000: the mean (20000) fits fp16, the sum (80000) does not
    grads = per_rank([[20000.0]] * 4)
    assert torch.isinf(pr.simulate_reduction(grads, "fp16")).all()
    # 3 ranks of 20000 (sum 60000 < 65504) do not overflow, and the mean is exact
    assert pr.simulate_reduction(per_rank([[20000.0]] * 3), "fp16").item() == 20000.0
    # the fixes
    for strategy in ("fp32_accumulate", "predivide", "pre_post_divide", "bf16"):
        out = pr.simulate_reduction(grads, strategy)
        assert torch.isfinite(out).all(), strategy
    assert pr.simulate_reduction(grads, "fp32_accumulate").item() == 20000.0


def test_ring_partial_sums_overflow_even_when_the_total_would_not():
    # + 60000, + 60000, - 60000, - 60000: total 0, but in ring/sequential order a partial sum hits 120000
    grads = per_rank([[60000.0], [60000.0], [-60000.0], [-60000.0]])
    assert torch.isinf(pr.simulate_reduction(grads, "fp16", order="sequential")).all() or \
        torch.isnan(pr.simulate_reduction(grads, "fp16", order="sequential")).all()
    # the ring starts chunk 0 at rank 1: 60000 + (-60000) ... the order decides
    ring = pr.simulate_reduction(grads, "fp16", order="ring")
    assert pr.simulate_reduction(grads, "fp32_accumulate").item() == 0.0
    assert pr.simulate_reduction(grads, "bf16").item() == 0.0
    assert ring.item() == 0.0  # 60000 + -60000 + -60000 + 60000 never passes 65504 in magnitude
    # interleave so that every order meets a big partial sum
    grads = per_rank([[40000.0], [40000.0], [-40000.0], [-40000.0]])
    report = pr.report(pr.simulate_reduction(grads, "fp16", order="sequential"), grads)
    assert report["inf"] + report["nan"] == 1


def test_fp32_accumulate_is_exact_where_the_mean_is_representable():
    g = torch.Generator().manual_seed(0)
    grads = [torch.randint(-2048, 2048, (1000,), generator=g).float() for _ in range(8)]
    exact = pr.exact_mean(grads)
    representable = exact.half().double() == exact
    out = pr.simulate_reduction(grads, "fp32_accumulate")
    assert representable.sum() > 100
    assert torch.equal(out.double()[representable], exact[representable])
    # plain fp16 is not: its partial sums round
    assert not torch.equal(pr.simulate_reduction(grads, "fp16").double()[representable], exact[representable])


def test_predivide_flushes_small_gradients_to_zero():
    # 2^-24 is fp16's smallest subnormal; divided by 8 it rounds to 0 on every rank
    tiny = 2.0 ** -24
    grads = per_rank([[tiny, 1.0]] * 8)
    out = pr.simulate_reduction(grads, "predivide")
    assert out[0].item() == 0.0 and out[1].item() == 1.0
    assert pr.report(out, grads)["flushed_to_zero"] == 1
    assert pr.simulate_reduction(grads, "fp16")[0].item() == tiny  # sum 8*2^-24 = 2^-21, / 8 = 2^-24
    assert pr.simulate_reduction(grads, "fp32_accumulate")[0].item() == tiny


@pytest.mark.parametrize("p, f", [(1, 1), (2, 2), (4, 2), (8, 4), (16, 4), (32, 8), (64, 8), (6, 4), (3, 2)])
def test_fsdp_predivide_factor(p, f):
    assert pr.predivide_factor(p) == f


def test_pre_post_divide_keeps_both_ends():
    # p = 16, f = 4: 16 x 15000 = 240000 overflows plain fp16, 16 x 15000/4 = 60000 does not;
    # 2^-22 / 16 = 2^-26 rounds to 0 (predivide), 2^-22 / 4 = 2^-24 is fp16's smallest subnormal
    big = per_rank([[15000.0]] * 16)
    small = per_rank([[2.0 ** -22]] * 16)
    assert torch.isinf(pr.simulate_reduction(big, "fp16")).all()
    assert pr.simulate_reduction(small, "predivide").item() == 0.0
    kept = pr.simulate_reduction(big, "pre_post_divide").item()
    assert abs(kept - 15000.0) <= 16 * 32 / 4  # finite; partial sums above 32768 round to multiples of 32
    assert pr.simulate_reduction(small, "pre_post_divide").item() == 2.0 ** -22
    # and where even f is too much: 16 x 30000 / 4 = 120000 still overflows
    assert torch.isinf(pr.simulate_reduction(per_rank([[30000.0]] * 16), "pre_post_divide")).all()


def test_sum_of_ones_stalls_at_2048_in_fp16():
    assert pr.sequential_sum_of_ones(3000) == 2048.0
    assert pr.sequential_sum_of_ones(3000, torch.bfloat16) == 256.0
    assert pr.sequential_sum_of_ones(3000, torch.float32) == 3000.0


def test_formats_come_from_finfo():
    rows = {r["dtype"]: r for r in pr.formats()}
    assert rows["float16"]["max"] == MAX16 and rows["float16"]["eps"] == 2.0 ** -10
    assert rows["float16"]["min_normal"] == 2.0 ** -14 and rows["float16"]["min_subnormal"] == 2.0 ** -24
    assert rows["bfloat16"]["mantissa_bits"] == 7 and rows["float16"]["mantissa_bits"] == 10


def test_orders_differ_only_by_rounding():
    g = torch.Generator().manual_seed(1)
    grads = [torch.randn(257, generator=g) for _ in range(5)]
    exact = pr.exact_mean(grads).float()
    for order in pr.ORDERS:
        out = pr.simulate_reduction(grads, "fp16", order)
        assert torch.allclose(out, exact, atol=5e-3), order


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(strategy="fp8"), ValueError, "strategy must be one of"),
    (dict(order="butterfly"), ValueError, "order must be one of"),
    (dict(grads=[]), TypeError, "non-empty list"),
    (dict(grads=[torch.ones(2), torch.ones(3)]), ValueError, "same shape"),
    (dict(grads=[torch.ones(2, dtype=torch.int32)]), TypeError, "floating-point"),
])
def test_bad_inputs(kwargs, exc, words):
    args = dict(grads=[torch.ones(2)] * 2, strategy="fp16", order="ring") | kwargs
    with pytest.raises(exc) as info:
        pr.simulate_reduction(args["grads"], args["strategy"], args["order"])
    assert words in str(info.value)


@pytest.mark.parametrize("call, exc, words", [
    (lambda: pr.predivide_factor(0), ValueError, "world_size must be an int >= 1"),
    (lambda: pr.predivide_factor(8.0), TypeError, "world_size"),
    (lambda: pr.data_parallel_grads(0, 1.0), ValueError, "world_size must be an int >= 1"),
    (lambda: pr.data_parallel_grads(-2, 1.0), ValueError, "world_size"),
    (lambda: pr.data_parallel_grads(4, 1.0, numel=-1), ValueError, "numel must be an int >= 1"),
    (lambda: pr.data_parallel_grads(4, 1.0, numel=0), ValueError, "numel"),
    (lambda: pr.data_parallel_grads(4, float("inf")), ValueError, "magnitude must be a finite number > 0"),
    (lambda: pr.data_parallel_grads(4, float("nan")), ValueError, "magnitude"),
    (lambda: pr.data_parallel_grads(4, 0.0), ValueError, "magnitude"),
    (lambda: pr.data_parallel_grads(4, 10**400), ValueError, "magnitude"),
    (lambda: pr.data_parallel_grads(4, "big"), TypeError, "magnitude"),
    (lambda: pr.data_parallel_grads(4, 1.0, spread=float("nan")), ValueError, "spread"),
    (lambda: pr.data_parallel_grads(4, 1.0, seed=0.5), TypeError, "seed"),
    (lambda: pr.experiment(0, 1.0, "fp16"), ValueError, "world_size"),
    (lambda: pr.experiment(8, float("inf"), "fp16"), ValueError, "magnitude"),
    (lambda: pr.experiment(8, 1.0, "fp16", numel=-5), ValueError, "numel"),
    (lambda: pr.error_vs_world_size([2, 0], 1.0), ValueError, "world_sizes[1] must be an int >= 1"),
    (lambda: pr.error_vs_world_size([], 1.0), ValueError, "world_sizes must list at least one"),
    (lambda: pr.error_vs_world_size([2], 1.0, numel=0), ValueError, "numel"),
    (lambda: pr.error_vs_world_size([2], float("inf")), ValueError, "magnitude"),
    (lambda: pr.error_vs_world_size([2], 1.0, strategies=["fp8"]), ValueError, "strategy must be one of"),
    (lambda: pr.report(torch.ones(3), [torch.ones(4)] * 2), ValueError, "result must have the shape"),
    (lambda: pr.report(torch.ones(1), [torch.ones(4)] * 2), ValueError, "result must have the shape"),  # broadcasts
    (lambda: pr.report(torch.ones(4), [torch.ones(4), torch.ones(5)]), ValueError, "same shape"),
    (lambda: pr.report([1.0] * 4, [torch.ones(4)] * 2), TypeError, "result must be a tensor"),
    (lambda: pr.report(torch.ones(4), []), TypeError, "grads must be a non-empty list"),
    (lambda: pr.sequential_sum_of_ones(-1), ValueError, "count must be an int >= 0"),
    (lambda: pr.sequential_sum_of_ones(2.5), TypeError, "count"),
    (lambda: pr.sequential_sum_of_ones(3, torch.int32), TypeError, "dtype must be a floating-point"),
])
def test_invalid_inputs_name_the_parameter(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value)


def test_numpy_numbers_are_accepted():
    import numpy as np

    assert pr.predivide_factor(np.int64(16)) == 4
    grads = pr.data_parallel_grads(np.int64(4), np.float32(10.0), numel=np.int32(16), spread=np.float64(0.5),
                                   seed=np.int64(3))
    assert all(torch.equal(a, b) for a, b in zip(grads, pr.data_parallel_grads(4, 10.0, 16, 0.5, 3)))
    assert pr.experiment(np.int64(8), np.float64(1e-6), "bf16", numel=np.int64(64)) == \
        pr.experiment(8, 1e-6, "bf16", numel=64)
    assert pr.error_vs_world_size(np.array([2, 4]), np.float32(1000.0), ["fp16"], numel=np.int64(64)) == \
        pr.error_vs_world_size([2, 4], 1000.0, ["fp16"], numel=64)
    assert pr.sequential_sum_of_ones(np.int64(3000)) == 2048.0


def rank_grad(seed, scale, numel):
    g = torch.Generator().manual_seed(seed * 100 + dist.get_rank())
    return torch.randn(numel, generator=g) * scale


def live_all(seed, scale, numel):
    grad = rank_grad(seed, scale, numel)
    return {(s, a): pr.live_reduction(grad, s, a) for s in pr.STRATEGIES for a in ("ring", "builtin")}


@pytest.mark.parametrize("scale", [1.0, 3e4, 1e-6])  # ordinary, overflowing, underflowing gradients
def test_live_ring_matches_the_simulation_bit_for_bit(cluster4, scale):
    numel = 1003
    out = cluster4.run(live_all, 7, scale, numel)
    grads = [torch.randn(numel, generator=torch.Generator().manual_seed(700 + r)) * scale for r in range(4)]
    mag = torch.stack(grads).abs().sum(0)
    for strategy in pr.STRATEGIES:
        sim = pr.simulate_reduction(grads, strategy, "ring")
        for rank in range(4):
            live = out[rank][strategy, "ring"]
            assert torch.equal(live.isnan(), sim.isnan()), (strategy, rank)
            assert torch.equal(live.nan_to_num(), sim.nan_to_num()), (strategy, rank)
            # Gloo sums in its own order: the same up to rounding, bounded by the magnitudes summed
            builtin = out[rank][strategy, "builtin"]
            eps = torch.finfo(torch.bfloat16 if strategy == "bf16" else torch.float16).eps
            bound = 2 * (4 + 1) * eps * mag / 4 + 2.0 ** -24
            finite = torch.isfinite(sim) & torch.isfinite(builtin)
            assert ((builtin - sim).abs()[finite] <= bound[finite]).all(), (strategy, rank)
            if scale != 3e4:  # where partial sums overflow, which ones do depends on the order
                assert torch.equal(torch.isinf(builtin), torch.isinf(sim)), (strategy, rank)


def test_predivide_factor_is_torchs():
    default_hooks = pytest.importorskip("torch.distributed.algorithms._comm_hooks.default_hooks")
    for p in range(1, 129):
        assert pr.predivide_factor(p) == default_hooks.DefaultState._get_gradient_predivide_factor(p), p


def test_overflow_grows_with_world_size_and_magnitude():
    lost = lambda p, m, s: (lambda r: r["inf"] + r["nan"])(pr.experiment(p, m, s, numel=2048))  # noqa: E731
    assert lost(2, 100.0, "fp16") == 0
    assert 0 < lost(16, 3000.0, "fp16") < lost(64, 3000.0, "fp16")
    assert lost(16, 3000.0, "fp16") < lost(16, 10000.0, "fp16")
    for s in ("fp32_accumulate", "predivide", "bf16"):
        assert lost(64, 3000.0, s) == 0, s
    # FSDP's split (f = 8 at p = 64) keeps a factor 8 less headroom than predividing by 64: some values go
    assert 0 < lost(64, 3000.0, "pre_post_divide") < lost(64, 3000.0, "fp16") / 10
    # small gradients: casting to fp16 already flushes the tiniest (below 2^-25); dividing by 64 first flushes
    # far more; bf16 has fp32's range and flushes none
    flushed = {s: pr.experiment(64, 1e-6, s, numel=2048)["flushed_to_zero"] for s in pr.STRATEGIES}
    assert flushed["predivide"] > 10 * flushed["fp32_accumulate"] > 0
    assert flushed["fp32_accumulate"] == flushed["fp16"] and flushed["bf16"] == 0
    res = pr.error_vs_world_size([2, 8], 1.0, strategies=("fp16", "bf16"), numel=512)
    assert set(res) == {"fp16", "bf16"} and res["bf16"][0][1] > res["fp16"][0][1]  # bf16 keeps fewer bits


def test_fp16_flushes_at_or_below_2_to_the_minus_25_and_rounds_up_above_it():
    """Chapter 4's underflow boundary in torch.float16 arithmetic: 2^-25, half the smallest subnormal, is a tie that
    rounds to even, 0; anything between 2^-25 and 2^-24 rounds up to 2^-24; below the smallest normal number,
    2^-14, the spacing stays 2^-24, so fewer significant bits remain."""
    h, tiny = torch.float16, 2.0 ** -24
    t = torch.tensor(tiny, dtype=h)
    assert torch.finfo(h).smallest_normal == 2.0 ** -14 and (t / 2).item() == 0.0
    assert (t / 1.5).item() == tiny and (t / 1.999).item() == tiny and (t / 2.001).item() == 0.0
    above = torch.nextafter(torch.tensor(2.0 ** -25), torch.tensor(1.0))
    assert torch.tensor(2.0 ** -25).half().item() == 0.0 and above.half().item() == tiny
    assert (torch.tensor(2.0 ** -14, dtype=h) - tiny).item() == 2.0 ** -14 - tiny    # subnormals: multiples of 2^-24
    # so pre-division on 4 ranks flushes a gradient of 2^-24 (quotient 2^-26) and keeps one of 3 x 2^-24 (0.75 x 2^-24)
    assert pr.report(pr.simulate_reduction(per_rank([[tiny]] * 4), "predivide"), per_rank([[tiny]] * 4))[
        "flushed_to_zero"] == 1
    assert pr.simulate_reduction(per_rank([[3 * tiny]] * 4), "predivide")[0].item() == 4 * tiny


def torch_ddp_fp16_grads(values):
    """A one-parameter fp16 model under torch DDP, no hook: each rank's gradient is values[rank]."""
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(len(values[0]), dtype=torch.float16))

        def forward(self, x):
            return (self.w * x).sum()

    model = torch.nn.parallel.DistributedDataParallel(Scale())
    model(torch.tensor(values[dist.get_rank()], dtype=torch.float16)).backward()
    return model.module.w.grad.float()


def test_torch_ddp_without_a_hook_is_the_ddp_default_strategy():
    """DDP multiplies each fp16 gradient by 1/p while copying it into the bucket, then sums in fp16: the
    smallest subnormals flush to zero, big sums still overflow. (p = 2: a sum of two is order-free, so the
    simulation must agree bit for bit with Gloo's.)"""
    tiny = 2.0 ** -24                       # fp16's smallest subnormal: tiny / 2 rounds to 0
    values = [[tiny, 3 * tiny, 40000.0, 1.5, -2.0], [tiny, tiny, 40000.0, 0.25, 1.0]]
    with cl.Cluster(world_size=2, timeout=60) as c:
        live = c.run(torch_ddp_fp16_grads, values)
    sim = pr.simulate_reduction(per_rank(values), "ddp_default")
    assert torch.equal(live[0], sim) and torch.equal(live[1], sim)
    assert sim[0].item() == 0.0                                  # the mean, 2^-24, was flushed
    assert sim[2].item() == 40000.0                              # 20000 + 20000: pre-division avoided overflow
    assert torch.isinf(pr.simulate_reduction(per_rank(values), "fp16"))[2]   # divide-after overflows
