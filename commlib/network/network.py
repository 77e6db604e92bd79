"""`Network`: the emulated cluster's network, nodes x GPUs x NICs with `bandwidth` bytes/s per NIC direction.

    net = Network(nodes=2, gpus_per_node=2, nics_per_node=1, bandwidth=20e6, kind="auto")
    with Cluster(world_size=4, network=net) as c: ...     # ranks 0-1 node 0, ranks 2-3 node 1

kind "kernel": each GPU a Linux network namespace with an address of its own, each node a namespace that joins
its GPUs (NVLink's stand-in: unshaped, or `intra_bandwidth` bytes/s) and holds its NICs, each NIC a veth pair to
a switch shaped both ways by tc HTB (commlib.network.kernel). GPU i of a node leaves and enters it through NIC
i mod k whatever GPU it talks to (rails, routed by source inside the node), so every torch.distributed call
between nodes crosses the shaped NICs its GPUs' rails say. kind "paced": commlib's Python pacer
(commlib.algorithms.emulation) around every run(): only commlib.algorithms' messages are paced. kind "auto":
the kernel where available() says so, the pacer elsewhere; it prints which, in one line.
small_packets=True (kernel only): each GPU hands its NIC packets of at most the shaper's burst instead of the
kernel's 64 KiB (kernel.gso_cap: a 4-rank ring then runs at its bytes' time; off by default, see there).
Every rank started on a Network has COMMLIB_NETWORK = net.spec().to_json() (commlib.network.spec).
"""

from __future__ import annotations

import atexit
import functools
import textwrap
import threading
import weakref

from commlib import _validate as check
from commlib.network import kernel, names, userns
from commlib.network.spec import (BANDWIDTH, ENV, MAX_GPUS, MAX_LATENCY, MAX_NICS, MAX_NODES, MAX_RANKS,  # noqa: F401
                                  Spec, checked)


KINDS = ("auto", "kernel", "paced")
COLUMN = 100   # the book's column: no line the network prints is wider
_live: "weakref.WeakSet[Network]" = weakref.WeakSet()


def available() -> tuple[bool, str]:
    """(True, how) where the kernel network can be built here, else (False, why): on the host as root, in a
    keeper's user namespace as an ordinary user (commlib.network.userns)."""
    return kernel.available() if kernel.privileged() else userns.available()


