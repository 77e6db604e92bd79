"""Chapter 2 (latency and bandwidth): a ring's time on a link, busbw, the fastest algorithm.

Each checker returns a Verdict and never raises on a wrong, odd or missing answer (commlib.exercises.answers
reads it); a nonsensical parameter, the notebook author's, is a ValueError/TypeError naming it.
"""

from __future__ import annotations

from commlib import _validate as check
from commlib.exercises.answers import _choice, close, _number, Verdict


def ch2_ring_time(answer, nbytes: float, world_size: int, link) -> Verdict:
    """Seconds for a ring all_reduce: c + 2(p-1) alpha + 2(p-1)/p n / B, with B per direction (no gamma)."""
    from commlib import cost

    link = cost.as_link(link)
    n, p = check.number("nbytes", nbytes, low=0, unit="bytes", high=check.MAX_BYTES), check.integer("world_size", world_size, 1, check.MAX_RANKS)
    a, bw, c = link.latency, link.bandwidth, link.call_latency
    answer, bad = _number(answer, "the time in seconds")
    if bad is not None:
        return bad
    want = cost.collective_time("all_reduce", n, p, link, "ring")
    band = 2 * (p - 1) / p * n / bw
    if close(answer, want):
        return Verdict(True, f"c + 2(p-1)·α + 2(p-1)/p·n/B = {c * 1e3:.4g} ms + {2 * (p - 1) * a * 1e3:.4g} ms + "
                             f"{band * 1e3:.4g} ms = {want * 1e3:.4g} ms.")
    if close(answer, band):
        return Verdict(False, "close: you have the bandwidth term. Add the latency terms: the call latency c once, "
                              "and 2(p-1) messages of α each.")
    if c and close(answer, want - c, rel=0.005):
        return Verdict(False, f"almost: add the call latency c = {c * 1e6:g} µs, paid once per collective "
                              "(NCCL's launch and set-up).")
    if close(answer, want - band / 2) or close(answer, want - c - band / 2):
        return Verdict(False, f"the link's {bw / 1e9:g} GB/s is per direction. Do not double it: each rank sends "
                              "on one direction and receives on the other.")
    if close(answer, n / bw) or close(answer, a + n / bw) or close(answer, c + a + n / bw):
        return Verdict(False, "n/B is one message of the whole tensor. The ring sends 2(p-1) chunks of n/p bytes each.")
    if close(answer, 2 * (p - 1) * (a + n / bw)) or close(answer, c + 2 * (p - 1) * (a + n / bw)):
        return Verdict(False, "each of the 2(p-1) steps sends one chunk of n/p bytes, not the whole tensor.")
    return Verdict(False, "use t = c + 2(p-1)·α + 2(p-1)/p·n·β, with c the link's call latency, β = 1/B and B the "
                          "per-direction bandwidth.")


def ch2_busbw(answer, nbytes: float, time_s: float, world_size: int) -> Verdict:
    """nccl-tests busbw in GB/s for all_reduce: n / t / 1e9 * 2(p-1)/p."""
    nbytes = check.number("nbytes", nbytes, low=0, unit="bytes", high=check.MAX_BYTES)
    time_s = check.number("time_s", time_s, low=0, strict=True, unit="seconds")
    p = check.integer("world_size", world_size, 1, check.MAX_RANKS)
    answer, bad = _number(answer, "the bus bandwidth in GB/s")
    if bad is not None:
        return bad
    algbw = nbytes / time_s / 1e9
    want = algbw * 2 * (p - 1) / p
    if close(answer, want):
        return Verdict(True, f"algbw = n/t = {algbw:.3g} GB/s; busbw = algbw · 2(p-1)/p = {want:.3g} GB/s.")
    if close(answer, algbw):
        return Verdict(False, "that is algbw (n/t). busbw multiplies it by the all_reduce factor 2(p-1)/p.")
    if close(answer, algbw * (p - 1) / p):
        return Verdict(False, "(p-1)/p is the factor for all_gather and reduce_scatter; all_reduce does both: 2(p-1)/p.")
    if close(answer, want * 1e9) or close(answer, want * 8):
        return Verdict(False, "give GB/s: bytes per second divided by 1e9 (not bits).")
    return Verdict(False, "algbw = n / t in GB/s (1e9 bytes); busbw = algbw · 2(p-1)/p for all_reduce.")


def ch2_fastest(answer, op: str, nbytes: float, world_size: int, link) -> Verdict:
    """Name the algorithm the alpha-beta model says is fastest for this op, size, p and link."""
    from commlib import cost

    if not isinstance(op, str) or op not in cost.PAIRS:
        raise ValueError(f"op must be one of {tuple(cost.PAIRS)}, got {op!r}")
    world_size = check.integer("world_size", world_size, 1, check.MAX_RANKS)
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
