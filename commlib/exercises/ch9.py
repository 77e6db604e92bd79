"""Chapter 9 (profiling): the time of a chunked all-reduce, exposed communication, reading a real trace (busbw
of a kernel, what its name proves), stragglers, and the what-if replay (a transfer re-priced, a wait replayed,
what a replay cannot know).

Each checker returns a Verdict and never raises on a wrong, odd or missing answer (commlib.exercises.answers
reads it); a nonsensical parameter, the notebook author's, is a ValueError/TypeError naming it.
"""

from __future__ import annotations

from commlib import _validate as check
from commlib.exercises.answers import close, _choice, _number, Verdict


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
    b = cost.breakdown("all_reduce", chunk_bytes, world_size, link, "ring")
    if close(answer, count * b["bandwidth_s"]):
        return Verdict(False, "you have the bandwidth terms; add each all-reduce's latency, c + 2(p-1)·α.")
    c = cost.model.as_link(link).call_latency
    if c and close(answer, want - count * c):
        return Verdict(False, f"add the per-call cost c = {c * 1e6:g} µs (the link's call_latency, NCCL's base "
                              f"latency) once per all-reduce, on top of the 2(p-1) hops' α.")
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


def ch9_trace_busbw(answer, nbytes: float, duration_us: float, op: str, group_size: int) -> Verdict:
    """busbw (GB/s) of one collective read from a trace: nbytes / duration x nccl-tests' bus factor."""
    from commlib import cost

    nbytes = check.number("nbytes", nbytes, low=0, strict=True, unit="bytes")
    duration_us = check.number("duration_us", duration_us, low=0, strict=True, unit="microseconds")
    factor = cost.bus_factor(op, group_size)
    answer, bad = _number(answer, "the busbw in GB/s")
    if bad is not None:
        return bad
    algbw = nbytes / (duration_us * 1e-6) / 1e9
    if close(answer, algbw * factor):
        return Verdict(True, f"{nbytes:.0f} B / {duration_us:g} µs = {algbw:.2f} GB/s algbw, x {factor:g} "
                             f"= {algbw * factor:.2f} GB/s busbw.")
    if close(answer, algbw) and factor != 1:
        return Verdict(False, f"that is the algbw; multiply by the bus factor of {op} on {group_size} ranks.")
    if close(answer, algbw * factor * 1e3) or close(answer, algbw * factor * 1e-3) or close(answer, algbw * 8):
        return Verdict(False, "check the units: bytes / seconds / 1e9 gives GB/s (the duration is in µs).")
    return Verdict(False, "algbw = bytes / duration (GB = 1e9 B); busbw = algbw x the bus factor, "
                          "2(p-1)/p for all_reduce.")


ALGORITHM_ANSWERS = ("ring", "tree", "unknown")


def ch9_kernel_algorithm(answer, kernel: str) -> Verdict:
    """Which algorithm does this NCCL kernel name prove NCCL ran: 'ring', 'tree' or 'unknown'?"""
    from commlib.profiling.read.kernels import kernel_info

    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be an NCCL kernel name (str), got {type(kernel).__name__}")
    info = kernel_info(kernel)
    if info["form"] is None:
        raise ValueError(f"kernel must be an NCCL kernel name (ncclKernel_... or ncclDevKernel_...), got {kernel!r}")
    answer, bad = _choice(answer, ALGORITHM_ANSWERS)
    if bad is not None:
        return bad
    want = info["algorithm"] if info["algorithm"] in ("ring", "tree") else "unknown"
    if answer == want:
        why = ("before NCCL 2.19 each algorithm had its own kernel, so the name is proof"
               if info["form"] == "old" else
               "NCCL 2.19+ names TREE for the tree only; every other algorithm runs in the RING_LL kernel")
        return Verdict(True, f"{want}: {why}. The LL in the name is never proof of the protocol.")
    if info["form"] == "new" and answer == "ring":
        return Verdict(False, "NCCL 2.19+ launches the RING_LL kernel for ring, NVLS, CollNet and PAT alike "
                              "(src/device/generate.py, best_kernel): the name does not prove a ring.")
    return Verdict(False, "read the algorithm between the op and the protocol; ask whether that NCCL version "
                          "compiled one kernel per algorithm (before 2.19) or not.")


def ch9_straggler(answer, durations_us) -> Verdict:
    """Which rank arrived last at a collective, given each rank's duration in it (a list, rank order)?"""
    if isinstance(durations_us, (str, bytes)) or not hasattr(durations_us, "__len__") or len(durations_us) < 2:
        raise ValueError(f"durations_us must be a list of at least 2 durations, got {durations_us!r}")
    durations = [check.number(f"durations_us[{i}]", d, low=0, unit="microseconds") for i, d in enumerate(durations_us)]
    last = min(range(len(durations)), key=durations.__getitem__)
    first = max(range(len(durations)), key=durations.__getitem__)
    # a 1-based answer (the 2nd rank named 2) is right reasoning with the other count: say so before any other hint
    value = _number(answer, "a rank")[0]   # None unless a plain number
    as_int = int(value) if value is not None and float(value).is_integer() else None
    one_based = as_int == last + 1 and as_int != first
    counted = (f"ranks count from 0 (here 0 to {len(durations) - 1}): if you counted from 1, your reasoning is "
               f"right; give the same rank counted from 0.")
    if one_based and as_int == len(durations):
        return Verdict(False, counted)
    answer, bad = _choice(answer, tuple(range(len(durations))), "a rank")
    if bad is not None:
        return bad
    waits = sum(d - durations[last] for d in durations)
    if answer == last:
        return Verdict(True, f"rank {last}: its call is the shortest because it arrived last, when the data of "
                             f"all the others was ready. The others waited {waits:g} µs in all.")
    if one_based:
        return Verdict(False, counted)
    if answer == first:
        return Verdict(False, "that rank spent longest in the call: it arrived first and waited. The calls end "
                              "together, so who arrived last?")
    return Verdict(False, "a collective ends on every rank at about the same time: read each duration back "
                          "from the end to see who arrived when.")


