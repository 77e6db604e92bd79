"""An emulated multi-node cluster on one machine: ranks grouped into nodes whose NICs are slow and shared.

    with network.emulate(gpus_per_node=2, bandwidth=50e6, latency=1e-3) as em:   # inside every rank
        alg.ring_all_reduce(t)      # each message between emulated nodes arrives as if over a NIC
    em.log                          # this rank's paced receives: when due, when released

The network: each node has nics_per_node NICs, each with a send and a receive direction of `bandwidth`
bytes/s; GPU i of a node uses NIC i mod k (rails). A message between nodes is a flow from its sender's
NIC to its receiver's NIC. The flows in flight share every NIC direction max-min fairly: two flows
through one NIC each get half; a flow held back elsewhere leaves its unused share to the others.
Messages of one connection (sender, receiver) cross one after another, as over one queue pair. A
message is delivered `latency` seconds after its last byte has crossed: latency + bytes / bandwidth
alone, the alpha-beta model. Contention is not written into any algorithm: it comes out of this table.

The mechanism: the sender enters each inter-node message in a table that all ranks share (memory-mapped,
flock'ed: on Linux an anonymous memfd of rank 0 that the others open through /proc, so no file exists that
a crash could leave behind; elsewhere a file in the temp folder, unlinked once every rank has it open,
and swept at the next start if its creator died before that), then posts the real send; the data crosses loopback at once. The
receiver, once the data is there, sleeps until the table says the message would have been delivered;
a sender that waits for its send sleeps until the last byte would have left its NIC (so no rank runs
ahead of its NIC). Pacing the completions hides the real loopback transfer under the paced time, as
long as the emulated link is the slower one. Messages inside a node are not paced: loopback stands
for NVLink. On a busy machine loopback itself can fall behind; PacedMessage.data_at shows when.

Not paced: torch.distributed's own collectives (dist.all_reduce, dist.all_to_all_single, ...) and
anything else that does not go through commlib.algorithms' point-to-point layer. Gloo only: NCCL's calls
return before the data moves, so the host cannot pace them. Linux and macOS (the lock is fcntl.flock).
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import mmap
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import numpy as np

from commlib import _validate as check

FREE, ACTIVE, DONE = 0.0, 1.0, 2.0
STATE, SRC, DST, SEQ, NBYTES, LEFT, POSTED, CROSSED, TX, RX = range(10)  # the columns of a flow's row
SLOTS = 1024  # flows in flight at once, all ranks together
SIZE = (SLOTS + 1) * 10 * 8  # bytes of the shared table
PREFIX = "commlib-network-"
# What can be emulated: 1 byte/s to 1 PB/s, up to an hour of latency, 2^16 GPUs or NICs a node. Beyond these the
# pacing arithmetic overflows or sleeps for ever (bandwidth=1e-300), so they are refused before any rank starts.
BANDWIDTH = (1.0, 1e15)
MAX_LATENCY = 3600.0
MAX_PER_NODE = 2**16


def _positive_int(value, name: str) -> int:
    return check.integer(name, value, 1, MAX_PER_NODE)


def _rate(value, name: str, positive: bool) -> float:
    if positive:
        return check.number(name, value, BANDWIDTH[0], high=BANDWIDTH[1], unit="bytes/s")
    return check.number(name, value, 0.0, high=MAX_LATENCY, unit="seconds")


class FluidNetwork:
    """The NICs' state: a table of flows, advanced in time by the caller (the clock is injected, so tests need
    no sleeping). Row 0 of `buffer` holds the time the table was last advanced to."""

    def __init__(self, gpus_per_node, nics_per_node, bandwidth, latency=0.0, buffer: np.ndarray | None = None):
        self.g = _positive_int(gpus_per_node, "gpus_per_node")
        k = _positive_int(nics_per_node, "nics_per_node")
        self.rails = min(k, self.g)  # more NICs than GPUs: each GPU drives k/g of them as one rail
        self.rail_bandwidth = _rate(bandwidth, "bandwidth", positive=True) * k / self.rails
        self.latency = _rate(latency, "latency", positive=False)
        self.buffer = np.zeros((SLOTS + 1) * 10) if buffer is None else buffer
        self.table = self.buffer[10:].reshape(SLOTS, 10)

    @property
    def now(self) -> float:
        return float(self.buffer[0])

    def crosses(self, src: int, dst: int) -> bool:
        return src // self.g != dst // self.g

    def _rail(self, rank: int) -> int:
        node, local = divmod(rank, self.g)
        return node * self.rails + local % self.rails

    def add(self, src: int, dst: int, seq: int, nbytes: float, now: float) -> int:
        """A message enters the network at `now` -> its row."""
        self.advance(now)
        free = np.flatnonzero(self.table[:, STATE] == FREE)
        if not len(free):
            raise RuntimeError(f"the emulated network holds {SLOTS} messages in flight already")
        row = int(free[0])
        self.table[row] = (ACTIVE, src, dst, seq, nbytes, nbytes, max(now, self.now), math.nan,
                           2 * self._rail(src), 2 * self._rail(dst) + 1)
        return row

    def find(self, src: int, dst: int, seq: int) -> int | None:
        """The row of message `seq` from src to dst, or None once its receiver has freed it."""
        t = self.table
        rows = np.flatnonzero((t[:, STATE] != FREE) & (t[:, SRC] == src) & (t[:, DST] == dst) & (t[:, SEQ] == seq))
        return int(rows[0]) if len(rows) else None

    def free(self, row: int) -> None:
        self.table[row, STATE] = FREE

    def _moving(self) -> list[int]:
        """The flows whose bytes are on the wire: the oldest unfinished message of each connection."""
        t = self.table
        head: dict[tuple, int] = {}
        for row in np.flatnonzero(t[:, STATE] == ACTIVE):
            key = (t[row, SRC], t[row, DST])
            if key not in head or t[row, SEQ] < t[head[key], SEQ]:
                head[key] = int(row)
        return list(head.values())

    def _rates(self, rows: list[int]) -> dict[int, float]:
        """Max-min fair shares (progressive filling): fill the most contended NIC direction first."""
        left: dict[int, float] = {}
        rate: dict[int, float] = {}
        todo = set(rows)
        while todo:
            users: dict[int, list[int]] = {}
            for row in todo:
                for nic in (int(self.table[row, TX]), int(self.table[row, RX])):
                    users.setdefault(nic, []).append(row)
            nic = min(users, key=lambda n: left.get(n, self.rail_bandwidth) / len(users[n]))
            share = max(left.get(nic, self.rail_bandwidth) / len(users[nic]), 1e-9 * self.rail_bandwidth)
            for row in users[nic]:
                rate[row] = share
                todo.discard(row)
                for other in (int(self.table[row, TX]), int(self.table[row, RX])):
                    left[other] = left.get(other, self.rail_bandwidth) - share
        return rate

    def advance(self, now: float, until_done: int | None = None) -> None:
        """Move the flows' bytes to time `now` (or, with until_done, as far as that row finishing)."""
        t, clock = self.table, float(self.buffer[0])
        while True:
            rows = self._moving()
            if not rows or (until_done is not None and t[until_done, STATE] == DONE):
                break
            rate = self._rates(rows)
            dt = min(t[r, LEFT] / rate[r] for r in rows)
            if until_done is None and clock + dt > now:
                for r in rows:
                    t[r, LEFT] -= rate[r] * (now - clock)
                break
            clock += dt
            for r in rows:
                t[r, LEFT] -= rate[r] * dt
                if t[r, LEFT] <= 1e-9 * t[r, NBYTES] + 1e-12:
                    t[r, LEFT], t[r, STATE], t[r, CROSSED] = 0.0, DONE, clock
        self.buffer[0] = max(clock, now) if until_done is None else clock

    def due(self, row: int, now: float) -> float:
        """When the message will be delivered: known once its bytes have crossed; before that, the earliest it
        can be (as if nothing else entered the network; later messages can only delay it)."""
        self.advance(now)
        if self.table[row, STATE] != DONE:
            saved = self.buffer.copy()
            self.advance(now, until_done=row)
            crossed = self.table[row, CROSSED]
            self.buffer[:] = saved
            return float(crossed) + self.latency
        return float(self.table[row, CROSSED]) + self.latency


