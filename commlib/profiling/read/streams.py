"""Waits between CUDA streams, where a trace records them: which NCCL call waited for which compute kernel, and
which compute kernel waited for which NCCL call. The replay's edges on CUDA traces (graph.py).

    issued, waits = edges(kernels, nccl, syncs)   # keyed by the index of the call (its NCCL kernel in nccl)

torch.profiler records them with `experimental_config=torch._C._profiler._ExperimentalConfig(
enable_cuda_sync_events=True)`: Kineto then writes each CUPTI synchronization record as a "cuda_sync" event;
a "Stream Wait Event" (cudaStreamWaitEvent) is on the waiting stream (`stream`) and names the stream the event
was recorded on (`wait_on_stream`) and the correlation of the cudaEventRecord call that recorded it
(`wait_on_cuda_event_record_corr_id`; kineto's CudaSyncActivity, libkineto/src/CudaSyncActivity.cpp). CUDA's
rule (cudaStreamWaitEvent): work submitted to `stream` after the wait starts only once the work submitted to
`wait_on_stream` before the record has finished. Correlation ids count the CUDA runtime calls in order, so:
the producer is the last kernel of wait_on_stream launched before the record (correlation below it), the
consumer the first kernel of `stream` launched after the wait (correlation above the wait's own).

- consumer an NCCL kernel, producer a compute kernel: the call was ready when that kernel ended (issued);
- consumer a compute kernel, producer an NCCL kernel: the compute lane waited for the call (waits: from the end
  of the kernel before the consumer on its stream, if the call ended after it, to the consumer's start).
Without these events (the default) the replay infers both from the timeline's gaps (replay/graph.py the queue
points, replay/waits.py the waits).
"""

from __future__ import annotations

import bisect
import os

from commlib.profiling.read.reader import printable

OVERLAP_US = 1.0       # kernels on one stream that overlap by more than this (trace rounding is sub-us)


def _corr(x):
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def edges(kernels, nccl, syncs) -> tuple[dict, dict]:
    """kernels: every kernel Event (events.Event: ts, dur, args.stream, args.correlation); nccl: the NCCL kernel
    Events in call order (call i is nccl[i]); syncs: the "Stream Wait Event" Events. -> (issued {call: us},
    waits {call: (from_us, to_us)})."""
    if not syncs:
        return {}, {}
    call_of = {id(k): i for i, k in enumerate(nccl)}
    by_stream = {}
    for k in kernels:
        a = k.args
        c = _corr(a.correlation) if a is not None else None
        if c is not None and a.stream is not None:
            by_stream.setdefault(str(a.stream), []).append((c, k))
    corrs = {}
    for s, ks in by_stream.items():
        ks.sort(key=lambda x: x[0])
        corrs[s] = [c for c, _ in ks]
    issued, waits = {}, {}
    for e in syncs:
        a = e.args
        if a is None:
            continue
        consumer, producer = str(a.stream), str(a.wait_on_stream)
        record, wait = _corr(a.record_corr), _corr(a.correlation)
        if record is None or wait is None or consumer not in corrs or producer not in corrs or consumer == producer:
            continue
        i = bisect.bisect_left(corrs[producer], record) - 1     # the last kernel launched before the record
        j = bisect.bisect_right(corrs[consumer], wait)          # the first launched after the wait
        if i < 0 or j >= len(corrs[consumer]):
            continue
        made, used = by_stream[producer][i][1], by_stream[consumer][j][1]
        done = made.ts + made.dur
        if done > used.ts:   # not a dependency the timeline obeys (clock or record mismatch): ignore it
            continue
        if id(used) in call_of and id(made) not in call_of:
            n = call_of[id(used)]
            issued[n] = max(issued.get(n, done), done)
        elif id(made) in call_of and id(used) not in call_of:
            n = call_of[id(made)]
            before = by_stream[consumer][j - 1][1] if j > 0 else None
            start = before.ts + before.dur if before is not None and before.ts + before.dur <= done else used.ts
            if n not in waits or waits[n][1] > used.ts:   # the first kernel that needed it
                waits[n] = (start, used.ts)
    return issued, waits


def stream_overlaps(path: str, kernels) -> str | None:
    """A note when NCCL kernels overlap on one CUDA stream (a GPU runs a stream's kernels one after another, so
    the trace's times are not a GPU's: merged, shifted or edited); kernels: reader Events with args.stream."""
    by_stream = {}
    for k in kernels:
        s = k.args.stream if k.args is not None else None
        if s is not None:
            by_stream.setdefault(str(s), []).append((k.ts, k.ts + k.dur))
    bad, where = 0, None
    for s, spans in by_stream.items():
        spans.sort()
        end = spans[0][1]
        for start, stop in spans[1:]:
            if start < end - OVERLAP_US:
                bad += 1
                where = where or s
            end = max(end, stop)
    if not bad:
        return None
    return (f"{printable(os.path.basename(path))}: {bad} NCCL kernel(s) start before the one before them on the "
            f"same stream ended (stream {printable(where)}), which no GPU does: the trace's times are edited or "
            "merged, and durations, waits and any replay of them are not a GPU's")
