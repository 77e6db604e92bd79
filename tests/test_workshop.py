"""commlib.exercises.workshop: the chapter 11 scenario's numbers, and checkers that accept every right answer and name the
usual mistakes."""

import math

import numpy as np
import pytest
import torch

from commlib import cost, overlap, plan, precision
from commlib import topology as topo
from commlib.exercises import workshop as ws
from odd_answers import ODD_ANSWERS, Hostile, verdict_failures

ONE, TWO = ws.CLUSTERS


def test_the_model_is_llama_2_7b():
    assert ws.params() == 6_738_415_616                       # Llama-2-7B, its RMSNorm weights included
    assert len(ws.tensors()) == 291                            # 2 + 9 x 32 + 1, as in its state dict
    assert ws.tensors().count(4096) == 65                      # 2 RMSNorms per layer and the final one
    assert ws.params() - ws.MODEL.params == 65 * 4096          # plan's preset leaves only the norms out


def test_the_clusters_are_dgx_h100_nodes_at_the_speeds_nccl_reaches():
    for name, nodes in ws.CLUSTERS.items():
        assert ws.hardware(name).topology == topo.preset("dgx_h100", nodes, achievable=True)
        assert ws.hardware(name, achievable=False).topology == topo.preset("dgx_h100", nodes)
        assert ws.global_batch(name) == 4 * 8 * nodes
    two = ws.hardware(TWO)
    assert (two.nodes, two.gpus_per_node, two.nics_per_node, two.inter.bandwidth) == (2, 8, 8, 48e9)
    with pytest.raises(ValueError, match="cluster must be one of"):
        ws.check_allreduce_time(1.0, "a TPU pod")


# ----------------------------------------------------------------------------------------- W1
def test_ddp_does_not_fit_and_the_hints_name_the_missing_bytes():
    p = ws.params()
    assert plan.model_state_bytes(p) == 16 * p > ws.hardware(ONE).gpu_memory
    assert ws.check_model_states(16 * p).ok and ws.check_model_states(16 * ws.MODEL.params).ok
    assert "107.8 GB" in ws.check_model_states(16 * p).message
    assert "Adam adds 12" in ws.check_model_states(4 * p).message             # forgot the optimizer states
    assert "Megatron-LM's default" in ws.check_model_states(18 * p).message  # fp32 main gradients
    assert "not GB" in ws.check_model_states(16 * p / 1e9).message
    assert "exact count" in ws.check_model_states(16 * 7e9).message
    assert "ZeRO-3 on 16" in ws.check_model_states(p).message


# ----------------------------------------------------------------------------------------- W2
def test_every_configuration_that_fits_is_right_and_every_other_is_not():
    for name in ws.CLUSTERS:
        hw, batch = ws.hardware(name), ws.global_batch(name)
        fits, count = plan.search(ws.MODEL, hw, batch, ws.ASSUME)
        right = {e.config for e in fits}
        assert len(right) > 100 and count > len(right)
        for config, _ in plan.configurations(ws.MODEL, hw, batch):
            assert ws.check_fits(config, name).ok == (config in right), config


def test_configurations_that_do_not_fit_get_the_reason():
    assert "this is DDP" in ws.check_fits(plan.Config(dp=16), TWO).message
    assert "activations" in ws.check_fits(plan.Config(dp=16, zero_stage=1), TWO).message
    assert "cannot run on the 16 GPUs" in ws.check_fits(plan.Config(dp=8, zero_stage=1, microbatches=2), TWO).message
    assert "cannot run" in ws.check_fits(plan.Config(dp=16, zero_stage=1, microbatches=3), TWO).message
    assert ws.check_fits({"dp": 16, "zero_stage": 1, "microbatches": 2}, TWO).ok
    assert "give a configuration" in ws.check_fits((16, 1, 1), TWO).message
    assert "does not make one" in ws.check_fits({"data_parallel": 16}, TWO).message


