"""Where did the step's time go? Run it under torch.profiler and split it into compute, communication,
their overlap, exposed communication and idle time.

    report = profile(step, trace_path="step.json")   # inside a rank: step() once to warm up, once profiled

On CPU (Gloo) communication is the `gloo:*` events on Gloo's worker threads, compute is the top-level
operators on the other threads; with CUDA, the device kernels are used instead (`nccl*` kernels are
communication, the others compute). breakdown() does the interval arithmetic on any such list.
"""

from __future__ import annotations

from dataclasses import dataclass

COMM_PREFIXES = ("gloo:", "nccl:")
COMM_KERNEL_WORDS = ("nccl",)


@dataclass(frozen=True)
class Interval:
    kind: str        # "compute" or "comm"
    name: str
    start: float     # seconds
    end: float
    nbytes: float = 0.0


def union(spans) -> list[tuple[float, float]]:
    """Merge (start, end) spans into disjoint, sorted spans."""
    merged: list[list[float]] = []
    for s, e in sorted(spans):
        if e <= s:
            continue
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def length(spans) -> float:
    return sum(e - s for s, e in spans)


def intersect(a, b) -> list[tuple[float, float]]:
    """Intersection of two lists of disjoint sorted spans."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def breakdown(intervals: list[Interval], wall: tuple[float, float] | None = None) -> dict:
    """compute_s, comm_s, overlapped_s, exposed_comm_s (communication with no compute beside it), idle_s
    (neither), wall_s, and the collectives (name, start, duration, nbytes) in order."""
    compute = union((i.start, i.end) for i in intervals if i.kind == "compute")
    comm = union((i.start, i.end) for i in intervals if i.kind == "comm")
    if wall is None:
        ends = [i.end for i in intervals] or [0.0]
        starts = [i.start for i in intervals] or [0.0]
        wall = (min(starts), max(ends))
    both = intersect(compute, comm)
    busy = union(compute + comm)
    t0 = wall[0]
    return {
        "wall_s": wall[1] - wall[0],
        "compute_s": length(compute),
        "comm_s": length(comm),
        "overlapped_s": length(both),
        "exposed_comm_s": length(comm) - length(both),
        "idle_s": (wall[1] - wall[0]) - length(busy),
        "collectives": [{"name": i.name, "start_s": i.start - t0, "duration_s": i.end - i.start, "nbytes": i.nbytes}
                        for i in sorted(intervals, key=lambda i: i.start) if i.kind == "comm"],
    }


def _numel(shapes) -> int:
    total = 0
    for shape in shapes or []:
        if isinstance(shape, (list, tuple)) and shape and all(isinstance(d, int) for d in shape):
            n = 1
            for d in shape:
                n *= d
            total += n
    return total


def intervals_from_events(events, itemsize: int = 4) -> list[Interval]:
    """torch.profiler FunctionEvents -> Intervals. Sizes: the numel of a collective's input shapes times
    itemsize (the profiler records shapes, not dtypes)."""
    events = list(events)
    kernels = [e for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")]
    if kernels:  # GPU: the device timeline is the truth
        out = []
        for e in kernels:
            comm = any(w in e.name.lower() for w in COMM_KERNEL_WORDS)
            out.append(Interval("comm" if comm else "compute", e.name, e.time_range.start / 1e6, e.time_range.end / 1e6))
        return out
    comm_threads = {e.thread for e in events if e.name.startswith(COMM_PREFIXES)}
    out = []
    for e in events:
        start, end = e.time_range.start / 1e6, e.time_range.end / 1e6
        if e.name.startswith(COMM_PREFIXES):
            out.append(Interval("comm", e.name, start, end, float(_numel(e.input_shapes) * itemsize)))
        elif e.cpu_parent is None and e.thread not in comm_threads and not e.name.startswith("c10d::"):
            out.append(Interval("compute", e.name, start, end))
    return out


def profile(step, *args, trace_path: str | None = None, warmup: int = 1, itemsize: int = 4, **kwargs) -> dict:
    """Inside a rank: run step(*args, **kwargs) `warmup` times, then once under torch.profiler -> breakdown().
    trace_path: also write a Chrome trace (open it in chrome://tracing or https://ui.perfetto.dev); a
    "{rank}" in it becomes this rank's number, so that the ranks do not overwrite each other's file."""
    import time

    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for _ in range(warmup):
        step(*args, **kwargs)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with torch_profile(activities=activities, record_shapes=True) as prof:
        t0 = time.perf_counter()
        step(*args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        wall_s = time.perf_counter() - t0
    if trace_path:
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_initialized() else 0
        prof.export_chrome_trace(trace_path.replace("{rank}", str(rank)))
    intervals = intervals_from_events(prof.events(), itemsize)
    report = breakdown(intervals)
    report["step_wall_s"] = wall_s  # the step as timed outside the profiler (the profiler's own cost included)
    return report