class _SharedFile:
    """A FluidNetwork whose table lives in a memory-mapped file every rank opens; flock serialises access.
    fd: an open descriptor of it (rank 0's memfd), else path is opened. path: None once nothing names it."""

    def __init__(self, path: str | None, fd: int | None = None, **network):
        self.path = path
        self.fd = os.open(path, os.O_RDWR) if fd is None else fd
        if fd is not None or path.startswith("/proc/"):
            self.path = None  # anonymous: nothing on any file system to clean up
        self.map = mmap.mmap(self.fd, SIZE)
        self.net = FluidNetwork(buffer=np.frombuffer(self.map, dtype=np.float64), **network)

    @contextlib.contextmanager
    def locked(self):
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            yield self.net
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self.net = None  # drop the numpy views before closing the map
        with contextlib.suppress(BufferError):  # a view still alive somewhere: the map goes with it
            self.map.close()
        os.close(self.fd)


@dataclass(frozen=True)
class PacedMessage:
    """One paced receive, times on time.monotonic(): posted by the sender, due (the network's delivery time),
    data_at (when the real data had arrived), released (when the receiver went on)."""

    src: int
    dst: int
    nbytes: int
    posted: float
    due: float
    data_at: float
    released: float

    @property
    def late_s(self) -> float:
        """How much later than the model the receiver went on (the emulation's error, all causes)."""
        return self.released - self.due

    @property
    def overslept_s(self) -> float:
        """The part of late_s the pacing itself adds: the wake-up after max(due, data_at). The rest is loopback
        arriving after `due` (the real transfer slower than the emulated one)."""
        return self.released - max(self.due, self.data_at)