def test_the_reference_is_the_fastest_fit_pure_data_parallelism_with_zero_1():
    for name in ws.CLUSTERS:
        e = ws.reference(name)
        assert e.fits and (e.config.tp, e.config.pp, e.config.zero_stage) == (1, 1, 1)
        assert e.config.dp == ws.hardware(name).world and e.config.microbatches == 2


# ----------------------------------------------------------------------------------------- W3
def test_two_nodes_all_reduce_about_as_fast_as_one():
    one, two = ws.allreduce_s(ONE), ws.allreduce_s(TWO)
    n = 2 * ws.params()
    assert one == pytest.approx(2 * 7 / 8 * n / 370e9, rel=1e-3)               # NVLink4 as NCCL reaches it
    assert two == pytest.approx(2 * 15 / 16 * n / (8 * 48e9), rel=3e-3)        # 8 NICs per node add up
    assert one < two < 1.05 * one
    assert ws.allreduce_s(TWO, algorithm="flat_ring") > 7.5 * two              # one NIC per node: the old error


def test_allreduce_checker_accepts_the_multi_ring_and_names_each_mistake():
    for name in ws.CLUSTERS:
        assert ws.check_allreduce_time(ws.allreduce_s(name), name).ok
        assert "2 bytes per parameter" in ws.check_allreduce_time(2 * ws.allreduce_s(name), name).message
        assert "line rate" in ws.check_allreduce_time(ws.allreduce_s(name, achievable=False), name).message
    n = 2 * ws.params()
    for one_nic in (ws.allreduce_s(TWO, algorithm="flat_ring"), cost.collective_time("all_reduce", n, 16, "ib_ndr")):
        assert "priced on one NIC" in ws.check_allreduce_time(one_nic, TWO).message
    assert "one-node time" in ws.check_allreduce_time(ws.allreduce_s(ONE), TWO).message
    assert "one after" in ws.check_allreduce_time(ws.allreduce_s(TWO, algorithm="hierarchical"), TWO).message
    assert "384 GB/s" in ws.check_allreduce_time(ws.allreduce_s(TWO), TWO).message
    # the verdict says what NCCL runs by default (nccl-tests #212, #196), not only the ring it priced
    assert "By default NCCL runs NVLS" in ws.check_allreduce_time(ws.allreduce_s(ONE), ONE).message
    assert "tree or NVLSTree" in ws.check_allreduce_time(ws.allreduce_s(TWO), TWO).message


def test_the_nvls_verdict_prices_nvidias_measured_busbw_not_only_the_bound():
    """nccl-tests #212: NVLS on 8 H100 reaches busbw ~480 GB/s (algbw ~275), not the model's bound, 370 x 8/9 algbw."""
    n = ws.params() * ws.GRAD_BYTES
    bound = topo.collective_time("all_reduce", n, ws.hardware(ONE).topology, "in_network")
    measured = n * cost.bus_factor("all_reduce", 8) / 480e9
    assert n / measured / 1e9 == pytest.approx(274.3, abs=0.1) and measured > 1.15 * bound
    message = ws.check_allreduce_time(ws.allreduce_s(ONE), ONE).message
    assert f"{bound * 1e3:.1f} ms by the model's bound, about {measured * 1e3:.0f} ms at the busbw NVIDIA measures" in message


