"""commlib.compression: closed forms by hand, hooks against single-process references and torch's own hooks,
the error-feedback invariant, bytes counted on the wire against the closed forms."""

import math
import os
import sys

import cloudpickle
import hypothesis.strategies as st
import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings

import commlib as cl
from commlib import compression as cp
from commlib import cost
from commlib.compression import against_torch, tradeoff

cloudpickle.register_pickle_by_value(sys.modules[__name__])

# one bucket: two compressible matrices and two vectors; every total divides by 4 (no uneven ring shards)
SHAPES = [(64, 32), (64,), (16, 48), (16,)]
NUMEL = sum(math.prod(s) for s in SHAPES)  # 2896
METHODS = [("none", {}), ("fp16", {}), ("powersgd", {"rank": 4}), ("topk", {"fraction": 0.1}),
           ("int8", {}), ("fp8", {})]


# ----------------------------------------------------------------------------------- closed forms
def test_closed_forms_by_hand():
    p = 4
    assert cp.bytes_per_rank("none", (256, 256), p) == 2 * 3 / 4 * 65536 * 4
    assert cp.bytes_per_rank("fp16", (256, 256), p) == 2 * 3 / 4 * 65536 * 2
    assert cp.bytes_per_rank("powersgd", (256, 128), p, rank=4) == 2 * 3 / 4 * 4 * (256 + 128) * 4
    assert cp.bytes_per_rank("topk", (1000,), p, fraction=0.01) == 3 * 10 * (4 + 4)
    assert cp.bytes_per_rank("int8", (1000,), p) == 3 * (1000 + 4) == cp.bytes_per_rank("fp8", (1000,), p)
    # PowerSGD leaves vectors and matrices it would not shrink 2x (torch's min_compression_rate) as they are
    assert cp.bytes_per_rank("powersgd", (1000,), p, rank=4) == cp.bytes_per_rank("none", (1000,), p)
    assert cp.bytes_per_rank("powersgd", (10, 256), p, rank=8) == cp.bytes_per_rank("none", (10, 256), p)
    assert cp.bytes_per_rank("powersgd", (10, 256), p, rank=8, min_compression_rate=1) < \
        cp.bytes_per_rank("none", (10, 256), p)
    # a bucket: per matrix, then one all-reduce of the plain tensors, one of the Ps, one of the Qs
    assert cp.collectives("powersgd", SHAPES, p, rank=4) == [
        ("all_reduce", 80 * 4), ("all_reduce", (64 * 4 + 16 * 4) * 4), ("all_reduce", (32 * 4 + 48 * 4) * 4)]
    assert cp.bytes_per_rank("topk", SHAPES, p, fraction=0.1) == 3 * 290 * 8   # k = round(289.6)


def test_all_gather_bytes_grow_with_p_all_reduce_bytes_do_not():
    n = 1 << 20
    ring = [cp.bytes_per_rank("none", (n,), p) for p in (2, 8, 64, 512)]
    topk = [cp.bytes_per_rank("topk", (n,), p, fraction=0.01) for p in (2, 8, 64, 512)]
    assert all(b < 2 * 4 * n for b in ring)
    assert topk == [(p - 1) * round(0.01 * n) * 8 for p in (2, 8, 64, 512)]
    assert topk[-1] > ring[-1] > topk[0]  # 1% top-k sends more than the whole all-reduce at p = 512
    # int8 by all-gather: (p-1)(N+4) against the fp32 ring's 8(p-1)/p N: equal near p = 8, worse beyond
    assert cp.bytes_per_rank("int8", (n,), 4) < cp.bytes_per_rank("none", (n,), 4)
    assert cp.bytes_per_rank("int8", (n,), 16) > cp.bytes_per_rank("none", (n,), 16)


