"""Where did the step's time go? Run it under torch.profiler and split it into compute, communication,
their overlap, exposed communication and idle time.

    report = profile(step, trace_path="step.json")   # inside a rank: step() once to warm up, once profiled

On CPU (Gloo) communication is the `gloo:*` events on Gloo's worker threads, compute is the top-level
operators on the other threads; with CUDA, the device kernels are used instead (`nccl*` kernels are
communication, the others compute). breakdown() does the interval arithmetic on any such list.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from commlib.cluster.output import PROFILER_CHATTER, dropping_stderr_lines
from commlib.cost.intervals import intersect, length, union

COMM_PREFIXES = ("gloo:", "nccl:")
COMM_KERNEL_WORDS = ("nccl",)


@dataclass(frozen=True)
class Interval:
    kind: str        # "compute" or "comm"
    name: str
    start: float     # seconds
    end: float
    nbytes: float = 0.0


def breakdown(intervals: list[Interval], wall: tuple[float, float] | None = None) -> dict:
    """compute_s, comm_s, overlapped_s, exposed_comm_s (communication with no compute beside it), idle_s
    (neither), wall_s, the collectives (name, start, duration, nbytes) in order, and the merged
    compute_spans / comm_spans (seconds from the start of the wall interval)."""
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
        "compute_spans": [(s - t0, e - t0) for s, e in compute],
        "comm_spans": [(s - t0, e - t0) for s, e in comm],
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


def _without_profiler_chatter():
    """The C++ profiler (Kineto) writes 'profiler_start/stop' lines straight to file descriptor 2, with times
    and pids: into the notebook, unlabelled, different on every run. Drop them meanwhile; pass on the rest."""
    return dropping_stderr_lines(PROFILER_CHATTER)


def settle(prof, groups=()) -> None:
    """Inside every rank, before the profiler stops (the prof.step() that ends its last active step, or the end of
    `with profile`): wait, unrecorded, until Gloo's worker threads have recorded the end of every call they ran, on
    the default group and on `groups` (those that are Gloo's; NCCL's and a single process are left as they are).

    Why: a Gloo call completes its future before its worker thread records the call's end (torch 2.13,
    ProcessGroupGloo.cpp: AsyncWork::finishWorkGloo calls returnFutureWithOutput, then Work::finish runs the
    profiler's end callback). DDP waits on that future, so its last step can end, and the profiler stop and collect
    every thread's events, while a worker thread still appends its own. On the course's 2-core VM beside 2-3 busy
    loops, 4 of 48 runs of examples/ddp_train.py under `network run` (1 of 40 under torchrun on loopback) died in
    the profiler's stop with glibc's "malloc(): unsorted double linked list corrupted" (SIGABRT); with settle, 0
    of 40. A barrier waits for every call queued or in progress on its group (its AsyncBarrierWork
    waits on each one's Work::wait, which returns once finish() has run); collection is off meanwhile, so the trace
    holds no barrier, and the step's ProfilerStep#N span is closed first, where prof.step() would close it, so that
    the step does not hold the barrier's time either (a round trip and the ranks' wake-ups: a median of 3.9 ms, p90
    11 ms, on the last of two 24 ms steps beside 2 busy loops, when the span still held it)."""
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity

    if not dist.is_initialized():
        return
    gloo = [g for g in (None, *groups) if "gloo" in str(dist.get_backend(g))]
    if not gloo:
        return
    # CPU with CUDA and XPU: torch 2.13 warns on every rank unless all three are toggled together ("Toggling CPU
    # activity with GPU activity on ...": profiler_kineto.cpp tests !CUDA || !XPU), even in a CPU build; the
    # devices' toggle is Kineto's, which changes nothing where no device activity is on
    every = [ProfilerActivity.CPU, ProfilerActivity.CUDA, ProfilerActivity.XPU]
    span = getattr(prof, "step_rec_fn", None)   # the open ProfilerStep#N (a schedule's); torch's step() and stop()
    if span is not None:                         # close it the same way, and skip it once it is None
        span.__exit__(None, None, None)
        prof.step_rec_fn = None
    prof.toggle_collection_dynamic(False, every)
    try:
        for g in gloo:
            dist.barrier(group=g)
    finally:
        prof.toggle_collection_dynamic(True, every)


def profile(step, *args, trace_path: str | None = None, warmup: int = 1, itemsize: int = 4, **kwargs) -> dict:
    """Inside every rank: run step(*args, **kwargs) `warmup` times, then once under torch.profiler -> breakdown().
    On Gloo the profiled step ends with settle() (a barrier, unrecorded), so every rank of the group calls it.
    trace_path: also write a Chrome trace (open it in chrome://tracing or https://ui.perfetto.dev); a
    "{rank}" in it becomes this rank's number, so that the ranks do not overwrite each other's file.
    GPU kernels are recorded when this process already uses CUDA (an NCCL group, or the warm-up steps)."""
    import time

    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for _ in range(warmup):
        step(*args, **kwargs)
    # GPU kernels are recorded once this process uses CUDA (an NCCL group or the warm-up initialised it); a rank
    # that works on CPU tensors on a GPU machine does not create a CUDA context just to be profiled
    cuda = torch.cuda.is_initialized()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with _without_profiler_chatter(), torch_profile(activities=activities, record_shapes=True) as prof:
        t0 = time.perf_counter()
        step(*args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        wall_s = time.perf_counter() - t0
        settle(prof)   # Gloo's threads done writing before the profiler stops (a race in torch)
    if trace_path:
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_initialized() else 0
        path = trace_path.replace("{rank}", str(rank))
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        prof.export_chrome_trace(path)
    intervals = intervals_from_events(prof.events(), itemsize)
    report = breakdown(intervals)
    report["step_wall_s"] = wall_s  # the step as timed outside the profiler (the profiler's own cost included)
    return report


# ------------------------------------------------------------------------ pathologies, inside a rank
def time_in_chunks(total_bytes: int, chunk_bytes: int, repeats: int = 3) -> float:
    """Inside a rank: seconds to all-reduce total_bytes sent as total_bytes/chunk_bytes separate all_reduce calls
    (median of repeats, slowest rank): the "buffer too small" pathology when chunk_bytes is small."""
    import statistics
    import time

    import torch
    import torch.distributed as dist

    if chunk_bytes < 4 or total_bytes < chunk_bytes:
        raise ValueError(f"need 4 <= chunk_bytes <= total_bytes, got {chunk_bytes} and {total_bytes}")
    data = torch.ones(total_bytes // 4)
    chunks = list(data.split(chunk_bytes // 4))
    times = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        for chunk in chunks:
            dist.all_reduce(chunk)
        times.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(times)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def time_ring_segments(nbytes: int, segment_bytes: int, repeats: int = 3) -> float:
    """Inside a rank: seconds for commlib's ring all-reduce of nbytes (float32) whose chunks travel in
    segments of segment_bytes, each one message (median of repeats, slowest rank). NCCL's NCCL_BUFFSIZE
    sets the same thing for its Simple protocol: the per-peer FIFO is cut into NCCL_STEPS = 8 steps, a ring
    all-reduce's slice is 2 of them (cost.links.nccl_slices: 4 slices), so a smaller buffer means smaller slices
    in flight, each paying its fixed cost."""
    import statistics
    import time

    import torch
    import torch.distributed as dist

    from commlib import algorithms as alg

    if not (isinstance(segment_bytes, int) and 4 <= segment_bytes) or not (isinstance(nbytes, int) and nbytes >= 4):
        raise ValueError(f"need nbytes >= 4 and segment_bytes >= 4 (ints), got {nbytes!r} and {segment_bytes!r}")
    data = torch.ones(nbytes // 4)
    times = []
    for _ in range(repeats):
        work = data.clone()
        dist.barrier()
        t0 = time.perf_counter()
        alg.ring_all_reduce(work, check=False, segment_bytes=segment_bytes)
        times.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(times)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def time_async(nbytes: int, wait: bool, repeats: int = 5, device=None) -> float:
    """Inside a rank: seconds from launching dist.all_reduce(async_op=True) to ... the next line (wait=False),
    or to the end of work.wait() (wait=True). Without the wait only the launch is timed.

    On CPU tensors (Gloo) work.wait() blocks the host until the operation is done. On CUDA tensors (NCCL)
    it does not: it only makes the current CUDA stream wait for the communication stream, and returns at
    once. Host timing is then correct only after torch.cuda.synchronize(), or with CUDA events
    (torch.cuda.Event(enable_timing=True) recorded on the stream); this function synchronises for CUDA."""
    import statistics
    import time

    import torch
    import torch.distributed as dist

    x = torch.ones(nbytes // 4, device=device)
    cuda = x.device.type == "cuda"
    times = []
    for _ in range(repeats):
        dist.barrier()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        work = dist.all_reduce(x, async_op=True)
        if wait:
            work.wait()
            if cuda:
                torch.cuda.synchronize()  # wait() only ordered the streams; this waits for the GPU
        times.append(time.perf_counter() - t0)
        work.wait()  # never leave it running into the next iteration
        if cuda:
            torch.cuda.synchronize()
    return statistics.median(times)