class Emulator:
    """This rank's view of the emulated network (what emulate() yields)."""

    def __init__(self, shared: _SharedFile, rank: int, nodes: int, nics_per_node: int, bandwidth: float,
                 latency: float, clock=time.monotonic, sleep=time.sleep):
        self.shared, self.rank, self.clock, self.sleep = shared, rank, clock, sleep
        self.gpus_per_node, self.nodes, self.nics_per_node = shared.net.g, nodes, nics_per_node
        self.bandwidth, self.latency = bandwidth, latency
        self.owner = None  # the frame running emulate()'s with block: the emulation ends with it
        self.owner_thread = None   # the thread running it
        self.closed = False
        self.sent: dict[int, int] = {}
        self.received: dict[int, int] = {}
        self.log: list[PacedMessage] = []

    def active(self) -> bool:
        """Whether the with block that entered emulate() is still running; an abandoned one is closed here."""
        if not self.closed and self.owner is not None and not _running(self.owner, self.owner_thread):
            self.close()
        return not self.closed

    def close(self) -> None:
        from commlib.algorithms import p2p as alg  # the point-to-point layer reads alg.NETWORK

        if alg.NETWORK is self:
            alg.NETWORK = None
        if not self.closed:
            self.closed, self.owner = True, None
            self.shared.close()

    def on_send(self, dst: int, nbytes: int):
        """Called before a send is posted: enters it in the network if it leaves the node -> a ticket for
        complete() (None if it stays inside, or if this emulation is no longer active)."""
        if not self.active() or not self.shared.net.crosses(self.rank, dst):
            return None
        seq = self.sent.get(dst, 0)
        self.sent[dst] = seq + 1
        with self.shared.locked() as net:
            net.add(self.rank, dst, seq, nbytes, self.clock())
        return "send", self.rank, dst, seq, nbytes

    def expect(self, src: int, nbytes: int):
        """Called when a receive is posted -> a ticket for complete(), or None if it stays inside the node."""
        if not self.active() or not self.shared.net.crosses(src, self.rank):
            return None
        seq = self.received.get(src, 0)
        self.received[src] = seq + 1
        return "recv", src, self.rank, seq, nbytes

    def complete(self, ticket) -> None:
        """Called once the real send or receive is done: sleep until the emulated one would be. A send is done
        when its last byte has left the NIC; a receive when the message is delivered (latency later)."""
        kind, src, dst, seq, nbytes = ticket
        data_at = self.clock()
        with self.shared.locked() as net:
            row = net.find(src, dst, seq)
            posted = float(net.table[row, POSTED]) if row is not None else data_at
        if row is None and kind == "recv":
            raise RuntimeError(f"message {seq} from rank {src} to rank {dst} is not in the emulated network")
        while row is not None:  # a sent row the receiver has freed was delivered, so it has crossed
            now = self.clock()
            with self.shared.locked() as net:
                if kind == "send" and net.find(src, dst, seq) is None:
                    break
                due = net.due(row, now) - (net.latency if kind == "send" else 0.0)
            if due <= now:
                break
            self.sleep(due - now)
        if kind == "recv":
            released = self.clock()
            with self.shared.locked() as net:
                net.free(row)
            self.log.append(PacedMessage(src, dst, nbytes, posted, due, data_at, released))


def _shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process: alive
        pass
    return True