@pytest.mark.parametrize("call, words", [
    (lambda: cp.bytes_per_rank("powersgd", (8, 8), 4, rank=0), "rank must be an int >= 1"),
    (lambda: cp.bytes_per_rank("powersgd", (8, 16), 4, rank=9), "rank must be <= min(m, n) = 8"),
    (lambda: cp.bytes_per_rank("powersgd", (8, 8), 4), "needs rank="),
    (lambda: cp.bytes_per_rank("topk", (8,), 4, fraction=0.0), "fraction must be a finite number > 0 and <= 1"),
    (lambda: cp.bytes_per_rank("topk", (8,), 4, fraction=1.5), "fraction must be a finite number > 0 and <= 1"),
    (lambda: cp.bytes_per_rank("topk", (8,), 4, rank=2, fraction=0.5), "takes ('fraction',)"),
    (lambda: cp.bytes_per_rank("gzip", (8,), 4), "method must be one of"),
    (lambda: cp.bytes_per_rank("none", (8, -1), 4), "shape must be"),
    (lambda: cp.PowerSGDState(rank=0), "rank must be an int >= 1"),
    (lambda: cp.TopKState(fraction=2), "fraction must be a finite number > 0 and <= 1"),
    (lambda: cp.QuantState("int4"), "code must be one of"),
    (lambda: tradeoff.hook_for("gzip"), "method must be one of"),
    (lambda: cp.crossover_bandwidth("topk", (8,), 4, -1.0, "tcp100", fraction=0.5), "compress_s"),
    (lambda: cp.comm_time("none", (8,), 4, "tcp100", compress_s=-1.0), "compress_s must be a finite number"),
    (lambda: cp.comm_time("none", (8,), 4, "tcp100", compress_s=float("nan")), "compress_s must be"),
    (lambda: cp.PowerSGDState(epsilon=float("nan")), "epsilon must be a finite number"),
    (lambda: cp.PowerSGDState(seed=-1), "seed must be an int >= 0"),
    (lambda: cp.bytes_per_rank("none", (8,), 10**400), "world_size must be an int >= 1 and <= 4294967296"),
    (lambda: cp.QuantState(["int8"]), "code must be one of"),
])
def test_bad_input_names_the_parameter(call, words):
    with pytest.raises(ValueError) as info:
        call()
    assert words in str(info.value)


def test_numpy_ints_are_ints():
    np = pytest.importorskip("numpy")
    assert cp.bytes_per_rank("powersgd", (np.int64(64), np.int64(32)), np.int64(4), rank=np.int32(4)) == \
        cp.bytes_per_rank("powersgd", (64, 32), 4, rank=4)


def test_crossover_bandwidth_is_where_the_times_meet():
    shape, p, compress_s = [(1024, 1024), (1024,)], 8, 2e-3
    bw = cp.crossover_bandwidth("powersgd", shape, p, compress_s, "tcp100", rank=4)
    tcp = cost.LINKS["tcp100"]

    def times(bandwidth):
        link = cost.Link("x", bandwidth, tcp.latency, "test", tcp.call_latency)
        return (cp.comm_time("powersgd", shape, p, link, compress_s=compress_s, rank=4),
                cp.comm_time("none", shape, p, link))

    at, below, above = times(bw), times(bw / 2), times(bw * 2)
    assert at[0] == pytest.approx(at[1], rel=1e-12)
    assert below[0] < below[1] and above[0] > above[1]
    # no latency, no compression cost: fewer bytes always win; more bytes never do
    assert cp.crossover_bandwidth("powersgd", shape, p, 0.0, cost.Link("x", 1e9, 0.0, "t"), rank=4) == math.inf
    assert cp.crossover_bandwidth("topk", (1000,), 512, 0.0, "tcp100", fraction=0.5) == 0.0


def test_int8_codes_summed_in_int8_wrap_around():
    out = cp.int8_ring_sum([[100, -5], [100, 3], [100, 1], [100, 0]])
    assert out["exact"].tolist() == [400, -1]
    assert out["ring"].tolist() == [400 - 512, -1] and out["wrapped"].tolist() == [True, False]
    with pytest.raises(ValueError, match=r"\[-128, 127\]"):
        cp.int8_ring_sum([[200], [1]])


# --------------------------------------------------------------------------- single-process references
def grads(rank, step):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(NUMEL, generator=g) * (1 + rank)


