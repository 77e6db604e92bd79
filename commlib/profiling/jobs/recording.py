"""Write a rank's torch.profiler trace from inside the rank: what the course's live runs diagnose.

    c.run(lambda: record(step, "traces/rank{rank}.json"))   # in every rank -> the path written
    record(step, path, untraced_s=job_step_s(times))         # + the job's step timed without the profiler

The untraced step goes into the trace as its top-level "commlib_untraced" ({"step_s": seconds}): whatif scales the
replay's compute so that the identity replay gives it (replay/compute.calibrate), keeping the profiler's own time
out of its predictions, and prints the traced / untraced ratio.
"""

from __future__ import annotations

import json
import os

from commlib import _validate

UNTRACED_KEY = "commlib_untraced"   # read by profiling/read/reader.py (RankTrace.untraced)


def job_step_s(times) -> float:
    """Inside every rank, each with its own step times (seconds, as many on every rank): the job's step, per step
    the slowest rank's, the median over the steps (every rank gets the same)."""
    import statistics

    import torch
    import torch.distributed as dist

    t = torch.tensor([float(x) for x in times], dtype=torch.float64)
    if not len(t):
        raise ValueError("times must hold at least one step time, got none")
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return statistics.median(t.tolist())


def stamp_untraced(prof, step_s: float) -> None:
    """Write the job's untraced step (seconds) into a torch.profiler.profile's trace, before it is exported."""
    step_s = _validate.number("untraced_s", step_s, low=0.0, strict=True, unit="seconds")
    prof.add_metadata_json(UNTRACED_KEY, json.dumps({"step_s": step_s}))


def record(step, path: str, *args, warmup: int = 1, late_rank: int | None = None, late_s: float = 0.0,
           untraced_s: float | None = None, **kwargs) -> str:
    """Inside every rank (on Gloo the recorded step ends with live.settle, a barrier the trace does not hold): run
    step(*args, **kwargs) `warmup` times under the profiler's warm-up (it absorbs the
    ranks' different profiler start-up times), then once recorded, and write this rank's trace to path
    ("{rank}" in it becomes the rank). late_rank sleeps late_s before the recorded step: a straggler, on
    purpose. commlib's background work (algorithms.background) during the recorded step is written into the
    trace too (the profiler cannot see its thread). untraced_s: the job's step timed without the profiler
    (job_step_s), written into the trace (stamp_untraced). Returns the path written."""
    import time
    import warnings

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    from commlib.profiling.jobs.live import _without_profiler_chatter, settle

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
        if untraced_s is not None:
            stamp_untraced(prof, untraced_s)
        for i in range(warmup + 1):
            if i == warmup and rank == late_rank:
                time.sleep(late_s)
            if i == warmup:
                window, after = [time.perf_counter()], []
                for _ in range(CLOCK_MARKS):   # the host clock, as the trace sees it (_trace_offset)
                    with torch.profiler.record_function("commlib:clock"):
                        pass
                    after.append(time.perf_counter())
            step(*args, **kwargs)
            if cuda:
                torch.cuda.synchronize()
            if i == warmup:
                window.append(time.perf_counter())
                settle(prof)   # Gloo's threads done writing before the profiler stops (a race in torch)
            prof.step()
    _add_background_work(out, window[0], window[1], after)
    return out


CLOCK_MARKS = 8


def _trace_offset(marks: list[dict], after: list[float]) -> float:
    """trace clock (us) - host clock (s) * 1e6, from commlib:clock marks, each closed just before host time
    after[i]. A mark's end is stamped before after[i] is read, so each gives a lower bound of the offset; the
    largest is the tightest. (Its start is stamped only after the profiler's own ~100 us of entry work, which made
    the one mark taken at its start a late, wrong offset: background work shifted past the waits for it, by 318 us
    under load, issue 40.) A lower bound maps work early, never after the wait that saw it finish."""
    return max(m["ts"] + m["dur"] - t * 1e6 for m, t in zip(marks, after))


def _add_background_work(path: str, start: float, end: float, after: list[float]) -> None:
    """Write into this rank's trace the commlib background work (algorithms.background) that ran between start
    and end (host clock, s), placed on the trace's clock by the commlib:clock marks (_trace_offset), and starting
    no earlier than its commlib:queue mark (work cannot start before it was queued)."""
    from commlib.algorithms import background

    work = [(b.tid, w) for b in background.LIVE for w in b.done if w[3] > start and w[2] < end]
    if not work:
        return
    with open(path) as f:
        trace = json.load(f)   # this rank's own file, just written
    marks = sorted((e for e in trace["traceEvents"] if e.get("name") == "commlib:clock"), key=lambda e: e["ts"])
    if len(marks) != len(after):
        return
    offset = _trace_offset(marks, after)
    queued = {e["name"]: e["ts"] for e in trace["traceEvents"] if str(e.get("name", "")).startswith("commlib:queue")}
    for tid, (seq, name, t0, t1) in work:
        ts, end_ts = t0 * 1e6 + offset, t1 * 1e6 + offset
        ts = min(max(ts, queued.get(f"commlib:queue seq={seq}", ts)), end_ts)
        trace["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": name, "pid": marks[0]["pid"],
                                     "tid": tid, "ts": ts, "dur": end_ts - ts,
                                     "args": {"recorded by": "commlib.algorithms.background (host clock)"}})
    with open(path + ".tmp", "w") as f:
        json.dump(trace, f)
    os.replace(path + ".tmp", path)