# ----------------------------------------------------------------------------------------- W4
def test_step_time_of_any_fitting_configuration():
    e = ws.reference(TWO)
    c = e.config
    assert e.step_s == pytest.approx(e.times["compute"] + ws.allreduce_s(TWO), rel=1e-3)  # ZeRO-1 sends an all-reduce
    assert ws.check_step_time(e.step_s, c, TWO).ok
    assert "computation alone" in ws.check_step_time(e.times["compute"], c, TWO).message
    assert "dp_overlap=0" in ws.check_step_time(e.step_s - e.times["dp_exposed"], c, TWO).message  # = compute here
    split = plan.Config(dp=8, tp=2, zero_stage=1, microbatches=2)
    s = ws.estimate(split, TWO)
    assert ws.check_step_time(s.step_s, split, TWO).ok
    assert "add the data-parallel" in ws.check_step_time(s.step_s - s.times["dp_exposed"], split, TWO).message
    assert "one of them" in ws.check_step_time(e.step_s / c.microbatches, c, TWO).message
    piped = plan.Config(dp=8, pp=2, zero_stage=1, microbatches=4)
    p = ws.estimate(piped, TWO)
    assert p.fits and p.times["bubble"] > 0
    assert ws.check_step_time(p.step_s, piped, TWO).ok
    assert "bubble" in ws.check_step_time(p.step_s - p.times["bubble"], piped, TWO).message
    assert "first find a configuration" in ws.check_step_time(1.7, None, TWO).message
    assert "does not fit" in ws.check_step_time(1.7, plan.Config(dp=16), TWO).message


def test_weak_scaling_the_same_step_on_one_and_two_nodes():
    one, two = ws.reference(ONE), ws.reference(TWO)
    assert two.step_s == pytest.approx(one.step_s, rel=0.01)
    assert ws.exposed_comm_s(two) == pytest.approx(two.step_s - two.times["compute"])


# ----------------------------------------------------------------------------------------- W5
def test_exposed_communication_by_the_notebook_route():
    hw, sizes = ws.hardware(TWO), [2 * t for t in ws.tensors()]
    buckets = [sum(sizes[i] for i in b) for b in overlap.make_buckets(sizes)]
    compute = [ws.backward_s(TWO) * b / sum(sizes) for b in buckets]
    comm = [topo.collective_time("reduce_scatter", b, hw.topology, "multi_ring") for b in buckets]
    tail = overlap.simulate(compute, comm).exposed_comm_s
    gather = topo.collective_time("all_gather", 2 * ws.params(), hw.topology, "multi_ring")
    assert ws.exposed_s(TWO) == pytest.approx(tail + gather)
    assert tail == pytest.approx(comm[-1])                            # the last bucket, the embedding's
    assert buckets[-1] / 2**20 == pytest.approx(250, rel=0.01)
    assert ws.check_exposed(tail + gather, TWO).ok


def test_exposed_hints():
    tail, gather = ws.timeline(TWO).exposed_comm_s, ws.param_gather_s(TWO)
    assert "all-gather" in ws.check_exposed(tail, TWO).message
    assert "last bucket" in ws.check_exposed(gather, TWO).message
    assert "most of the reduce-scatter" in ws.check_exposed(ws.reference(TWO).times["dp"], TWO).message
    assert "overlap_param_gather" in ws.check_exposed(ws.exposed_s(TWO, overlap_param_gather=True), TWO).message
    assert "always exposed" in ws.check_exposed(0, TWO).message


def test_the_gather_ahead_of_forward_waits_only_for_its_first_bucket_here():
    _, comm, sizes = ws.buckets(TWO)
    ahead = ws.gather_ahead_s(TWO)
    first = topo.collective_time("all_gather", sizes[-1], ws.hardware(TWO).topology, "multi_ring")
    assert ahead == pytest.approx(first)                               # forward order: the embedding first
    assert ahead == pytest.approx(ws.timeline(TWO).exposed_comm_s)     # a gather takes what a reduce-scatter takes
    assert ws.step_s(TWO, overlap_param_gather=True) < ws.step_s(TWO) < ws.reference(TWO).step_s


def test_the_gather_ahead_is_bounded_by_the_gathers():
    """With a tiny backward the forward waits on every gather: then the exposed part is nearly all of them."""
    hw = ws.hardware(TWO)
    total = topo.collective_time("all_gather", 2 * ws.params(), hw.topology, "multi_ring")
    assert ws.gather_ahead_s(TWO) < total
    assert ws.gather_ahead_s(TWO, 6400) > ws.gather_ahead_s(TWO)


