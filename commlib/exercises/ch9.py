"""Chapter 9 (profiling): the time of a chunked all-reduce, exposed communication.

Each checker returns a Verdict and never raises on a wrong, odd or missing answer (commlib.exercises.answers
reads it); a nonsensical parameter, the notebook author's, is a ValueError/TypeError naming it.
"""

from __future__ import annotations

from commlib import _validate as check
from commlib.exercises.answers import close, _number, Verdict


def ch9_chunked_time(answer, total_bytes: float, chunk_bytes: float, world_size: int, link) -> Verdict:
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
    if close(answer, want):
        b = cost.breakdown("all_reduce", chunk_bytes, world_size, link, "ring")
        return Verdict(True, f"{count:g} all-reduces x {one * 1e6:.1f} µs = {want * 1e3:.3f} ms; latency is "
                             f"{b['latency_s'] / one:.0%} of each. One big all-reduce: {whole * 1e3:.3f} ms.")
    if close(answer, whole):
        return Verdict(False, "that is one all-reduce of the whole buffer. Here it goes out in many small ones, "
                              "and each pays its own latency.")
    if close(answer, count * cost.breakdown("all_reduce", chunk_bytes, world_size, link, "ring")["bandwidth_s"]):
        return Verdict(False, "you have the bandwidth terms; add each all-reduce's latency, c + 2(p-1)·α.")
    return Verdict(False, "time one ring all-reduce of chunk_bytes (c + 2(p-1)·α + 2(p-1)/p·n·β), then multiply by "
                          "the number of chunks.")


def ch9_exposed(answer, compute_s: float, comm_s: float, overlapped_s: float) -> Verdict:
    """Exposed communication (s) from a profile: communication that ran with no compute beside it."""
    compute_s, comm_s, overlapped_s = (check.number(name, v, low=0, unit="seconds") for name, v in
                                       (("compute_s", compute_s), ("comm_s", comm_s), ("overlapped_s", overlapped_s)))
    answer, bad = _number(answer, "the exposed time in seconds")
    if bad is not None:
        return bad
    want = comm_s - overlapped_s
    if close(answer, want, rel=1e-6):
        return Verdict(True, f"comm - overlapped = {comm_s * 1e3:g} - {overlapped_s * 1e3:g} = {want * 1e3:g} ms: "
                             "that much shorter could the step be if all communication were hidden.")
    if close(answer, comm_s, rel=1e-6):
        return Verdict(False, "not all communication is exposed: the overlapped part ran while compute went on.")
    if close(answer, compute_s + comm_s - overlapped_s, rel=1e-6):
        return Verdict(False, "that is the busy time of the step (compute + exposed communication); ask only "
                              "for the exposed part.")
    return Verdict(False, "exposed = communication time minus the part that overlapped with compute.")