def reference(method, p, steps, error_feedback=True, **params):
    """The same compressed means, computed in one process from every rank's gradients."""
    residual = [torch.zeros(NUMEL) for _ in range(p)]
    means = []
    for step in range(steps):
        sent = []
        for r in range(p):
            delta = grads(r, step) + residual[r]
            if method == "topk":
                k = round(params["fraction"] * NUMEL)
                keep = torch.zeros(NUMEL, dtype=torch.bool)
                keep[delta.abs().argsort(descending=True)[:k]] = True
                c = torch.where(keep, delta, torch.zeros(()))
            elif method == "int8":
                scale = delta.abs().max() / 127
                c = torch.clamp(torch.round(delta / scale), -127, 127) * scale
            elif method == "fp8":
                scale = delta.abs().max() / 448
                c = (delta / scale).to(torch.float8_e4m3fn).float() * scale
            else:
                c = delta
            residual[r] = delta - c if error_feedback and method in ("topk", "int8", "fp8") else torch.zeros(NUMEL)
            sent.append(c)
        means.append(sum(sent[1:], sent[0]) / p)
    return means


def run_hook(method, steps, algorithm="builtin", **params):
    """Inside a rank: the method's hook on `steps` buckets of this rank's gradients.
    -> (means, bytes sent per step, true gradients, the residual at the end)."""
    torch.set_num_threads(1)
    state, hook = tradeoff.hook_for(method, cp.HookComm(algorithm), **params)
    stand_ins = [torch.zeros(s) for s in SHAPES]  # hooks read shapes from them and key residuals by them
    means, sent, true = [], [], []
    for step in range(steps):
        g = grads(dist.get_rank(), step)
        before = state.comm.bytes_sent
        bucket = cp.Bucket(0, g.clone(), stand_ins, last=True)
        means.append(hook(state, bucket).wait().clone())
        sent.append(state.comm.bytes_sent - before)
        true.append(g)
    return means, sent, true, state.residual(bucket)


@pytest.mark.parametrize("method, params", [("topk", {"fraction": 0.1}), ("topk", {"fraction": 0.01,
                         "error_feedback": False}), ("int8", {}), ("fp8", {}), ("none", {})])
def test_hooks_match_a_single_process_computation(cluster4, method, params):
    got = cluster4.run(run_hook, method, 3, **params)
    want = reference(method, 4, 3, **params)
    for rank, (means, *_rest) in enumerate(got):
        for step, (a, b) in enumerate(zip(means, want)):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (method, rank, step, (a - b).abs().max())
        assert all(torch.equal(a, b) for a, b in zip(means, got[0][0]))  # every rank applies the same


@pytest.mark.parametrize("method, params", METHODS)
def test_bytes_counted_equal_the_closed_form(cluster4, method, params):
    want = cp.bytes_per_rank(method, SHAPES, 4, **params)
    for algorithm in ("ring", "builtin"):  # ring: the messages themselves (Trace); builtin: the ring's share
        for _, sent, *_rest in cluster4.run(run_hook, method, 2, algorithm, **params):
            assert sent == [want, want], (method, algorithm)


@pytest.mark.parametrize("method, params", [("topk", {"fraction": 0.05}), ("int8", {}), ("fp8", {}),
                                            ("powersgd", {"rank": 2}), ("powersgd", {"rank": 1, "warm_start": False})])
def test_error_feedback_invariant(cluster4, method, params):
    """Sum over steps of what was applied = mean over ranks of (sum of true gradients - residual now)."""
    steps = 5
    got = cluster4.run(run_hook, method, steps, **params)
    applied = sum(got[0][0])
    true = sum(g for _, _, gs, _ in got for g in gs) / 4
    residual = sum(r for *_rest, r in got) / 4
    assert residual.abs().max() > 1e-2  # something was left out, and is accounted for
    assert torch.allclose(applied, true - residual, rtol=1e-4, atol=1e-4), (applied - true + residual).abs().max()


