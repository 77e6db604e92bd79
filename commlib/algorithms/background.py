"""commlib's collectives as asynchronous work: one background thread per rank runs them in the order they were
issued (as Gloo's worker does), so that a DDP bucket's all-reduce through the emulated network overlaps backward.

    bg = Background("ring")                        # inside a rank (under network.emulate(): paced)
    fut = bg.all_reduce(t)                         # -> a torch.futures.Future of t, summed over ranks in place
    model.register_comm_hook(bg, average_hook)     # overlap.BucketedDDP: each bucket averaged through it
    bg.close()                                     # or use it as a context manager

Every rank must issue the same collectives in the same order (as with any process group); one thread per rank
keeps that order on the wire. For a trace: torch.profiler records a thread's operators only where it was started
or where torch carried its state (its own async tasks, Gloo's workers), never on a Python thread, so each work's
interval is kept here on the host clock (time.perf_counter) and traces.record writes it into the trace afterwards
(`commlib:<op> bytes=.. dtype=.. group=0 size=.. algorithm=.. seq=..`, aligned on a mark the profiler recorded);
the moment a call is queued and the wait that needs it are recorded by the profiler itself (`commlib:queue
seq=..`, `commlib:wait seq=..`, from the issuing thread). traces.py reads all three.
"""

from __future__ import annotations

import collections
import queue
import threading
import time

import torch
import torch.distributed as dist

from commlib.algorithms import nodes, ring

# the node-level algorithms commlib.topology prices (flat_ring, hierarchical), so that a replay can re-price them
ALGORITHMS = {"ring": lambda t, g: ring.ring_all_reduce(t),
              "hierarchical": lambda t, g: nodes.hierarchical_all_reduce(t, g)}
LIVE: list = []   # this process's open Background objects (traces.record writes their work into its trace)
KEPT = 1 << 16    # finished works remembered for a trace: a recorded step's, not a whole training run's


class Background:
    """One rank's background communication thread. algorithm: ring | hierarchical (gpus_per_node needed); `done` holds (seq, name, start, end) per finished work, host clock (s): the last KEPT."""

    def __init__(self, algorithm: str = "ring", gpus_per_node: int | None = None):
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {tuple(ALGORITHMS)}, got {algorithm!r}")
        if algorithm == "hierarchical" and not (isinstance(gpus_per_node, int) and gpus_per_node >= 1):
            raise ValueError(f"gpus_per_node must be an int >= 1 for the hierarchical algorithm, got {gpus_per_node!r}")
        if not dist.is_initialized():
            raise RuntimeError("Background runs inside a rank: initialise torch.distributed first (a Cluster does)")
        self.algorithm, self.gpus_per_node = algorithm, gpus_per_node
        self.size = dist.get_world_size()
        self.done: collections.deque[tuple[int, str, float, float]] = collections.deque(maxlen=KEPT)
        self.tid = None   # the thread's id, as a trace names threads
        self._seq = 0
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="commlib-background", daemon=True)
        self._thread.start()
        LIVE.append(self)

    def all_reduce(self, t: torch.Tensor) -> torch.futures.Future:
        """Queue t's sum over ranks (in place) -> a Future of t. The Future's `seq` is its issue index."""
        if self._thread is None:
            raise RuntimeError("this Background is closed")
        seq, self._seq = self._seq, self._seq + 1
        with torch.profiler.record_function(f"commlib:queue seq={seq}"):
            fut = torch.futures.Future()
            fut.seq = seq
            self._queue.put((seq, t, fut))
        return fut

    def wait(self, fut: torch.futures.Future):
        """fut.wait(), recorded as the wait that needs its result (commlib:wait seq=..)."""
        with torch.profiler.record_function(f"commlib:wait seq={fut.seq}"):
            return fut.wait()

    def _run(self) -> None:
        self.tid = threading.get_native_id()
        torch.set_num_threads(1)
        while True:
            item = self._queue.get()
            if item is None:
                return
            seq, t, fut = item
            name = (f"commlib:all_reduce bytes={t.numel() * t.element_size()} dtype={str(t.dtype)[6:]} group=0 "
                    f"size={self.size} algorithm={self.algorithm} seq={seq}")
            start = time.perf_counter()
            try:
                ALGORITHMS[self.algorithm](t, self.gpus_per_node)
            except BaseException as e:   # the waiter raises it (a dead peer: the Cluster's timeout names the rank)
                fut.set_exception(e)
                continue
            self.done.append((seq, name, start, time.perf_counter()))
            fut.set_result(t)

    def close(self) -> None:
        """Finish the queued work and end the thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self in LIVE:
            LIVE.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def average_hook(state: Background, bucket) -> torch.futures.Future:
    """A DDP comm hook (torch's signature): the bucket divided by the world size, then summed through `state`."""
    buffer = bucket.buffer()
    buffer.div_(state.size)
    return state.all_reduce(buffer)