# ----------------------------------------------------------------------------------------- W6
def test_every_cap_up_to_the_embedding_ties_and_larger_ones_lose():
    assert ws.check_best_bucket(25, TWO).ok and ws.check_best_bucket(100, TWO).ok
    for cap in (400, 1600, 6400):
        assert not ws.check_best_bucket(cap, TWO).ok and "bigger" in ws.check_best_bucket(cap, TWO).message
    assert "250 MiB" in ws.check_best_bucket(25, TWO).message
    assert ws.backward_s(TWO) > 10 * ws.timeline(TWO).comm_s              # the notebook: "more than ten times"
    assert "choose one of" in ws.check_best_bucket(30, TWO).message


# ----------------------------------------------------------------------------------------- W7
def test_precision_bf16_for_gradients_below_fp16s_normal_range():
    assert ws.gradient_rms() == pytest.approx(1 / math.sqrt(ws.params()))
    assert ws.gradient_rms() < torch.finfo(torch.float16).tiny
    for name in ws.CLUSTERS:
        assert ws.check_precision("bf16", name).ok
    assert "smallest normal" in ws.check_precision("fp16", TWO).message
    assert "Dividing before" in ws.check_precision("predivide", TWO).message
    assert "Dividing before" not in ws.check_precision("fp16", TWO).message
    assert "4 bytes" in ws.check_precision("fp32_accumulate", TWO).message
    table = ws.precision_table(TWO)
    assert set(table) == set(precision.STRATEGIES) and table["bf16"]["flushed_to_zero"] == 0
    assert ws.check_precision("BF16", TWO).ok and ws.check_precision(" Bf16 ", TWO).ok   # a name in any case


def test_bf16_wins_only_at_this_small_scale_fp16_is_more_precise_at_magnitude_one():
    """W7's discussion: at magnitude 1 FP16 (11 significant bits) is more precise than BF16 (8); at the job's RMS,
    below FP16's smallest normal number, BF16 is."""
    dp = ws.reference(TWO).config.dp
    err = {(m, s): precision.experiment(dp, m, s)["mean_rel_error"] for m in (1.0, ws.gradient_rms())
           for s in ("fp16", "bf16")}
    assert err[1.0, "bf16"] > 4 * err[1.0, "fp16"] and err[ws.gradient_rms(), "bf16"] < err[ws.gradient_rms(), "fp16"]
    assert "At magnitude 1 FP16 is the more precise" in ws.check_precision("bf16", TWO).message


def test_fp32_reduction_costs_under_a_millisecond_here():
    assert 0 < ws.step_s(TWO, grad_bytes=4) - ws.step_s(TWO) < 1e-3      # the notebook's claim
    assert ws.timeline(TWO, grad_bytes=4).comm_s < ws.backward_s(TWO)


def test_megatrons_default_fp32_gradients_against_the_assumed_bf16():
    """megatron/training/arguments.py: --bf16 reduces in fp32 unless --grad-reduce-in-bf16; the distributed optimizer
    (docs/user-guide/features/dist_optimizer.md) holds 6 + 12/d bytes per parameter with fp32 gradients, 4 + 16/d
    with 16-bit ones, whose fp32 shard copy lives from the optimizer step to zero_grad: forward and backward hold
    4 + 12/d. Buckets of max(40M, 1M x dp) parameters, 160 MB of fp32 (megatron/core/distributed)."""
    for name in ws.CLUSTERS:
        m, d, e = ws.megatron_default(name), ws.reference(name).config.dp, ws.reference(name)
        assert m["bytes_per_param"] == pytest.approx(6 + 12 / d) and m["assumed_bytes_per_param"] == 4 + 16 / d
        assert m["assumed_backward_bytes_per_param"] == 4 + 12 / d == e.memory["model_states"] / ws.MODEL.params
        assert m["assumed_step_memory"] == pytest.approx((4 + 16 / d) * ws.MODEL.params)
        assert m["assumed_step_memory"] < 0.6 * e.memory["total"]        # "far below the peak of backward"
        assert m["bucket_mib"] * 2**20 == 160e6
        assert m["memory"] == pytest.approx(e.memory["total"] + 2 * ws.MODEL.params)
        assert m["reduce_scatter_s"] > 1.6 * m["assumed_reduce_scatter_s"]   # twice the bytes, fewer buckets
        assert m["exposed_s"] > m["assumed_exposed_s"]