def test_without_error_feedback_the_residual_is_dropped(cluster4):
    got = cluster4.run(run_hook, "topk", 2, fraction=0.1, error_feedback=False)
    assert all(r.abs().max() == 0 for *_rest, r in got)


# ---------------------------------------------------------------------------- against torch's own hooks
@pytest.mark.parametrize("rank, warm_start", [(1, True), (2, False), (4, True)])
def test_powersgd_matches_torchs_powersgd_hook(cluster4, rank, warm_start):
    for steps, ours_sum, theirs_sum in cluster4.run(against_torch.powersgd_pair, rank, warm_start, 6):
        for step, (ours, theirs) in enumerate(steps):
            for a, b in zip(ours, theirs):
                assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), (rank, step, (a - b).abs().max())
        assert torch.allclose(ours_sum, theirs_sum, rtol=1e-4, atol=1e-6)


def fp16_pair(steps):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as dh

    out, *_ = against_torch.ddp_pair((cp.HookState(), cp.fp16_hook), (None, dh.fp16_compress_hook), steps)
    plain, *_ = against_torch.ddp_pair((cp.HookState(), cp.allreduce_hook), (None, dh.allreduce_hook), steps)
    return out + plain


def test_fp16_and_plain_hooks_equal_torchs_bit_for_bit(cluster4):
    for steps in cluster4.run(fp16_pair, 3):
        for ours, theirs in steps:
            assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


# ------------------------------------------------------------------------------------- the trade-off
def test_tradeoff_counts_bytes_and_trains(cluster4):
    variants = {k: tradeoff.VARIANTS[k] for k in ("none", "powersgd r=4", "topk 1%", "topk 1% no EF")}
    rows = {r["variant"]: r for r in tradeoff.tradeoff(cluster4, variants, steps=30)}
    for r in rows.values():
        assert abs(r["bytes_per_step"] - r["closed_form_bytes"]) <= 8, r  # uneven ring shards: a few bytes
        assert r["hook_s"] >= r["comm_s"] > 0
    assert rows["powersgd r=4"]["bytes_per_step"] < rows["none"]["bytes_per_step"] / 10
    assert rows["none"]["test_accuracy"] > 0.5
    assert rows["topk 1%"]["test_loss"] < rows["topk 1% no EF"]["test_loss"]
    assert "overhead ms" in tradeoff.table(list(rows.values()))


class SlowLink:
    """Stands in for an emulated link (network.emulate): a context manager entered around the training."""

    def __enter__(self):
        os.environ["COMPRESSION_TEST_CONTEXT"] = f"entered on rank {dist.get_rank()}"

    def __exit__(self, *exc):
        os.environ["COMPRESSION_TEST_CONTEXT"] = os.environ["COMPRESSION_TEST_CONTEXT"] + ", left"


def test_tradeoff_runs_inside_a_context_on_every_rank(cluster4):
    tradeoff.tradeoff(cluster4, {"none": ("none", {})}, steps=1, context=SlowLink)
    seen = cluster4.run(lambda: os.environ.pop("COMPRESSION_TEST_CONTEXT", None))
    assert seen == [f"entered on rank {r}, left" for r in range(4)]


