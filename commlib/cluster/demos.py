"""Small rank functions for chapter 0 and the torchrun example: they run unchanged in a Cluster or under torchrun."""

from __future__ import annotations

import os
import socket


def hello() -> dict:
    """Who am I, and does a collective work? Every rank contributes rank+1 to an all_reduce.

    The sum over p ranks is p(p+1)/2, which the caller can check.
    """
    import torch
    import torch.distributed as dist

    rank, p = dist.get_rank(), dist.get_world_size()
    from commlib.cluster.worker import uses_nccl

    device = "cuda" if uses_nccl() else "cpu"
    t = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(t)
    return {"rank": rank, "world_size": p, "backend": dist.get_backend(), "host": socket.gethostname(),
            "pid": os.getpid(), "all_reduce_sum": t.item(), "expected": p * (p + 1) / 2}


def time_all_reduce(calls: int = 200, numel: int = 4) -> float:
    """Seconds per dist.all_reduce of `numel` float32 values, the median of `calls` calls after 10 unmeasured ones:
    with Cluster(debug=True) each call also runs torch's fingerprint checks (chapter 10)."""
    import statistics
    import time

    import torch
    import torch.distributed as dist

    t = torch.ones(numel)
    times = []
    for i in range(calls + 10):
        start = time.perf_counter()
        dist.all_reduce(t)
        if i >= 10:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_call_check(calls: int = 200, numel: int = 4) -> tuple[float, float]:
    """In a Cluster(debug=True): seconds per dist.all_reduce with commlib's check of roots and reduce ops off, then
    on (torch's DETAIL checks run in both), each the median of `calls` calls (time_all_reduce)."""
    from commlib.cluster import call_check

    try:
        call_check.set_checking(False)
        off = time_all_reduce(calls, numel)
        call_check.set_checking(True)
        on = time_all_reduce(calls, numel)
    finally:
        call_check.set_checking(True)
    return off, on


if __name__ == "__main__":  # torchrun --nproc-per-node=4 -m commlib.cluster.demos
    from commlib.cluster.torchrun import init_from_env

    import sys

    init_from_env()
    sys.stdout.write(f"{hello()}\n")  # one write: the ranks share the launcher's stdout
    sys.stdout.flush()