class Network:
    """An emulated network (see the module docstring). Every argument is checked before anything is made;
    the kernel kind is built by up() (a Cluster calls it) and removed by down(), close, exit or the next
    start after a SIGKILL (kernel.sweep)."""

    def __init__(self, nodes, gpus_per_node, nics_per_node=1, *, bandwidth, latency=0.0, kind="auto",
                 quiet: bool = False, intra_bandwidth=None, small_packets: bool = False):
        self.nodes, self.gpus_per_node, self.nics_per_node, self.bandwidth, self.latency = checked(
            nodes, gpus_per_node, nics_per_node, bandwidth, latency)
        self.intra_bandwidth = None if intra_bandwidth is None else check.number(
            "intra_bandwidth", intra_bandwidth, BANDWIDTH[0], high=BANDWIDTH[1], unit="bytes/s")
        kind = check.choice("kind", kind, KINDS)
        if not isinstance(quiet, bool):
            raise TypeError(f"quiet must be True or False, got {quiet!r}")
        if not isinstance(small_packets, bool):
            raise TypeError(f"small_packets must be True or False, got {small_packets!r}")
        self.small_packets = small_packets
        # the pacer asked for by name needs nothing tried (available() builds a throwaway namespace once)
        ok, why = available() if kind != "paced" else (False, "kind='paced' was asked for")
        if kind == "kernel" and not ok:
            raise RuntimeError(f"kind='kernel' is not available here: {why}")
        if kind != "paced" and ok and self.latency > 0 and not _netem_available():
            if kind == "kernel":
                raise ValueError(f"latency={self.latency!r} needs the kernel's netem qdisc, which this kernel "
                                 f"lacks (tc: 'Specified qdisc kind is unknown'); use latency=0.0 or kind='paced'")
            ok, why = False, "latency > 0 needs netem, which this kernel lacks"
        self.kind = "kernel" if kind == "kernel" or (kind == "auto" and ok) else "paced"
        self.reason = why
        self.name: str | None = None
        self.made: list[str] = []
        self.keeper = None   # commlib.network.userns.Keeper where this process is not root, while up
        self.calibration: dict | None = None
        self._lock = threading.Lock()
        self._users = 0
        self._attached_up = False
        if kind == "auto" and not quiet:
            print(self.summary())

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def summary(self) -> str:
        """Which network carries the traffic, and why: one line on the kernel network; the pacer's reason may
        take more, each within the book's column (COLUMN)."""
        shape = (f"{self.nodes} node(s) x {self.gpus_per_node} GPU(s), {self.nics_per_node} NIC(s) per node of "
                 f"{self.bandwidth / 1e6:g} MB/s")
        if self.kind == "kernel":   # root's or a keeper's (an ordinary user's): the same network
            return f"network: kernel ({shape}; Linux namespaces, tc HTB)"
        return wrap(f"network: paced ({shape}; commlib's Python pacer: {self.reason})")

    def spec(self) -> Spec:
        """This network as the record a job's environment and traces carry (commlib.network.spec)."""
        return Spec(self.nodes, self.gpus_per_node, self.nics_per_node, self.bandwidth, self.latency, self.kind)

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def nic_of(self, rank: int) -> int:
        """GPU i of a node uses NIC i mod k (rails)."""
        return rank % self.gpus_per_node % self.nics_per_node

    def address(self, node: int, nic: int) -> str:
        """Node n's NIC j: 198.18.j.(n+1), on one /16 through the switch (RFC 2544's block; it exists only inside
        the namespaces)."""
        return f"198.18.{nic}.{node + 1}"

    def gpu_address(self, rank: int) -> str:
        """GPU i of node n: 198.19.n.(i+1), on its node's bridge; what leaves it goes out by NIC i mod k."""
        return f"198.19.{self.node_of(rank)}.{rank % self.gpus_per_node + 1}"

    @property
    def payload_bandwidth(self) -> float:
        """Bytes/s of TCP payload a NIC carries at `bandwidth` on the kernel network: HTB charges every
        1500-byte segment's headers too (kernel.PAYLOAD_FRACTION, 1448 of 1514 bytes); the pacer paces payload."""
        return self.bandwidth * (kernel.PAYLOAD_FRACTION if self.kind == "kernel" else 1.0)

    def plan(self) -> dict:
        """What kernel.build makes for this network, as data."""
        name, k = self.name, self.nics_per_node
        nodes = []
        for n in range(self.nodes):
            gpus = [{"netns": f"{name}-n{n}g{i}", "port": f"g{i}", "address": self.gpu_address(n * self.gpus_per_node + i),
                     "mac": f"02:c1:01:00:{n:02x}:{i:02x}", "nic": i % k} for i in range(self.gpus_per_node)]
            nics = [{"dev": f"nic{j}", "port": f"p{n}-{j}", "address": self.address(n, j), "rail": j,
                     "mac": f"02:c1:00:00:{n:02x}:{j:02x}"} for j in range(k)]
            nodes.append({"netns": f"{name}-n{n}", "lan": f"198.19.{n}.254", "mac": f"02:c1:02:00:{n:02x}:00",
                          "nics": nics, "gpus": gpus})
        return {"switch": f"{name}-sw", "bandwidth": self.bandwidth, "latency": self.latency,
                "intra_bandwidth": self.intra_bandwidth, "nodes": nodes,
                "gso_max_size": kernel.gso_cap(self.bandwidth) if self.small_packets else None}

    def up(self, keep: bool = False) -> "Network":
        """Build the kernel network (a no-op for the pacer, or if it is up). Sweeps dead owners' leftovers first."""
        with self._lock:
            if self.kind != "kernel" or self.made:
                return self
            if not kernel.privileged():   # an ordinary user: the namespaces live in a keeper's (userns.py)
                if keep:
                    raise kernel.NetworkError("a network kept after this process ends needs root (a user's "
                                              "namespaces end with the process that holds them)")
                self.keeper = userns.Keeper()
            else:
                kernel.sweep()
            self.name = kernel.new_name(keep)
            try:
                made = self._place().build(self.plan())
            except BaseException:
                self._close_keeper()
                raise
            if keep:  # complete: from now on `clean` and the next start leave it to `down`
                try:
                    names.mark(made, names.KEPT)
                except BaseException:
                    kernel.remove(made)
                    raise
            else:  # removed at this process's exit; a kept one (`network up`) outlives it until `down`
                _live.add(self)
            self.made = made
        return self

    def down(self) -> None:
        """Remove what up() made. Safe to call twice."""
        with self._lock:
            made, self.made = self.made, []
            try:
                if made:
                    self._place().remove(made)
            finally:
                self._close_keeper()

    def _place(self):
        """Where the namespaces are made and changed: this process (root), or its keeper."""
        return self.keeper or kernel

    def _close_keeper(self) -> None:
        keeper, self.keeper = self.keeper, None
        if keeper is not None:
            keeper.close()

    def netns_path(self, name: str) -> str:
        """The file a process opens to enter namespace `name` of this network (netns.enter)."""
        return self._place().netns_path(name)

    @property
    def userns_path(self) -> str | None:
        """The user namespace a rank joins before its GPU's namespace (a keeper's), or None (root)."""
        return self.keeper.userns_path if self.keeper else None

    def free_port(self, name: str) -> int:
        """A free port inside namespace `name` of this network (up)."""
        return self._place().free_port(name)

    def attach(self) -> None:
        """A Cluster starts using this network: up() if it is not up (then the last detach() takes it down)."""
        with self._lock:
            self._users += 1
            first = self._users == 1
        if first and not self.is_up():
            try:
                self.up()
            except BaseException:
                with self._lock:
                    self._users -= 1
                raise
            self._attached_up = True

    def detach(self) -> None:
        """A Cluster stops using this network: the last user takes down what attach() brought up, not before
        (one Network may serve several Clusters, one after another or at once)."""
        with self._lock:
            self._users = max(0, self._users - 1)
            last = self._users == 0 and self._attached_up
        if last:
            self._attached_up = False
            self.down()

    def nic_bytes(self) -> dict:
        """{(node, nic): (bytes sent, bytes received)} from tc's own counters (kernel kind, while up)."""
        if self.kind != "kernel" or not self.made:
            raise RuntimeError("nic_bytes needs a kernel network that is up")
        return self._place().nic_bytes(self.plan())

    def set_bandwidth(self, bandwidth) -> None:
        """Every NIC at `bandwidth` bytes/s from now on (checked as in the constructor). On the kernel network the
        shapers change in place (the ranks keep their connections); on the pacer the next run() paces at it."""
        bandwidth = check.number("bandwidth", bandwidth, BANDWIDTH[0], high=BANDWIDTH[1], unit="bytes/s")
        with self._lock:
            if self.kind == "kernel" and self.made:
                self._place().reshape(self.plan(), bandwidth)
            self.bandwidth = bandwidth

    def is_up(self) -> bool:
        """True once up() has built the kernel network; the pacer needs nothing built."""
        return self.kind != "kernel" or bool(self.made)

    def placement(self, rank: int) -> dict:
        """For a rank of a Cluster on this network: its environment (COMMLIB_NETWORK), and on the kernel kind the
        namespace of its GPU and the interface Gloo binds to (on the pacer the ranks stay on the host's loopback)."""
        env = {"environment": {ENV: self.spec().to_json()}}
        if self.kind != "kernel":
            return env
        if not self.made:
            raise RuntimeError("the kernel network is not up: call up() first (a Cluster does)")
        node, gpu = self.node_of(rank), rank % self.gpus_per_node
        return env | {"netns": self.netns_path(f"{self.name}-n{node}g{gpu}"), "ifname": "eth0",
                      "address": self.gpu_address(rank), "userns": self.userns_path}

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


def _netem_available() -> bool:
    """Whether the kernel has netem, asked where the network would be built (the host, or a keeper)."""
    return kernel.netem_available() if kernel.privileged() else userns.netem_available()


def wrap(text: str) -> str:
    """text in lines of at most COLUMN characters, the later ones indented (a reason a learner reads whole)."""
    return "\n".join(textwrap.wrap(text, COLUMN, subsequent_indent="    ", break_on_hyphens=False))


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
