"""Run commlib's rank functions under torchrun (one node or many) instead of a local Cluster.

    # hello.py                                  torchrun --nproc-per-node=4 hello.py
    import commlib as cl
    cl.init_from_env()                          # the default group, from torchrun's variables
    print(my_rank_function())
"""

from __future__ import annotations

import datetime
import os


def init_from_env(backend: str = "auto", timeout: float = 300.0) -> tuple[int, int]:
    """Initialise the default process group from RANK/WORLD_SIZE/MASTER_ADDR/... -> (rank, world_size).

    backend 'auto' is nccl when this process has a GPU of its own (GPU number LOCAL_RANK), else gloo. Ranks get one
    intra-op thread each, as in a Cluster. Calling it again once initialised does nothing.
    """
    import torch
    import torch.distributed as dist

    from commlib.cluster.worker import loopback_interface, process_group_backend

    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend must be one of ('auto', 'gloo', 'nccl'), got {backend!r}")
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing and not dist.is_initialized():
        raise RuntimeError(f"init_from_env() needs the variables torchrun sets; missing {missing}. "
                           f"Launch with: torchrun --nproc-per-node=N script.py")
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "auto":  # NCCL needs a GPU of its own for every process on this node
        backend = "nccl" if dist.is_nccl_available() and local_rank < gpus else "gloo"
    elif backend == "nccl" and not (dist.is_nccl_available() and local_rank < gpus):
        raise ValueError(f"backend='nccl' needs one GPU per process: LOCAL_RANK={local_rank}, GPUs visible={gpus}, "
                         f"NCCL available={dist.is_nccl_available()}; use 'gloo' or 'auto'")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if os.environ["MASTER_ADDR"] in ("127.0.0.1", "localhost"):  # single host: keep traffic on loopback
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())
    kwargs = {}
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        kwargs["device_id"] = torch.device("cuda", local_rank)
    dist.init_process_group(process_group_backend(backend), timeout=datetime.timedelta(seconds=timeout), **kwargs)
    return dist.get_rank(), dist.get_world_size()
