"""Chapter 6 (overlap): an overlapped step, the best bucket size.

Each checker returns a Verdict and never raises on a wrong, odd or missing answer (commlib.exercises.answers
reads it); a nonsensical parameter, the notebook author's, is a ValueError/TypeError naming it.
"""

from __future__ import annotations

from commlib import _validate as check
from commlib.exercises.answers import _choice, close, _number, Verdict


def ch6_overlapped_step(answer, compute_s: float = 0.100, comm_s: float = 0.080, buckets: int = 10) -> Verdict:
    """Step time (s) when backward (compute_s) and gradient all-reduce (comm_s) are split into `buckets`
    equal buckets and overlapped on one communication stream."""
    from commlib.cost.timeline import simulate

    buckets = check.integer("buckets", buckets, 1, 10**4)  # the simulated timeline has one event per bucket
    compute_s = check.number("compute_s", compute_s, low=0, unit="seconds")
    comm_s = check.number("comm_s", comm_s, low=0, unit="seconds")
    tl = simulate([compute_s / buckets] * buckets, [comm_s / buckets] * buckets)
    answer, bad = _number(answer, "the step time in seconds")
    if bad is not None:
        return bad
    want = tl.total_s
    if close(answer, want, rel=0.01):
        return Verdict(True, f"{compute_s * 1e3:g} ms of backward, then the last bucket's {comm_s / buckets * 1e3:g} ms "
                             f"that nothing can hide: {want * 1e3:g} ms.")
    if close(answer, max(compute_s, comm_s), rel=0.01):
        return Verdict(False, "max(compute, comm) forgets the last bucket: it is ready only when backward ends.")
    if close(answer, compute_s + comm_s, rel=0.01):
        return Verdict(False, "that is the step without overlap; with buckets most of the communication runs during backward.")
    if close(answer, abs(compute_s - comm_s), rel=0.01):
        return Verdict(False, "overlap hides communication behind computation; it does not subtract one from the other.")
    return Verdict(False, "draw the timeline: bucket i's all-reduce starts when its backward slice ends.")


def ch6_best_bucket(answer, params: float = 1e8, layers: int = 96, backward_s: float = 0.1, world_size: int = 256,
                    link: str = "ib_ndr", options=(1, 4, 25, 100, 400, 1600), bytes_per_param: int = 4) -> Verdict:
    """Which bucket cap (MiB) among `options` gives the shortest overlapped step for this model and cluster, every
    bucket priced as a ring (NCCL's tuning model would pick its tree for them at ppn = 1: chapter 6 shows both)?"""
    from commlib.cost.timeline import buckets_from_layers, simulate

    layers = check.integer("layers", layers, 1, 10**4)
    world_size = check.integer("world_size", world_size, 1, check.MAX_RANKS)
    options = check.numbers("options", options, low=0, strict=True, unit="MiB", item="bucket cap")
    options = [int(o) if o.is_integer() else o for o in options]
    answer, bad = _choice(answer, options, "MiB")
    if bad is not None:
        return bad
    per_layer = check.number("params", params, low=0, high=check.MAX_BYTES) * check.number("bytes_per_param", bytes_per_param, 0, high=64) / layers
    backward_s = check.number("backward_s", backward_s, low=0, unit="seconds")

    def step(cap):
        c, m, _ = buckets_from_layers([per_layer] * layers, [backward_s / layers] * layers, world_size, link,
                                      bucket_cap_mb=cap)
        return simulate(c, m).total_s

    times = {cap: step(cap) for cap in options}
    best = min(times, key=times.get)
    listing = ", ".join(f"{c} MiB: {t * 1e3:.1f} ms" for c, t in times.items())
    if times[answer] <= times[best] * 1.001:
        return Verdict(True, f"{listing}, every bucket a ring. NCCL's tree would make the small caps about as "
                             f"fast: see \"What NCCL would run\".")
    if answer < best:
        return Verdict(False, f"{answer} MiB makes many small all-reduces, and each pays the latency c + 2(p-1)·α. "
                              f"{listing}.")
    return Verdict(False, f"{answer} MiB makes a few big buckets; the last one is exposed after backward. {listing}.")
