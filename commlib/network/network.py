"""`Network`: the emulated cluster's network, nodes x GPUs x NICs with `bandwidth` bytes/s per NIC direction.

    net = Network(nodes=2, gpus_per_node=2, nics_per_node=1, bandwidth=20e6, kind="auto")
    with Cluster(world_size=4, network=net) as c: ...     # ranks 0-1 node 0, ranks 2-3 node 1

kind "kernel": each node a Linux network namespace, each NIC a veth pair to a bridge, shaped both ways by tc
HTB (commlib.network.kernel); the ranks start inside their node's namespace and bind Gloo to their NIC (GPU i
of a node uses NIC i mod k), so every torch.distributed call between nodes crosses a shaped NIC and traffic
inside a node stays on the namespace's loopback (NVLink's stand-in). kind "paced": commlib's Python pacer
(commlib.algorithms.emulation) around every run(): only commlib.algorithms' messages are paced. kind "auto":
the kernel where available() says so, the pacer elsewhere; it prints which, in one line.
"""

from __future__ import annotations

import atexit
import functools
import threading
import weakref

from commlib import _validate as check
from commlib.network import kernel
from commlib.network.spec import BANDWIDTH, MAX_GPUS, MAX_LATENCY, MAX_NICS, MAX_NODES, Spec  # noqa: F401

KINDS = ("auto", "kernel", "paced")
_live: "weakref.WeakSet[Network]" = weakref.WeakSet()


def available() -> tuple[bool, str]:
    """(True, how) where the kernel network can be built here, else (False, why)."""
    return kernel.available()


