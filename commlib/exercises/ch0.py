"""Checkers for the notebooks' exercises: each returns a Verdict, and rejects wrong answers with a hint.

A checker never raises on a wrong, odd or missing answer (the notebook keeps running); it says what is
wrong (commlib.answers reads the answer). `Verdict.ok` is what tests assert on. A nonsensical parameter,
the notebook author's, is a ValueError/TypeError naming it.
"""

from __future__ import annotations

from commlib import _validate as check
from commlib.answers import (Verdict, _choice, _close, _function_problem, _missing, _number,  # noqa: F401
                             _number_problem, _run_on_ranks, _values)

# ------------------------------------------------------------------------------ chapter 0
def ch0_all_reduce_value(answer, world_size: int = 4) -> Verdict:
    """Each rank r holds r + 1; after all_reduce(SUM) every rank holds 1 + 2 + ... + p = p(p+1)/2."""
    world_size = check.integer("world_size", world_size, low=1)
    answer, bad = _number(answer, "the value")
    if bad is not None:
        return bad
    expected = world_size * (world_size + 1) / 2
    if answer == expected:
        return Verdict(True, f"every rank holds 1 + 2 + ... + {world_size} = {expected:g}.")
    if answer == world_size:
        return Verdict(False, "that is the number of ranks; all_reduce with SUM adds the values held by the ranks.")
    if answer in range(1, world_size + 1):
        return Verdict(False, "after an all_reduce every rank holds the same result: the sum over all ranks, "
                              "not only its own value.")
    return Verdict(False, f"add up what the {world_size} ranks hold: rank r holds r + 1.")


def ch0_rank_max(cluster, fn) -> Verdict:
    """fn() must return, on every rank, the maximum over ranks of (3 * rank) % p, computed with a collective."""
    bad = _function_problem(fn)
    if bad is not None:
        return bad
    p = cluster.world_size
    expected = max((3 * r) % p for r in range(p))
    got, bad = _run_on_ranks(cluster, fn, hang="does every rank call the same collective?")
    if bad is not None:
        return bad
    values = []
    for rank, g in enumerate(got):
        if g is None:
            return Verdict(False, f"rank {rank} returned None: end your function with return (the maximum, "
                                  "as a number or a one-element tensor).")
        x, bad = _number(g, f"the result of rank {rank}")
        if bad is not None:
            return bad
        values.append(float(x))
    if values == [expected] * p:
        return Verdict(True, f"every rank returned {expected}.")
    own = [float((3 * r) % p) for r in range(p)]
    if values == own:
        return Verdict(False, "each rank returned its own value: use dist.all_reduce with op=dist.ReduceOp.MAX.")
    if values == [float(sum(own))] * p:
        return Verdict(False, "that is the sum: pass op=dist.ReduceOp.MAX to all_reduce.")
    return Verdict(False, f"expected {expected} on every rank, got {values}.")


# ------------------------------------------------------------------------------ chapter 1
def ch1_ring_bytes(answer, nbytes: float, world_size: int) -> Verdict:
    """Bytes each rank sends in a ring all-reduce of nbytes on p ranks: 2(p-1)/p * nbytes."""
    from commlib import cost

    n, p = check.number("nbytes", nbytes, low=0, unit="bytes"), check.integer("world_size", world_size, low=1)
    answer, bad = _number(answer, "the number of bytes")
    if bad is not None:
        return bad
    want = cost.bytes_sent_per_rank("all_reduce", n, p, "ring")
    close = lambda x: abs(answer - x) <= 1e-6 * max(abs(x), 1)  # noqa: E731
    if close(want):
        return Verdict(True, f"2(p-1)/p * n = 2*{p - 1}/{p} * {n:g} = {want:g} bytes.")
    if close((p - 1) / p * n):
        return Verdict(False, "that is one phase. All-reduce = reduce-scatter + all-gather: both send (p-1)/p * n.")
    if close(2 * n):
        return Verdict(False, "2n is the limit for many ranks. With p ranks each of the 2(p-1) steps sends n/p bytes.")
    if close(2 * (p - 1) * n) or close((p - 1) * n):
        return Verdict(False, "each ring step sends one chunk of n/p bytes, not the whole tensor.")
    if close(n):
        return Verdict(False, "count the steps: 2(p-1) of them, each sending n/p bytes.")
    return Verdict(False, "count the steps (2(p-1)) and the size of one message (n/p).")