def ch9_reprice(answer, measured_s: float, model_old_s: float, model_new_s: float) -> Verdict:
    """The replay's price of one transfer on new hardware (profiling.replay.whatif.reprice), seconds."""
    from commlib.profiling.replay.whatif import reprice

    measured_s, model_old_s, model_new_s = (check.number(name, v, low=0, strict=True, unit="seconds") for name, v in
                                            (("measured_s", measured_s), ("model_old_s", model_old_s),
                                             ("model_new_s", model_new_s)))
    answer, bad = _number(answer, "the transfer's time in seconds")
    if bad is not None:
        return bad
    want = reprice(measured_s, model_old_s, model_new_s)
    if close(answer, want, rel=1e-6):
        return Verdict(True, f"{want * 1e3:g} ms: the new model's {model_new_s * 1e3:g} ms plus the "
                             f"{(measured_s - model_old_s) * 1e3:g} ms the job spent above the old one.")
    if close(answer, model_new_s, rel=1e-6):
        return Verdict(False, "that is the model alone. The measured call took longer than its model: the replay "
                              "keeps that excess (software, contention), it does not vanish with a faster link.")
    if close(answer, measured_s * model_new_s / model_old_s, rel=1e-6):
        return Verdict(False, "scaling by the models' ratio treats the excess as if it ran at the link's speed; "
                              "the replay adds it unchanged (it scales only a call faster than its model).")
    return Verdict(False, "new = model_new + (measured - model_old).")


def ch9_replay_wait(answer, last_arrival_s: float, transfer_s: float, wake_s: float, after_s: float) -> Verdict:
    """A rank waits at the end of backward for an all-reduce the last rank joined at last_arrival_s; it wakes
    wake_s after the all-reduce ends and computes after_s more: its step (s) in the replay."""
    vals = [check.number(name, v, low=0, unit="seconds") for name, v in (("last_arrival_s", last_arrival_s),
            ("transfer_s", transfer_s), ("wake_s", wake_s), ("after_s", after_s))]
    answer, bad = _number(answer, "the step in seconds")
    if bad is not None:
        return bad
    want = sum(vals)
    if close(answer, want, rel=1e-6):
        return Verdict(True, f"{want * 1e3:g} ms: the all-reduce ends for every rank at the last arrival plus the "
                             "transfer; then the traced wake-up and the compute after it, unchanged.")
    if close(answer, want - wake_s, rel=1e-6):
        return Verdict(False, "add the wake-up: the replay keeps the measured gap between the call's end and the "
                              "next compute (the thread waking up).")
    return Verdict(False, "the call ends at last arrival + transfer for everyone; the rank goes on after it.")


BLIND = {"a": "a slower network link", "b": "more nodes in the data-parallel group",
         "c": "a GPU whose kernels slow down as it heats up", "d": "bigger DDP buckets"}


def ch9_replay_blind(answer) -> Verdict:
    """Which of BLIND can the replay not predict from a trace? (a letter)"""
    answer, bad = _choice(answer, tuple(BLIND), "a letter")
    if bad is not None:
        return bad
    if answer == "c":
        return Verdict(True, "the replay keeps every compute duration as measured: a change in compute speed is "
                             "not in the trace. Links, nodes and buckets change only communication, which it prices.")
    return Verdict(False, f"the replay can price {BLIND[answer]}: it changes only the collectives. Which change "
                          "alters compute, which the replay keeps as measured?")


def ch9_bucket_count(answer, param_mb, bucket_cap_mb: float) -> Verdict:
    """All-reduces one step queues by DDP's bucket rule (overlap.make_buckets: gradients ready in reverse forward
    order, a bucket closed once it holds at least its cap, no parameter split), the rule the what-if regroups by."""
    from commlib.cost.timeline import make_buckets

    sizes = check.numbers("param_mb", param_mb, low=0, unit="MiB", item="parameter")
    cap = check.number("bucket_cap_mb", bucket_cap_mb, low=0, strict=True, unit="MiB")
    answer, bad = _number(answer, "a number of all-reduces")
    if bad is not None:
        return bad
    want = len(make_buckets([s * 2**20 for s in sizes], cap))
    if answer == want:
        return Verdict(True, f"{want}: fill in the order backward makes the gradients ready (last layer first), "
                             f"close a bucket once it holds {cap:g} MiB or more.")
    if answer == len(sizes):
        return Verdict(False, "that is one all-reduce per parameter: a bucket gathers gradients until it holds "
                              "its cap.")
    if answer == -(-sum(sizes) // cap):
        return Verdict(False, "the total over the cap assumes buckets filled exactly; a gradient is not split, "
                              "and a bucket closes at its cap or above. Fill them one gradient at a time.")
    return Verdict(False, "walk the gradients from the last parameter to the first, adding each to the open "
                          "bucket, and close it once it holds the cap or more.")
