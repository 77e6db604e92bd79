"""What this machine offers the course: versions, cores, memory, backends, GPUs."""

from __future__ import annotations

import os
import platform
import sys


def memory_bytes() -> int | None:
    """This machine's physical memory in bytes; None where sysconf cannot say (Windows)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def usable_cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count; the count where there is none)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def report() -> dict:
    """A dict of facts about this machine; every value is read here, now."""
    import numpy
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    mem = memory_bytes()
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "cpu cores usable": usable_cores(),
        "memory GiB": round(mem / 2**30, 1) if mem else None,
        "gloo available": dist.is_gloo_available(),
        "nccl available": dist.is_nccl_available(),
        "GPUs": gpus,
        "GPU names": [torch.cuda.get_device_name(i) for i in range(gpus)],
    }


def check(info: dict | None = None) -> list[str]:
    """Problems that stop the course from running here (empty list: all good)."""
    info = info or report()
    problems = []
    if tuple(int(x) for x in info["python"].split(".")[:2]) < (3, 10):
        problems.append(f"Python {info['python']} is too old: the course needs >= 3.10")
    if not info["gloo available"]:
        problems.append("this torch build has no Gloo backend: install the pinned torch from requirements.txt")
    return problems