_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_single", "all_gather_into_tensor", "all_gather_object",
                "broadcast", "reduce", "reduce_scatter", "reduce_scatter_single", "reduce_scatter_tensor",
                "all_to_all", "all_to_all_single", "scatter", "gather", "gather_object", "broadcast_object_list")


def _run_p2p_only(fn, shard_len_of_rank):
    """Inside a rank: run fn(shard) with the built-in collectives disabled; -> (result, expected)."""
    import torch
    import torch.distributed as dist

    r, p = dist.get_rank(), dist.get_world_size()
    shards = [torch.arange(shard_len_of_rank(q), dtype=torch.float32) + 100 * q for q in range(p)]
    saved = {name: getattr(dist, name) for name in _COLLECTIVES if hasattr(dist, name)}

    def forbidden(*_a, **_k):
        raise RuntimeError("this exercise is about building the collective: use only "
                           "dist.send/recv/isend/irecv, not the built-in collectives")

    try:
        for name in saved:
            setattr(dist, name, forbidden)
        got = fn(shards[r].clone())
    finally:
        for name, f in saved.items():
            setattr(dist, name, f)
    return got, torch.cat(shards)


def ch1_ring_all_gather(cluster, fn) -> Verdict:
    """fn(shard) -> every rank's shard concatenated in rank order, built from send/recv only."""
    bad = _function_problem(fn)
    if bad is not None:
        return bad
    import torch

    for label, lengths in (("equal shards", lambda q: 3), ("shards of different lengths", lambda q: q + 1)):
        out, bad = _run_on_ranks(cluster, _run_p2p_only, fn, lengths, context=f"with {label}, ",
                                 hang="does every send have a matching recv, posted in an order that cannot "
                                      "deadlock (isend + irecv, then wait)?")
        if bad is not None:
            return bad
        for rank, (got, want) in enumerate(out):
            if not isinstance(got, torch.Tensor):
                end = " (does your function end with return?)" if got is None else ""
                return Verdict(False, f"return the gathered tensor; rank {rank} returned {type(got).__name__}{end}.")
            try:
                same = got.shape == want.shape and torch.equal(got, want)
            except Exception as e:  # a meta, sparse or complex tensor
                return Verdict(False, f"with {label}, rank {rank} returned a {got.dtype} tensor on {got.device} "
                                      f"that cannot be compared with the expected one ({type(e).__name__}).")
            if not same:
                return Verdict(False, f"with {label}, rank {rank} returned {_values(got)}, expected {_values(want)}. "
                                      "Is each received chunk stored at the offset of the rank it came from?")
    return Verdict(True, "every rank ends with all shards in rank order, for equal and unequal shard lengths.")