def test_the_shortest_tail_is_the_embedding_alone_and_megatrons_cap_adds_to_it():
    """Chapter 11's W6: the last bucket holds the embedding's gradient; caps of 25 and 100 MiB add only the first
    RMSNorm to it, Megatron's default (max(40M, 1M x dp) parameters, 80 MB of BF16) a 32 MiB projection too."""
    embedding = ws.MODEL.vocab * ws.MODEL.hidden * ws.GRAD_BYTES
    megatron = max(ws.MEGATRON_BUCKET, 1_000_000 * ws.reference(TWO).config.dp) * ws.GRAD_BYTES
    assert round(megatron / 1e6) == 80
    tails = {cap: ws.timeline(TWO, cap).exposed_comm_s for cap in (25, 100, megatron / 2**20)}
    assert [ws.buckets(TWO, cap)[2][-1] - embedding for cap in (25, 100)] == [8192, 8192]   # the first RMSNorm
    assert ws.buckets(TWO, megatron / 2**20)[2][-1] - embedding == 32 * 2**20 + 8192 and tails[megatron / 2**20] > tails[25]
    assert tails[25] == tails[100] and "little else shares its bucket" in ws.check_best_bucket(25, TWO).message


def test_simple_protocol_latency_is_three_times_ll_and_still_hides():
    """NCCL 2.30.7 tuning.cc, a Ring reduce-scatter on 2 x 8 H100: LL 6.6 + 14 x 1.0 + 2.7 us, Simple 8.4 + 14 x 3.4
    (NVLink's Simple hop, above 3 x the 1 us net overhead) + 14 us = 70 us; with it the 25 MiB buckets still hide."""
    from commlib.cost import links

    ll, simple = (links.nccl_latency("reduce_scatter", 2, 8, "ring", p) for p in ("LL", "Simple"))
    assert (links.NCCL_BASE_LATENCY["ring"][2], links.NCCL_HW_LATENCY["net"]["ring"][2],
            links.NCCL_HW_LATENCY["nvlink"]["ring"][2]) == (8.4, 14.0, 3.4)
    assert simple * 1e6 == pytest.approx(8.4 + 14.0 + 14 * 3.4) and round(simple / ll) == 3
    compute, comm, _ = ws.buckets(TWO, 25)
    tl = overlap.simulate(compute, [c + simple - ll for c in comm])
    assert tl.comm_s < ws.backward_s(TWO) and tl.exposed_comm_s < 1.1 * ws.timeline(TWO, 25).exposed_comm_s


def test_small_buckets_pay_nccls_latency_not_2p_network_hops():
    """The 25 MiB buckets' reduce-scatters on 2 nodes: each pays NCCL's Ring/LL latency, 6.6 + (15 - 1) x 1.0 + 2.7 us
    (tuning.cc: nsteps p-1, nInterSteps nNodes-1), not 15 x 5 + 6.6."""
    _, comm, sizes = ws.buckets(TWO)
    hw = ws.hardware(TWO).topology
    lat = topo.breakdown("reduce_scatter", sizes[0], hw, "multi_ring")["latency_s"]
    assert lat * 1e6 == pytest.approx(6.6 + 14 * 1.0 + 2.7)
    assert comm[0] == pytest.approx(topo.collective_time("reduce_scatter", sizes[0], hw, "multi_ring"))