# ------------------------------------------------------------------------------ on commlib's BucketedDDP
def hooked_both_ways(method, params, steps=3):
    """Inside a rank: the same hook on torch DDP and on BucketedDDP (one bucket each), the same batches."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from commlib import overlap

    torch.set_num_threads(1)
    ours, theirs = overlap.BucketedDDP(against_torch.model()), DDP(against_torch.model())
    ours.register_comm_hook(*tradeoff.hook_for(method, **params))
    theirs.register_comm_hook(*tradeoff.hook_for(method, **params))
    with pytest.raises(RuntimeError, match="only be called once"):
        ours.register_comm_hook(*tradeoff.hook_for(method, **params))
    return len(ours.buckets), against_torch.train_both(ours, theirs, steps)


# PowerSGD from iteration 1: torch DDP's first bucket is in forward order, BucketedDDP's in backward order,
# and the first Qs are drawn in bucket order; from iteration 1 torch's bucket is rebuilt in backward order
@pytest.mark.parametrize("method, params", [("none", {}), ("fp16", {}), ("powersgd", {"rank": 2, "start_iter": 1}),
                                            ("topk", {"fraction": 0.1}), ("int8", {})])
def test_a_hook_gives_the_same_gradients_on_bucketed_ddp_and_torch_ddp(cluster4, method, params):
    # fp16: Gloo adds in fp16 in an order set by a value's place in the bucket, which differs in iteration 0
    tol = {"rtol": 1e-2, "atol": 1e-5} if method == "fp16" else {"rtol": 1e-5, "atol": 1e-7}
    for n_buckets, steps in cluster4.run(hooked_both_ways, method, params):
        assert n_buckets == 1
        for step, (ours, theirs) in enumerate(steps):
            for a, b in zip(ours, theirs):
                assert torch.allclose(a, b, **tol), (method, step, (a - b).abs().max())


# ------------------------------------------------------------------------- emulated slow links pace the hooks
def paced_hook(method, bandwidth, latency, **params):
    """Inside a rank, on 2 emulated nodes of 2 ranks: the method's hook through commlib's ring, twice.
    -> (bytes this rank sent, of them across nodes (trace), the messages the network delivered to this rank)."""
    from commlib.network import emulate

    torch.set_num_threads(1)
    state, hook = tradeoff.hook_for(method, cp.HookComm("ring"), **params)
    stand_ins = [torch.zeros(s) for s in SHAPES]
    with emulate(2, bandwidth, latency) as net:
        for step in range(2):
            hook(state, cp.Bucket(0, grads(dist.get_rank(), step), stand_ins, last=True)).wait()
    crossing = sum(e.nbytes for e in state.comm.trace.events if e.inter_node)
    return state.comm.bytes_sent, crossing, list(net.log)


@pytest.mark.parametrize("method, params", METHODS[:5])
def test_under_emulate_the_hooks_traffic_crosses_paced_nics(cluster4, method, params):
    bandwidth, latency = 50e6, 1e-4
    got = cluster4.run(paced_hook, method, bandwidth, latency, **params)
    sent = [s for s, _, _ in got]
    crossing = [x for _, x, _ in got]
    delivered = [m for _, _, log in got for m in log]
    # ring 0 -> 1 -> 2 -> 3 -> 0 on nodes {0, 1}, {2, 3}: ranks 1 and 3 send every message to the other node
    assert crossing[0] == crossing[2] == 0 and crossing[1] == sent[1] > 0 and crossing[3] == sent[3] > 0
    assert sum(m.nbytes for m in delivered) == sum(crossing)  # every crossing byte went through the emulated NICs
    assert {(m.src, m.dst) for m in delivered} == {(1, 2), (3, 0)}
    for m in delivered:  # ... and none arrived sooner than latency + bytes / bandwidth after it was posted
        assert m.released - m.posted >= latency + m.nbytes / bandwidth - 1e-6, m


def builtin_inside_emulate():
    from commlib.network import emulate

    with emulate(2, 1e9):
        cp.HookComm("builtin").all_reduce(torch.ones(4))


def test_builtin_collectives_are_refused_inside_emulate(cluster4):
    with pytest.raises(cl.RankError, match="does not pace"):
        cluster4.run(builtin_inside_emulate)


def test_link_sweep_runs_on_loopback_and_paced_links(cluster4):
    variants = {k: tradeoff.VARIANTS[k] for k in ("none", "topk 1%")}
    rows = tradeoff.link_sweep(cluster4, [200e6], variants, steps=2)
    assert [(r["bandwidth"], r["variant"]) for r in rows] == [(None, "none"), (None, "topk 1%"),
                                                            (200e6, "none"), (200e6, "topk 1%")]
    for r in tradeoff.on_link(rows):
        assert r["inter_node_bytes_per_step"] is None and r["paced_bytes_per_step"] is None
    for r in tradeoff.on_link(rows, 200e6):  # ranks 1 and 3 send all of their bytes across, all of them paced
        assert r["inter_node_bytes_per_step"] == r["paced_bytes_per_step"]
        assert abs(r["inter_node_bytes_per_step"] - r["bytes_per_step"]) <= 8  # uneven shards: a few bytes
    assert "200 MB/s" in tradeoff.table(rows) and "loopback" in tradeoff.table(rows)


# ------------------------------------------------------------------------- crossovers: measured and modelled
def synthetic_rows(call_s, message_s, compress_s, bandwidths):
    """link_sweep-like rows whose times follow the alpha-beta model exactly (4 ranks, the student's gradients)."""
    rows = []
    for bw in [None, *bandwidths]:
        for name in ("none", "powersgd r=4", "topk 1%", "int8"):
            method, params = tradeoff.VARIANTS[name]
            row = {"variant": name, "method": method, "params": params, "world_size": 4, "bandwidth": bw,
                   "overhead_s": compress_s[name]}
            calls, messages, nbytes = tradeoff._path(row)
            comm = calls * call_s + messages * message_s + (0.0 if bw is None else nbytes / bw)
            rows.append({**row, "comm_s": comm, "step_s": 0.01 + comm + compress_s[name]})
    return rows


def test_loopback_link_recovers_the_costs_per_call_and_per_message():
    rows = synthetic_rows(5e-3, 7e-4, {"none": 0.0, "powersgd r=4": 2e-3, "topk 1%": 1e-3, "int8": 1e-3}, [])
    link = tradeoff.loopback_link(rows, latency=1e-4)
    assert link.call_latency == pytest.approx(5e-3) and link.latency == pytest.approx(7e-4 + 1e-4)
    with pytest.raises(ValueError, match="at least 3 variants"):
        tradeoff.loopback_link(rows[:2])


def test_measured_crossover_is_where_the_model_says_when_times_follow_it():
    compress = {"none": 0.0, "powersgd r=4": 2e-3, "topk 1%": 1e-3, "int8": 1e-3}
    bandwidths = [2e6 * 1.5 ** i for i in range(25)]
    rows = synthetic_rows(5e-3, 7e-4, compress, bandwidths)
    measured = tradeoff.measured_crossovers(rows)
    model = tradeoff.crossovers(tradeoff.on_link(rows), tradeoff.loopback_link(rows))
    b = measured["powersgd r=4"]
    assert b["low"] < model["powersgd r=4"] < b["high"]  # the interpolation brackets the model's value
    assert b["bandwidth"] == pytest.approx(model["powersgd r=4"], rel=0.02)
    # an all-gather makes p-1 messages, an all-reduce 2(p-1): on this latency-bound link top-k wins everywhere
    assert measured["topk 1%"]["bandwidth"] == model["topk 1%"] == math.inf
    assert measured["none"]["bandwidth"] == model["none"] == 0.0
    slower = [{**r, "step_s": r["step_s"] + (1.0 if r["variant"] == "int8" else 0.0)} for r in rows]
    assert tradeoff.measured_crossovers(slower)["int8"]["bandwidth"] == 0.0


# ------------------------------------------------------------------ non-finite gradients (issue 24)
def test_quantize_keeps_the_scale_of_the_finite_values_and_marks_the_rest():
    codes, scale = cp.quantize(torch.tensor([1.0, math.nan, -0.5, math.inf]), "int8")
    assert scale.item() == pytest.approx(1 / 127)
    assert codes.tolist() == [127, -128, -64, -128]  # -128: no finite value uses it
    assert torch.isnan(cp.dequantize(codes, scale)).tolist() == [False, True, False, True]


# Any float32, 1e-30 to 1e30 in size, zeros and subnormals, in a tensor whose largest value sets the scale
_VALUES = st.lists(st.one_of(st.floats(-1e30, 1e30).map(lambda v: float(torch.tensor(v))), st.sampled_from([0.0, -0.0, 1e-45, -3e-42, 1e-38])),
                   min_size=1, max_size=16)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(values=_VALUES, code=st.sampled_from(["int8", "fp8"]))
def test_quantize_round_trip_error_is_half_a_code_step_at_any_magnitude(values, code):
    """Before: fp8 of values below about 6e-43 gave NaN (max|x| / 448 underflowed to a zero scale)."""
    x = torch.tensor(values, dtype=torch.float32)
    codes, scale = cp.quantize(x, code)
    back = cp.dequantize(codes, scale)
    assert torch.isfinite(back).all() and scale.item() >= 2.0**-149
    s = scale.double().item()
    err = (back.double() - x.double()).abs()
    # int8: half a step of the scale; e4m3: half an ulp of 3 mantissa bits (2^-4 relative), or half its
    # smallest subnormal step (2^-9 of the scale); + 2^-149 for rounding the product to a float32
    bound = s / 2 if code == "int8" else torch.maximum(x.double().abs() * 2.0**-4, torch.tensor(s * 2.0**-10))
    assert (err <= bound * (1 + 1e-6) + 2.0**-149).all(), (values, code, s)


def nonfinite_means(method):
    """Rank 0's bucket holds a NaN at 3, rank 1's an inf at 5: the hook's mean and a plain all-reduce's."""
    torch.set_num_threads(1)
    state, hook = tradeoff.hook_for(method, cp.HookComm("builtin"))
    g = grads(dist.get_rank(), 0)
    clean = g.clone()
    g[3 if dist.get_rank() == 0 else 5] = math.nan if dist.get_rank() == 0 else math.inf
    stand_ins = [torch.zeros(s) for s in SHAPES]
    mean = hook(state, cp.Bucket(0, g.clone(), stand_ins, last=True)).wait().clone()
    residual = state.residual(cp.Bucket(0, g, stand_ins, last=True))
    plain = g.clone()
    dist.all_reduce(plain)
    state2, _ = tradeoff.hook_for(method, cp.HookComm("builtin"))   # the same buckets with 0 where rank 0/1 had them
    clean[3 if dist.get_rank() == 0 else 5] = 0.0
    zeroed = hook(state2, cp.Bucket(0, clean, stand_ins, last=True)).wait().clone()
    return mean, plain, zeroed, residual


@pytest.mark.parametrize("method", ["int8", "fp8"])
def test_non_finite_gradients_stay_where_a_plain_all_reduce_puts_them(cluster4, method):
    """AMP's GradScaler must still see the overflow, and only where it happened; no NaN in the residual."""
    for mean, plain, zeroed, residual in cluster4.run(nonfinite_means, method):
        assert torch.equal(torch.isfinite(mean), torch.isfinite(plain))  # non-finite at 3 and 5 only
        assert not torch.isfinite(mean[[3, 5]]).any()
        ok = torch.isfinite(plain)
        assert torch.equal(mean[ok], zeroed[ok])  # the scale came from the finite values
        assert torch.isfinite(residual).all()


MATRICES = [slice(0, 64 * 32), slice(64 * 32 + 64, 64 * 32 + 64 + 16 * 48)]  # SHAPES' two matrices, flat


def powersgd_through_an_overflow(warm_start):
    """Three steps of PowerSGD r=2; at step 1 rank 0's first matrix holds a NaN and rank 1's second matrix an
    inf. Beside it, a state that never saw step 1. -> step 1's mean, then (residual, step 2's mean, Qs) of
    the state that saw the overflow and of the one that did not."""
    torch.set_num_threads(1)
    stand_ins = [torch.zeros(s) for s in SHAPES]
    hit, skipped = cp.PowerSGDState(rank=2, warm_start=warm_start), cp.PowerSGDState(rank=2, warm_start=warm_start)

    def step(state, g):
        return cp.powersgd_hook(state, cp.Bucket(0, g, stand_ins, last=True)).wait().clone()

    for state in (hit, skipped):
        step(state, grads(dist.get_rank(), 0))
    bad = grads(dist.get_rank(), 1)
    if dist.get_rank() < 2:
        bad[MATRICES[dist.get_rank()].start + 7] = math.nan if dist.get_rank() == 0 else math.inf
    mean1 = step(hit, bad)
    residuals = [s.residual(cp.Bucket(0, bad, stand_ins, last=True)) for s in (hit, skipped)]
    after = [step(state, grads(dist.get_rank(), 2)) for state in (hit, skipped)]
    return mean1, residuals, after, [[s.qs.get(id(p)) for p in stand_ins] for s in (hit, skipped)]


@pytest.mark.parametrize("warm_start", [True, False])
def test_powersgd_through_an_overflow_skips_that_step_and_does_not_poison_later_ones(cluster4, warm_start):
    """torch's powerSGD_hook keeps a NaN in its warm-start Q and its residual, so every later step is NaN: under
    AMP, whose first steps overflow on purpose, training never recovers. Here each overflowed matrix is all NaN
    (GradScaler skips the step), the vectors get their usual mean, the residuals are those of before, and (warm
    start) the next step is the one a state that never saw the overflow computes. Without warm start its
    fresh Qs are new draws, so only finiteness is compared."""
    for mean1, (r_hit, r_skipped), (hit2, skipped2), (q_hit, q_skipped) in cluster4.run(
            powersgd_through_an_overflow, warm_start):
        vectors = torch.ones(NUMEL, dtype=torch.bool)
        for m in MATRICES:
            assert torch.isnan(mean1[m]).all()
            vectors[m] = False
        assert torch.isfinite(mean1[vectors]).all()
        assert torch.equal(r_hit, r_skipped) and torch.isfinite(r_hit).all()
        assert torch.isfinite(hit2).all()
        if warm_start:
            assert torch.allclose(hit2, skipped2, rtol=1e-5, atol=1e-5)
            for a, b in zip(q_hit, q_skipped):
                assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, atol=1e-5))