# ------------------------------------------------------------------------------ chapter 2
def ch2_ring_time(answer, nbytes: float, world_size: int, link) -> Verdict:
    """Seconds for a ring all_reduce: c + 2(p-1) alpha + 2(p-1)/p n / B, with B per direction (no gamma)."""
    from commlib import cost

    link = cost._link(link)
    n, p = check.number("nbytes", nbytes, low=0, unit="bytes"), check.integer("world_size", world_size, low=1)
    a, bw, c = link.latency, link.bandwidth, link.call_latency
    answer, bad = _number(answer, "the time in seconds")
    if bad is not None:
        return bad
    want = cost.collective_time("all_reduce", n, p, link, "ring")
    band = 2 * (p - 1) / p * n / bw
    if _close(answer, want):
        return Verdict(True, f"c + 2(p-1)·α + 2(p-1)/p·n/B = {c * 1e3:.4g} ms + {2 * (p - 1) * a * 1e3:.4g} ms + "
                             f"{band * 1e3:.4g} ms = {want * 1e3:.4g} ms.")
    if _close(answer, band):
        return Verdict(False, "close: you have the bandwidth term. Add the latency terms: the call latency c once, "
                              "and 2(p-1) messages of α each.")
    if c and _close(answer, want - c, 0.005):
        return Verdict(False, f"almost: add the call latency c = {c * 1e6:g} µs, paid once per collective "
                              "(NCCL's launch and set-up).")
    if _close(answer, want - band / 2) or _close(answer, want - c - band / 2):
        return Verdict(False, f"the link's {bw / 1e9:g} GB/s is per direction. Do not double it: each rank sends "
                              "on one direction and receives on the other.")
    if _close(answer, n / bw) or _close(answer, a + n / bw) or _close(answer, c + a + n / bw):
        return Verdict(False, "n/B is one message of the whole tensor. The ring sends 2(p-1) chunks of n/p bytes each.")
    if _close(answer, 2 * (p - 1) * (a + n / bw)) or _close(answer, c + 2 * (p - 1) * (a + n / bw)):
        return Verdict(False, "each of the 2(p-1) steps sends one chunk of n/p bytes, not the whole tensor.")
    return Verdict(False, "use t = c + 2(p-1)·α + 2(p-1)/p·n·β, with c the link's call latency, β = 1/B and B the "
                          "per-direction bandwidth.")


def ch2_busbw(answer, nbytes: float, time_s: float, world_size: int) -> Verdict:
    """nccl-tests busbw in GB/s for all_reduce: n / t / 1e9 * 2(p-1)/p."""
    nbytes = check.number("nbytes", nbytes, low=0, unit="bytes")
    time_s = check.number("time_s", time_s, low=0, strict=True, unit="seconds")
    p = check.integer("world_size", world_size, low=1)
    answer, bad = _number(answer, "the bus bandwidth in GB/s")
    if bad is not None:
        return bad
    algbw = nbytes / time_s / 1e9
    want = algbw * 2 * (p - 1) / p
    if _close(answer, want):
        return Verdict(True, f"algbw = n/t = {algbw:.3g} GB/s; busbw = algbw · 2(p-1)/p = {want:.3g} GB/s.")
    if _close(answer, algbw):
        return Verdict(False, "that is algbw (n/t). busbw multiplies it by the all_reduce factor 2(p-1)/p.")
    if _close(answer, algbw * (p - 1) / p):
        return Verdict(False, "(p-1)/p is the factor for all_gather and reduce_scatter; all_reduce does both: 2(p-1)/p.")
    if _close(answer, want * 1e9) or _close(answer, want * 8):
        return Verdict(False, "give GB/s: bytes per second divided by 1e9 (not bits).")
    return Verdict(False, "algbw = n / t in GB/s (1e9 bytes); busbw = algbw · 2(p-1)/p for all_reduce.")


def ch2_fastest(answer, op: str, nbytes: float, world_size: int, link) -> Verdict:
    """Name the algorithm the alpha-beta model says is fastest for this op, size, p and link."""
    from commlib import cost

    if not isinstance(op, str) or op not in cost.PAIRS:
        raise ValueError(f"op must be one of {tuple(cost.PAIRS)}, got {op!r}")
    world_size = check.integer("world_size", world_size, low=1)
    options = [a for a in cost.PAIRS[op]
               if (op, a) not in cost.POWER_OF_TWO_ONLY or cost.is_power_of_two(world_size)]
    answer, bad = _choice(answer, options)
    if bad is not None:
        return bad
    times = {a: cost.collective_time(op, nbytes, world_size, link, a) for a in options}
    best = min(times, key=times.get)
    if answer == best or times[answer] <= times[best] * 1.0001:
        return Verdict(True, f"{answer}: {times[answer] * 1e6:.1f} µs; the others: "
                             + ", ".join(f"{a} {t * 1e6:.1f} µs" for a, t in times.items() if a != answer) + ".")
    b = cost.breakdown(op, nbytes, world_size, link, answer)
    return Verdict(False, f"{answer} takes {times[answer] * 1e6:.1f} µs here, mostly its {b['bottleneck']} term. "
                          f"Compare the number of messages (α) and the bytes (β) of each algorithm at this size.")


