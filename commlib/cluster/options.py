"""What a Cluster accepts, checked before anything starts: backend, seconds, preload, host."""

from __future__ import annotations

import ipaddress
import math
import socket
import warnings
from numbers import Real

BACKENDS = ("auto", "gloo", "nccl")
OUTPUT_MODES = ("ordered", "live")
MAX_WORLD_SIZE = 64
MAX_TIMEOUT_S = 1e6     # ~11.6 days; poll() overflows past ~24.8 days and torch's store clocks before that


def resolve_backend(backend: str, world_size: int) -> str:
    """'auto' -> 'nccl' iff torch sees at least one GPU per rank and NCCL is built in, else 'gloo'."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    has_nccl = dist.is_nccl_available()
    if backend == "auto":
        return "nccl" if has_nccl and gpus >= world_size else "gloo"
    if backend == "nccl" and not (has_nccl and gpus >= world_size):
        raise ValueError(f"backend='nccl' needs one GPU per rank: world_size={world_size}, "
                         f"GPUs visible={gpus}, NCCL available={has_nccl}; use 'gloo' or 'auto'")
    return backend


def _check_seconds(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number of seconds (int or float), got {type(value).__name__}")
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        raise ValueError(f"{name} must be a number of seconds in (0, {MAX_TIMEOUT_S:.0f}], got {value!r}")
    return float(value)


def _check_preload(preload) -> tuple:
    """Cluster(preload=...): module names the rank launcher imports once, so every rank, restarts included,
    starts with them (a lesson that restarts FSDP2 ranks often). Each must be importable here."""
    import importlib.util

    if isinstance(preload, str) or not isinstance(preload, (tuple, list)):
        raise TypeError(f"preload must be a tuple of module names such as ('torch.distributed.fsdp',), "
                        f"got {type(preload).__name__}")
    for name in preload:
        try:
            found = isinstance(name, str) and "," not in name and importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ValueError(f"preload must name importable modules, got {name!r}")
    return tuple(preload)


def check_host(host) -> bool:
    """-> True for a loopback host. Bad values: TypeError/ValueError naming `host`. Any other host
    (0.0.0.0, a LAN address) is the user's explicit choice: allowed, with a warning about the exposure."""
    if not isinstance(host, str) or not host:
        raise TypeError(f"host must be an address string such as '127.0.0.1', got {host!r}")
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)}
    except (OSError, UnicodeError, ValueError) as e:
        raise ValueError(f"host must be an IPv4 address or a name of this machine, such as '127.0.0.1' "
                         f"(the default), got {host!r} ({e})") from None
    if all(ipaddress.ip_address(a).is_loopback for a in addresses):
        return True
    warnings.warn(f"Cluster(host={host!r}) listens on {', '.join(sorted(addresses))}, not only on this machine's "
                  f"loopback: anyone who can reach it can connect to the rendezvous store, which has no "
                  f"authentication. Leave host='127.0.0.1' unless you mean it.", UserWarning, stacklevel=3)
    return False


def check_network(network, world_size: int, backend: str):
    """Cluster(network=...): None, or a commlib.network.Network that fits world_size ranks on `backend`
    (duck-typed: this package imports nothing else from commlib)."""
    if network is None:
        return None
    if not all(callable(getattr(network, m, None)) for m in ("attach", "detach", "placement", "wrap", "check_cluster")):
        raise TypeError(f"network must be a commlib.network.Network or None, got {type(network).__name__}")
    network.check_cluster(world_size, backend)
    return network