class Network:
    """An emulated network (see the module docstring). Every argument is checked before anything is made;
    the kernel kind is built by up() (a Cluster calls it) and removed by down(), close, exit or the next
    start after a SIGKILL (kernel.sweep)."""

    def __init__(self, nodes, gpus_per_node, nics_per_node=1, *, bandwidth, latency=0.0, kind="auto",
                 quiet: bool = False):
        self.nodes = check.integer("nodes", nodes, 1, MAX_NODES)
        self.gpus_per_node = check.integer("gpus_per_node", gpus_per_node, 1, MAX_GPUS)
        self.nics_per_node = check.integer("nics_per_node", nics_per_node, 1, MAX_NICS)
        self.bandwidth = check.number("bandwidth", bandwidth, BANDWIDTH[0], high=BANDWIDTH[1], unit="bytes/s")
        self.latency = check.number("latency", latency, 0.0, high=MAX_LATENCY, unit="seconds")
        kind = check.choice("kind", kind, KINDS)
        if not isinstance(quiet, bool):
            raise TypeError(f"quiet must be True or False, got {quiet!r}")
        ok, why = available()
        if kind == "kernel" and not ok:
            raise RuntimeError(f"kind='kernel' is not available here: {why}")
        if kind != "paced" and ok and self.latency > 0 and not kernel.netem_available():
            if kind == "kernel":
                raise ValueError(f"latency={self.latency!r} needs the kernel's netem qdisc, which this kernel "
                                 f"lacks (tc: 'Specified qdisc kind is unknown'); use latency=0.0 or kind='paced'")
            ok, why = False, "latency > 0 needs netem, which this kernel lacks"
        self.kind = "kernel" if kind == "kernel" or (kind == "auto" and ok) else "paced"
        self.reason = why
        self.name: str | None = None
        self.made: list[str] = []
        self.calibration: dict | None = None
        self._lock = threading.Lock()
        if kind == "auto" and not quiet:
            print(self.summary())

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def summary(self) -> str:
        """One line: which network carries the traffic, and why (the kernel's fits the book's column)."""
        shape = (f"{self.nodes} node(s) x {self.gpus_per_node} GPU(s), {self.nics_per_node} NIC(s) per node of "
                 f"{self.bandwidth / 1e6:g} MB/s")
        if self.kind == "kernel":
            return f"network: kernel ({shape}; Linux namespaces, tc HTB)"
        return f"network: paced ({shape}; commlib's Python pacer: {self.reason})"

    def spec(self) -> Spec:
        """This network as the record a job's environment and traces carry (commlib.network.spec)."""
        return Spec(self.nodes, self.gpus_per_node, self.nics_per_node, self.bandwidth, self.latency, self.kind)

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def nic_of(self, rank: int) -> int:
        """GPU i of a node uses NIC i mod k (rails)."""
        return rank % self.gpus_per_node % self.nics_per_node

    def address(self, node: int, nic: int) -> str:
        """Node n's NIC j: 198.18.j.(n+1), one /24 per rail (RFC 2544's block; it exists only inside the
        namespaces). A message to GPU i of another node leaves by this node's NIC i mod k and arrives at that
        node's NIC i mod k (routing by destination). Between GPUs of one index (hierarchical, rail-aligned rings)
        that is GPU i's own NIC on both nodes, as commlib.topology and the pacer price it. Across rails it is not:
        Gloo connects without binding a source address, so a TCP connection's two ends are the acceptor's NIC
        and the connecting node's NIC on the acceptor's rail, both directions on one rail (a multi-ring whose
        rings cross rails does not spread over the NICs here; giving each GPU a namespace of its own, routed by
        its node, would)."""
        return f"198.18.{nic}.{node + 1}"

    def plan(self) -> dict:
        """What kernel.build makes for this network, as data."""
        name = self.name
        return {"switch": f"{name}-sw", "bandwidth": self.bandwidth, "latency": self.latency,
                "nodes": [{"netns": f"{name}-n{n}",
                           "nics": [{"dev": f"nic{j}", "port": f"p{n}-{j}", "address": self.address(n, j)}
                                    for j in range(self.nics_per_node)]}
                          for n in range(self.nodes)]}

    def up(self, keep: bool = False) -> "Network":
        """Build the kernel network (a no-op for the pacer, or if it is up). Sweeps dead owners' leftovers first."""
        with self._lock:
            if self.kind != "kernel" or self.made:
                return self
            kernel.sweep()
            self.name = kernel.new_name(keep)
            self.made = kernel.build(self.plan())
            if not keep:  # a kept network (`python -m commlib network up`) outlives this process
                _live.add(self)
        return self

    def down(self) -> None:
        """Remove what up() made. Safe to call twice."""
        with self._lock:
            made, self.made = self.made, []
            kernel.remove(made)

    def set_bandwidth(self, bandwidth) -> None:
        """Every NIC at `bandwidth` bytes/s from now on (checked as in the constructor). On the kernel network the
        shapers change in place (the ranks keep their connections); on the pacer the next run() paces at it."""
        bandwidth = check.number("bandwidth", bandwidth, BANDWIDTH[0], high=BANDWIDTH[1], unit="bytes/s")
        with self._lock:
            if self.kind == "kernel" and self.made:
                kernel.reshape(self.plan(), bandwidth)
            self.bandwidth = bandwidth

    def is_up(self) -> bool:
        """True once up() has built the kernel network; the pacer needs nothing built."""
        return self.kind != "kernel" or bool(self.made)

    def placement(self, rank: int) -> dict:
        """For a rank of a Cluster on this network: the namespace to enter and the interface Gloo binds to
        ({} on the pacer: the ranks stay on the host's loopback)."""
        if self.kind != "kernel":
            return {}
        if not self.made:
            raise RuntimeError("the kernel network is not up: call up() first (a Cluster does)")
        return {"netns": f"{kernel.NETNS_DIR}/{self.name}-n{self.node_of(rank)}", "ifname": f"nic{self.nic_of(rank)}",
                "address": self.address(self.node_of(rank), self.nic_of(rank))}

    def wrap(self, fn):
        """fn as a Cluster runs it on this network: on the pacer, inside emulate(); on the kernel, as it is."""
        if self.kind == "kernel":
            return fn
        return functools.partial(_paced, fn, (self.gpus_per_node, self.bandwidth, self.latency, self.nics_per_node))

    def check_cluster(self, world_size: int, backend: str) -> None:
        """Raise ValueError unless a Cluster of world_size ranks on `backend` fits this network."""
        if world_size != self.world_size:
            raise ValueError(f"network: a Cluster on this network needs world_size = nodes x gpus_per_node = "
                             f"{self.nodes} x {self.gpus_per_node} = {self.world_size}, got {world_size}")
        if backend != "gloo":
            raise ValueError(f"network: the emulated nodes talk over Gloo (TCP); use backend='gloo', got {backend!r}")

    def __enter__(self) -> "Network":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    def __repr__(self) -> str:
        state = f", up as {self.name}" if self.made else ""
        return (f"Network(nodes={self.nodes}, gpus_per_node={self.gpus_per_node}, nics_per_node={self.nics_per_node}, "
                f"bandwidth={self.bandwidth:g}, latency={self.latency:g}, kind={self.kind!r}{state})")


def emulate(gpus_per_node, bandwidth, latency=0.0, nics_per_node=1):
    """The pacer, inside every rank: commlib.algorithms' messages between nodes of gpus_per_node ranks paced
    through NICs of `bandwidth` bytes/s and `latency` s (see commlib.algorithms.emulation). A context manager."""
    from commlib.algorithms.emulation import emulate as _emulate  # torch, in ranks only

    return _emulate(gpus_per_node, bandwidth, latency, nics_per_node)


def _paced(fn, shape, /, *args, **kwargs):
    """fn(*args, **kwargs) inside emulate(*shape); fn's keywords may use any name (bandwidth= included)."""
    gpus_per_node, bandwidth, latency, nics_per_node = shape
    with emulate(gpus_per_node, bandwidth, latency, nics_per_node):
        return fn(*args, **kwargs)


@atexit.register
def _down_all() -> None:
    for net in list(_live):
        net.down()