# ------------------------------------------------------------------------------ chapter 4
def ch4_overflow_world_size(answer, value: float = 3000.0) -> Verdict:
    """The smallest number of ranks whose fp16 sum of `value` (one per rank) overflows."""
    p = _fp16_overflow_ranks(value)
    answer, bad = _number(answer, "the number of ranks")
    if bad is not None:
        return bad
    if answer == p:
        return Verdict(True, f"{p} x {value:g} = {p * value:g} > 65504 (fp16's max): the sum is inf, although the "
                             f"mean, {value:g}, fits easily.")
    if answer == p - 1:
        return Verdict(False, f"{p - 1} x {value:g} = {(p - 1) * value:g} still fits under 65504.")
    if abs(answer - 65504 / value) < 1:
        return Verdict(False, "ranks come in whole numbers: the smallest p whose sum passes 65504.")
    return Verdict(False, "the sum of p copies passes fp16's largest finite value, 65504, at which p?")


def _fp16_overflow_ranks(value) -> int:
    """The smallest p whose sequential fp16 sum of p copies of value is inf: precision.simulate_reduction's
    "sequential" order (each hop rounds to fp16), one hop at a time. A value whose running sum stops growing
    (swamping: it is under half a unit in the last place of the sum) never overflows: ValueError."""
    import torch

    check.number("value", value, low=0, strict=True)
    v = torch.tensor(value, dtype=torch.float16)
    if not torch.isfinite(v) or v == 0:
        raise ValueError(f"value must be a number > 0 that fp16 represents (<= 65504, >= 6e-8), got {value!r}")
    total, p = v, 1
    while torch.isfinite(total):
        grown = v + total
        if grown == total:
            raise ValueError(f"value must be large enough for an fp16 sum of copies to overflow: with value={value!r} "
                             f"the running sum stops at {float(total):g} (swamping)")
        total, p = grown, p + 1
    return p


def ch4_predivide_factor(answer, world_size: int = 32) -> Verdict:
    """FSDP's gradient predivide factor for world_size."""
    from commlib import precision

    f = precision.predivide_factor(world_size)
    answer, bad = _number(answer, "the factor")
    if bad is not None:
        return bad
    if answer == f:
        return Verdict(True, f"f = {f}: divide by {f} before the sum and by {world_size}/{f} = {world_size / f:g} after.")
    if answer == world_size:
        return Verdict(False, "that is plain pre-division (all of it before the sum). FSDP splits it in two.")
    if answer == world_size ** 0.5:
        return Verdict(False, "close to the idea (about sqrt(p)), but f is a power of two: double f while p % f == 0 "
                              "and p / f > f.")
    return Verdict(False, "start at f = 1 and double it while p % f == 0 and p / f > f.")