# ------------------------------------------------------------------ odd answers: a Verdict, never an exception
CHECKERS = {
    "check_model_states": [ws.check_model_states],
    "check_fits": [lambda a: ws.check_fits(a, ONE), lambda a: ws.check_fits(a, TWO)],
    "check_allreduce_time": [lambda a: ws.check_allreduce_time(a, ONE), lambda a: ws.check_allreduce_time(a, TWO)],
    "check_step_time": [lambda a: ws.check_step_time(a, ws.reference(TWO).config, TWO),
                        lambda a: ws.check_step_time(1.7, a, TWO)],           # the configuration is the learner's too
    "check_exposed": [lambda a: ws.check_exposed(a, TWO)],
    "check_best_bucket": [lambda a: ws.check_best_bucket(a, TWO)],
    "check_precision": [lambda a: ws.check_precision(a, TWO)],
}

# configurations a learner might build: wrong types, out of range, huge, hostile, numpy, valid but not fitting
ODD_CONFIGS = [(f"Config(dp={label})", plan.Config(dp=v)) for label, v in
               [("16.0", 16.0), ("hostile", Hostile()), ("10**400", 10**400), ("-16", -16), ("0", 0), ("nan", math.nan),
                ("'16'", "16"), ("None", None), ("np.int64(16)", np.int64(16)), ("tensor", torch.tensor(16))]]
ODD_CONFIGS += [("zero_stage=True", plan.Config(dp=16, zero_stage=True)),
                ("zero_stage=5", plan.Config(dp=16, zero_stage=5)),
                ("zero_stage=1.0", plan.Config(dp=16, zero_stage=1.0, microbatches=2)),
                ("ep=2", plan.Config(dp=16, ep=2)), ("tp=3", plan.Config(dp=4, tp=4, pp=1)),
                ("microbatches=10**400", plan.Config(dp=16, zero_stage=1, microbatches=10**400)),
                ("numpy fields", plan.Config(dp=np.int64(16), zero_stage=np.int64(1), microbatches=np.int8(2))),
                ("dict of a hostile", {"dp": Hostile()}), ("empty dict", {}), ("dict with None", {"dp": None})]


def test_every_checker_is_in_the_odd_answer_table():
    names = {name for name in dir(ws) if name.startswith(("ch", "check")) and callable(getattr(ws, name))}
    assert names == set(CHECKERS)


@pytest.mark.parametrize("name", CHECKERS)
def test_odd_answers_get_a_verdict_never_an_exception(name):
    for check in CHECKERS[name]:
        assert verdict_failures(check, ODD_ANSWERS + ODD_CONFIGS) == []


def test_numpy_and_tensor_answers_are_numbers():
    assert ws.check_model_states(np.float64(16 * ws.params())).ok
    assert ws.check_allreduce_time(np.float32(ws.allreduce_s(TWO)), TWO).ok
    assert ws.check_exposed(torch.tensor(ws.exposed_s(TWO), dtype=torch.float64), TWO).ok
    assert ws.check_best_bucket(np.int64(25), TWO).ok
    assert "far too large" in ws.check_allreduce_time(10**400, ONE).message
    assert "one of them, not an array of shape (2,)" in ws.check_best_bucket(np.array([25, 400]), TWO).message
    assert "Replace the None" in ws.check_fits(None, TWO).message
    assert "Replace the None" in ws.check_step_time(None, None, TWO).message


@pytest.mark.parametrize("kwargs, words", [({"grad_bytes": 0}, "grad_bytes must be a finite number of bytes a value > 0"),
                                           ({"grad_bytes": [1]}, "grad_bytes must be"),
                                           ({"grad_bytes": float("nan")}, "grad_bytes"),
                                           ({"bucket_cap_mb": 0}, "bucket_cap_mb must be"),
                                           ({"bucket_cap_mb": -1.0}, "bucket_cap_mb must be")])
def test_bucket_parameters_are_named_not_divided_by_or_replicated(kwargs, words):
    """Before: step_s(grad_bytes=0) divided by zero; buckets(grad_bytes=[1]) built a 5.6 GB list."""
    for fn in (ws.buckets, ws.step_s):
        with pytest.raises((ValueError, TypeError), match=words):
            fn(ONE, **kwargs)
