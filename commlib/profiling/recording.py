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
    purpose. Returns the path written."""
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
            step(*args, **kwargs)
            if cuda:
                torch.cuda.synchronize()
            prof.step()
    return out