def ch4_safe_strategy(answer, world_size: int = 64) -> Verdict:
    """The strategy that, on world_size ranks, neither overflows gradients ~3000 nor flushes more of gradients
    ~1e-6 than casting to fp16 does, while sending 2 bytes per value."""
    from commlib import precision

    world_size = check.integer("world_size", world_size, low=1)
    answer, bad = _choice(answer, precision.STRATEGIES)
    if bad is not None:
        return bad
    big = precision.experiment(world_size, 3000.0, answer)
    small = precision.experiment(world_size, 1e-6, answer)
    base = precision.experiment(world_size, 1e-6, "fp32_accumulate")["flushed_to_zero"]
    overflow = big["inf"] + big["nan"]
    if answer == "fp32_accumulate":
        return Verdict(False, "it is safe, but its partial sums travel in fp32: 4 bytes per value, twice the traffic.")
    if overflow:
        return Verdict(False, f"{answer} loses {overflow} values to overflow with gradients ~3000 on {world_size} ranks.")
    if small["flushed_to_zero"] > base:
        return Verdict(False, f"{answer} flushes {small['flushed_to_zero']} small gradients to zero "
                              f"(casting to fp16 alone flushes {base}).")
    return Verdict(True, f"{answer}: no overflow, nothing flushed, 2 bytes per value. The price is precision: "
                         f"mean relative error {big['mean_rel_error']:.1e} (8 significant bits).")


# ------------------------------------------------------------------------------ chapter 6
def ch6_overlapped_step(answer, compute_s: float = 0.100, comm_s: float = 0.080, buckets: int = 10) -> Verdict:
    """Step time (s) when backward (compute_s) and gradient all-reduce (comm_s) are split into `buckets`
    equal buckets and overlapped on one communication stream."""
    from commlib import overlap

    buckets = check.integer("buckets", buckets, low=1)
    compute_s = check.number("compute_s", compute_s, low=0, unit="seconds")
    comm_s = check.number("comm_s", comm_s, low=0, unit="seconds")
    tl = overlap.simulate([compute_s / buckets] * buckets, [comm_s / buckets] * buckets)
    answer, bad = _number(answer, "the step time in seconds")
    if bad is not None:
        return bad
    want = tl.total_s
    if _close(answer, want, 0.01):
        return Verdict(True, f"{compute_s * 1e3:g} ms of backward, then the last bucket's {comm_s / buckets * 1e3:g} ms "
                             f"that nothing can hide: {want * 1e3:g} ms.")
    if _close(answer, max(compute_s, comm_s), 0.01):
        return Verdict(False, "max(compute, comm) forgets the last bucket: it is ready only when backward ends.")
    if _close(answer, compute_s + comm_s, 0.01):
        return Verdict(False, "that is the step without overlap; with buckets most of the communication runs during backward.")
    if _close(answer, abs(compute_s - comm_s), 0.01):
        return Verdict(False, "overlap hides communication behind computation; it does not subtract one from the other.")
    return Verdict(False, "draw the timeline: bucket i's all-reduce starts when its backward slice ends.")


def ch6_best_bucket(answer, params: float = 1e8, layers: int = 96, backward_s: float = 0.1, world_size: int = 256,
                    link: str = "ib_ndr", options=(1, 4, 25, 100, 400, 1600), bytes_per_param: int = 4) -> Verdict:
    """Which bucket cap (MiB) among `options` gives the shortest overlapped step for this model and cluster?"""
    from commlib import overlap

    layers = check.integer("layers", layers, low=1)
    options = check.numbers("options", options, low=0, strict=True, unit="MiB", item="bucket cap")
    options = [int(o) if o.is_integer() else o for o in options]
    answer, bad = _choice(answer, options, "MiB")
    if bad is not None:
        return bad
    per_layer = check.number("params", params, low=0) * check.number("bytes_per_param", bytes_per_param, low=0) / layers
    backward_s = check.number("backward_s", backward_s, low=0, unit="seconds")

    def step(cap):
        c, m, _ = overlap.buckets_from_layers([per_layer] * layers, [backward_s / layers] * layers, world_size, link,
                                              bucket_cap_mb=cap)
        return overlap.simulate(c, m).total_s

    times = {cap: step(cap) for cap in options}
    best = min(times, key=times.get)
    listing = ", ".join(f"{c} MiB: {t * 1e3:.1f} ms" for c, t in times.items())
    if times[answer] <= times[best] * 1.001:
        return Verdict(True, f"{listing}.")
    if answer < best:
        return Verdict(False, f"{answer} MiB makes many small all-reduces, and each pays the latency c + 2(p-1)·α. "
                              f"{listing}.")
    return Verdict(False, f"{answer} MiB makes a few big buckets; the last one is exposed after backward. {listing}.")


