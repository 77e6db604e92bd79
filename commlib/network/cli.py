"""python -m commlib network up | down | clean | run: a kept kernel network, or a torchrun job on one (run.py).

    python -m commlib network up --nodes 2 --gpus-per-node 1 --bandwidth 20e6   # prints its name and addresses
    ip netns exec NAME-n0g0 ...                                               # run anything on node 0's GPU 0
    python -m commlib network down NAME                                       # removes it
    python -m commlib network clean                                           # what dead owners left
    python -m commlib network run --nodes 2 --bandwidth 20e6 SCRIPT ARGS...    # torchrun on it (run.py)

Every failure is one line (the caller prints it and exits 2); nothing half-made stays.
"""

from __future__ import annotations

import os
import re

from commlib.network import kernel, names
from commlib.network.network import Network, available


class UsageError(Exception):
    """One line for the command line: a bad argument or a network that could not be made."""


def _check(action: str, nodes: int, gpus_per_node: int, nics_per_node: int, bandwidth: float) -> None:
    """The arguments first, whatever this machine allows, then whether the kernel network can be built here."""
    try:
        Network(nodes, gpus_per_node, nics_per_node, bandwidth=bandwidth, kind="paced")
    except (TypeError, ValueError) as e:
        flags = re.sub(r"\b(nodes|gpus_per_node|nics_per_node|bandwidth)\b(?= must| x )",
                       lambda m: "--" + m.group(1).replace("_", "-"), str(e))   # the names as the command line has them
        raise UsageError(f"network {action}: {flags}") from None
    ok, why = available()
    if not ok:
        raise UsageError(f"network {action}: {why}")


MAX_TIMEOUT_S = 7 * 86400.0   # a week: a bound that catches a timeout given in ms, and no job of this course's


def check_run(script: str, nodes: int, gpus_per_node: int, nics_per_node: int, bandwidth: float,
              timeout: float | None = None) -> None:
    """`network run`'s arguments, before anything is made: the script exists, the network can be built."""
    if timeout is not None and not (0 < timeout <= MAX_TIMEOUT_S):   # NaN too
        raise UsageError(f"network run: --timeout must be seconds in (0, {MAX_TIMEOUT_S:.0f}], got {timeout:g}")
    if not os.path.isfile(script):
        raise UsageError(f"network run: SCRIPT {script!r} is not a file")
    _check("run", nodes, gpus_per_node, nics_per_node, bandwidth)


def up(nodes: int, gpus_per_node: int, nics_per_node: int, bandwidth: float) -> list[str]:
    """Build a kept network (it outlives this process until `down`) -> the lines to print."""
    _check("up", nodes, gpus_per_node, nics_per_node, bandwidth)
    net = Network(nodes, gpus_per_node, nics_per_node, bandwidth=bandwidth, kind="kernel")
    try:
        net.up(keep=True)
    except kernel.NetworkError as e:
        raise UsageError(f"network up: {e}") from None
    lines = [f"{net.name}: {net.summary()}"]
    for n in range(net.nodes):
        gpus = range(n * net.gpus_per_node, (n + 1) * net.gpus_per_node)
        lines.append(f"  node {n}: netns {net.name}-n{n}, NICs "
                     + ", ".join(f"nic{j} {net.address(n, j)}" for j in range(net.nics_per_node))
                     + "; GPUs " + ", ".join(f"netns {net.name}-n{n}g{r % net.gpus_per_node} {net.gpu_address(r)}"
                                             for r in gpus))
    lines.append(f"remove it with: python -m commlib network down {net.name}")
    return lines


def down(name: str) -> list[str]:
    """Remove the kept network `name` (only namespaces named name-*) -> the lines to print."""
    if not name.startswith(kernel.PREFIX) or "/" in name:
        raise UsageError(f"network down: NAME must be a network made by `network up` ({kernel.PREFIX}...), got {name!r}")
    mine = [n for n in kernel.namespaces() if n.startswith(name + "-") and n[len(name) + 1:].count("-") == 0]
    if not mine:
        raise UsageError(f"network down: no network named {name!r} (see `ip netns list`)")
    return [f"removed {n}" for n in kernel.remove(mine)]


def clean() -> list[str]:
    """Remove the namespaces the course made whose owner is no longer alive, and the log folders of `network run`s
    that are gone -> the lines to print. Those named like the course's but without its mark are left alone, and
    said so; a complete `network up` network is kept by design, and listed with the command that removes it."""
    remove, alone = names.leftovers()
    gone = kernel.remove(remove)
    logs = names.dead_run_logs()   # a SIGKILLed `network run`'s torchrun logs
    return ([f"removed {n}" for n in gone] + [f"removed {p} (a network run's logs)" for p in logs]
            or ["nothing to remove"]) + \
        [f"left alone: {n} (named like the course's, but not marked as made by it)" for n in alone] + \
        [f"kept: {n}, made by `network up`, whose process has ended; it stays until: python -m commlib network "
         f"down {n}" for n in names.kept_networks()]