def powersgd_overflow_first(error_feedback):
    """An overflow at PowerSGD's very first step, before any residual exists -> (its mean, the next step's mean,
    the residuals kept)."""
    torch.set_num_threads(1)
    stand_ins = [torch.zeros(s) for s in SHAPES]
    state = cp.PowerSGDState(rank=2, error_feedback=error_feedback)
    bad = grads(dist.get_rank(), 0)
    bad[7] = math.nan
    means = [cp.powersgd_hook(state, cp.Bucket(0, g, stand_ins, last=True)).wait().clone()
             for g in (bad, grads(dist.get_rank(), 1))]
    return means, list(state.residuals.values())


@pytest.mark.parametrize("error_feedback", [True, False])
def test_powersgd_overflow_at_its_first_step_leaves_no_nan_behind(cluster4, error_feedback):
    for (mean0, mean1), residuals in cluster4.run(powersgd_overflow_first, error_feedback):
        assert torch.isnan(mean0[MATRICES[0]]).all() and torch.isfinite(mean1).all()
        assert all(torch.isfinite(r).all() for r in residuals) and len(residuals) == (4 if error_feedback else 0)


def test_after_one_overflow_torchs_powersgd_stays_nan_and_ours_recovers(cluster4):
    """The claim in powersgd.py's docstring and chapter 5, on torch's own hook: if a torch release fixes it,
    this fails and the text must change."""
    for result in cluster4.run(against_torch.powersgd_overflow_vs_torch, 6, 3):
        assert result == {"ours": [True, True, True, False, True, True],
                          "torch": [True, True, True, False, False, False]}


def empty_bucket(method, params):
    state, hook = tradeoff.hook_for(method, cp.HookComm("builtin"), **params)
    before = state.comm.bytes_sent
    out = hook(state, cp.Bucket(0, torch.zeros(0), [torch.zeros(0)], last=True)).wait()
    return out.numel(), state.comm.bytes_sent - before


@pytest.mark.parametrize("method, params", [("topk", {"fraction": 0.1}), ("int8", {}), ("none", {})])
def test_an_empty_bucket_gives_an_empty_mean(cluster4, method, params):
    want = cp.bytes_per_rank(method, (0,), 4, **params)
    assert cluster4.run(empty_bucket, method, params) == [(0, want)] * 4
