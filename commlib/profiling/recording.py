"""Write a rank's torch.profiler trace from inside the rank: what the course's live runs diagnose.

    c.run(lambda: record(step, "traces/rank{rank}.json"))   # in every rank -> the path written
"""

from __future__ import annotations

import os


def record(step, path: str, *args, warmup: int = 1, late_rank: int | None = None, late_s: float = 0.0,
           **kwargs) -> str:
    """Inside a rank: run step(*args, **kwargs) `warmup` times under the profiler's warm-up (it absorbs the
    ranks' different profiler start-up times), then once recorded, and write this rank's trace to path
    ("{rank}" in it becomes the rank). late_rank sleeps late_s before the recorded step: a straggler, on
    purpose. commlib's background work (algorithms.background) during the recorded step is written into the
    trace too (the profiler cannot see its thread). Returns the path written."""
    import time
    import warnings

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    from commlib.profiling.live import _without_profiler_chatter

    rank = dist.get_rank() if dist.is_initialized() else 0
    out = path.replace("{rank}", str(rank))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    # the GPU timeline where this rank uses CUDA: an NCCL group, or CUDA already initialised
    cuda = torch.cuda.is_initialized() or (dist.is_initialized() and "nccl" in str(dist.get_backend()))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with warnings.catch_warnings(), _without_profiler_chatter(), profile(activities=activities, record_shapes=True,
                                              schedule=schedule(wait=0, warmup=warmup, active=1),
                                              on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
        warnings.filterwarnings("ignore", ".*Profiler clears events")  # one cycle is all we record
        for i in range(warmup + 1):
            if i == warmup and rank == late_rank:
                time.sleep(late_s)
            if i == warmup:
                window = [time.perf_counter()]
                with torch.profiler.record_function("commlib:clock"):   # the host clock, as the trace sees it
                    pass
            step(*args, **kwargs)
            if cuda:
                torch.cuda.synchronize()
            if i == warmup:
                window.append(time.perf_counter())
            prof.step()
    _add_background_work(out, *window)
    return out


def _add_background_work(path: str, start: float, end: float) -> None:
    """Write into this rank's trace the commlib background work (algorithms.background) that ran between start
    and end (host clock, s), placed on the trace's clock by the commlib:clock mark recorded at `start`."""
    import json

    from commlib.algorithms import background

    work = [(b.tid, w) for b in background.LIVE for w in b.done if w[3] > start and w[2] < end]
    if not work:
        return
    with open(path) as f:
        trace = json.load(f)   # this rank's own file, just written
    mark = next((e for e in trace["traceEvents"] if e.get("name") == "commlib:clock"), None)
    if mark is None:
        return
    offset = mark["ts"] - start * 1e6
    for tid, (seq, name, t0, t1) in work:
        trace["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": name, "pid": mark["pid"],
                                     "tid": tid, "ts": t0 * 1e6 + offset, "dur": (t1 - t0) * 1e6,
                                     "args": {"recorded by": "commlib.algorithms.background (host clock)"}})
    with open(path + ".tmp", "w") as f:
        json.dump(trace, f)
    os.replace(path + ".tmp", path)