# ------------------------------------------------------------------------------ chapter 8
def ch8_chunked_time(answer, total_bytes: float, chunk_bytes: float, world_size: int, link) -> Verdict:
    """Seconds to all-reduce total_bytes as total_bytes/chunk_bytes separate ring all-reduces."""
    from commlib import cost

    total_bytes = check.number("total_bytes", total_bytes, low=0, unit="bytes")
    chunk_bytes = check.number("chunk_bytes", chunk_bytes, low=0, strict=True, unit="bytes")
    answer, bad = _number(answer, "the time in seconds")
    if bad is not None:
        return bad
    count = total_bytes / chunk_bytes
    one = cost.collective_time("all_reduce", chunk_bytes, world_size, link, "ring")
    want = count * one
    whole = cost.collective_time("all_reduce", total_bytes, world_size, link, "ring")
    if _close(answer, want):
        b = cost.breakdown("all_reduce", chunk_bytes, world_size, link, "ring")
        return Verdict(True, f"{count:g} all-reduces x {one * 1e6:.1f} µs = {want * 1e3:.3f} ms; latency is "
                             f"{b['latency_s'] / one:.0%} of each. One big all-reduce: {whole * 1e3:.3f} ms.")
    if _close(answer, whole):
        return Verdict(False, "that is one all-reduce of the whole buffer. Here it goes out in many small ones, "
                              "and each pays its own latency.")
    if _close(answer, count * cost.breakdown("all_reduce", chunk_bytes, world_size, link, "ring")["bandwidth_s"]):
        return Verdict(False, "you have the bandwidth terms; add each all-reduce's latency, c + 2(p-1)·α.")
    return Verdict(False, "time one ring all-reduce of chunk_bytes (c + 2(p-1)·α + 2(p-1)/p·n·β), then multiply by "
                          "the number of chunks.")


def ch8_exposed(answer, compute_s: float, comm_s: float, overlapped_s: float) -> Verdict:
    """Exposed communication (s) from a profile: communication that ran with no compute beside it."""
    compute_s, comm_s, overlapped_s = (check.number(name, v, low=0, unit="seconds") for name, v in
                                       (("compute_s", compute_s), ("comm_s", comm_s), ("overlapped_s", overlapped_s)))
    answer, bad = _number(answer, "the exposed time in seconds")
    if bad is not None:
        return bad
    want = comm_s - overlapped_s
    if _close(answer, want, 1e-6):
        return Verdict(True, f"comm - overlapped = {comm_s * 1e3:g} - {overlapped_s * 1e3:g} = {want * 1e3:g} ms: "
                             "that much shorter could the step be if all communication were hidden.")
    if _close(answer, comm_s, 1e-6):
        return Verdict(False, "not all communication is exposed: the overlapped part ran while compute went on.")
    if _close(answer, compute_s + comm_s - overlapped_s, 1e-6):
        return Verdict(False, "that is the busy time of the step (compute + exposed communication); ask only "
                              "for the exposed part.")
    return Verdict(False, "exposed = communication time minus the part that overlapped with compute.")


# ------------------------------------------------------------- chapters whose checkers live in their own module
from commlib.exercises_compression import (ch5_allreduce_compatible, ch5_crossover,  # noqa: E402,F401
                                           ch5_powersgd_bytes, ch5_topk_bytes)
from commlib.exercises_parallel import (ch7_bubble, ch7_in_flight, ch7_tp_bytes, ch7_which_fits,  # noqa: E402,F401
                                        ch7_zero3_memory)
from commlib.exercises_topology import (ch3_all_to_all_time, ch3_best_all_reduce,  # noqa: E402,F401
                                        ch3_hierarchical_inter_bytes, ch3_multi_ring_busbw, ch3_share_after_move)