def _sweep(folder: str) -> None:
    """Remove the tables of emulations whose creating rank died before unlinking them (named files only)."""
    for name in os.listdir(folder):
        pid = name[len(PREFIX):].split("-")[0]
        if name.startswith(PREFIX) and pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))


def _create_table() -> tuple[int, str]:
    """Rank 0: the shared table -> (its descriptor, the path the other ranks open). On Linux an anonymous
    memfd, which no crash can leave behind (the other ranks open it through /proc while rank 0 lives);
    elsewhere a named file, unlinked by emulate() once everyone has it open."""
    if hasattr(os, "memfd_create") and os.path.isdir(f"/proc/{os.getpid()}/fd"):
        fd = os.memfd_create(PREFIX.rstrip("-"), os.MFD_CLOEXEC)
        os.ftruncate(fd, SIZE)
        return fd, f"/proc/{os.getpid()}/fd/{fd}"
    folder = _shm_dir()
    _sweep(folder)
    fd, path = tempfile.mkstemp(prefix=f"{PREFIX}{os.getpid()}-", dir=folder)
    os.ftruncate(fd, SIZE)
    return fd, path


def _caller_frame():
    """The frame that entered emulate()'s context (past contextlib's own frames)."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename == contextlib.__file__:
        f = f.f_back
    return f


def _running(frame, thread: int | None = None) -> bool:
    """Whether frame is on the stack of `thread` (default: this one): the thread that entered emulate(), which
    a background thread's messages (algorithms.background) check too."""
    f = sys._getframe(1) if thread is None or thread == threading.get_ident() else sys._current_frames().get(thread)
    while f is not None:
        if f is frame:
            return True
        f = f.f_back
    return False


def _drop_stale(alg) -> None:
    """An emulate() entered and never exited (its with block abandoned, its context manager kept alive) ends
    with the function that entered it: it must not pace a later run, nor block the next emulate()."""
    if alg.NETWORK is not None:
        alg.NETWORK.active()


@contextlib.contextmanager
def emulate(gpus_per_node, bandwidth, latency=0.0, nics_per_node=1):
    """Inside every rank at once: groups of gpus_per_node consecutive ranks become nodes with nics_per_node
    NICs of `bandwidth` bytes/s per direction and `latency` s each; commlib.algorithms' messages between
    nodes are paced through them. Yields this rank's Emulator (.log)."""
    import torch.distributed as dist

    from commlib.algorithms import p2p as alg  # the point-to-point layer reads alg.NETWORK

    g = _positive_int(gpus_per_node, "gpus_per_node")
    k = _positive_int(nics_per_node, "nics_per_node")
    bandwidth = _rate(bandwidth, "bandwidth", positive=True)
    latency = _rate(latency, "latency", positive=False)
    if not dist.is_initialized():
        raise RuntimeError("emulate() runs inside ranks (a process group must be initialised)")
    if dist.get_backend() != "gloo":
        raise ValueError(f"emulate() paces on the host and needs the gloo backend, got {dist.get_backend()}")
    p, r = dist.get_world_size(), dist.get_rank()
    if p % g:
        raise ValueError(f"the world size ({p}) must be a multiple of gpus_per_node ({g})")
    _drop_stale(alg)
    if alg.NETWORK is not None:
        raise RuntimeError("emulate() is already active in this rank")
    mine = (g, k, bandwidth, latency)
    everyone = [None] * p
    dist.all_gather_object(everyone, mine)
    if any(args != everyone[0] for args in everyone):
        raise ValueError("every rank must pass the same emulate() arguments (gpus_per_node, nics_per_node, "
                         f"bandwidth, latency); they passed {dict(enumerate(everyone))} (rank: arguments)")
    owner = _caller_frame()
    box, fd = [None], None
    if r == 0:
        fd, box[0] = _create_table()
    dist.broadcast_object_list(box, src=0)
    shared = _SharedFile(box[0], fd if r == 0 else None, gpus_per_node=g, nics_per_node=k, bandwidth=bandwidth,
                         latency=latency)
    dist.barrier()  # everyone has it open: rank 0 may go on (and, with a named file, unlink it)
    if r == 0 and shared.path is not None:
        os.unlink(shared.path)  # every rank has it mapped; the memory goes when the last one closes
        shared.path = None
    em = Emulator(shared, r, p // g, k, bandwidth, latency)
    em.owner, em.owner_thread = owner, threading.get_ident()
    alg.NETWORK = em
    try:
        yield em
    finally:
        em.close()
