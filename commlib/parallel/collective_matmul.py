"""The collective matmul (async tensor parallelism), and the ring pass it shares with ring attention.

Sequence-parallel tensor parallelism keeps the activations X split along the sequence, X_r on rank r
([s/p, h]), and the column-parallel weight split by columns, W_r ([h, f/p]). The plain layer gathers
first, then multiplies:

    Y_r = all_gather(X) @ W_r                        the matmul waits for the whole gather

Wang et al., "Overlap Communication with Dependent Computation via Decomposition in Large Deep
Learning Models" (ASPLOS 2023) cut it into p steps: at step t a rank multiplies the shard it holds,
X_(r-t) @ W_r (rows (r-t) of Y_r), while it passes that shard on to rank r+1 and receives the next one
from rank r-1. The same bytes as a ring all-gather, (p-1) |X_r| per rank, but all except the first
step's transfer can hide behind a matmul. torch calls it async TP (fused_all_gather_matmul in
torch.distributed._symmetric_memory, which torchtitan turns on under torch.compile); Megatron-LM's
--tp-comm-overlap does it with Transformer Engine's userbuffers.

RingPass is the ring itself: one send to the next rank and one receive from the previous rank per step,
posted together and waited for later, so the caller computes in between. Under network.emulate() its
messages are paced like commlib.algorithms' (commlib.emulation). ring_timelines is its model: the
timelines of overlap.Timeline, one per rank, from each step's compute and each message's transfer time.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from commlib.algorithms import p2p
from commlib.cost.timeline import Span, Timeline


class RingPass:
    """Rank ranks[i] sends to ranks[i+1] and receives from ranks[i-1] (global ranks, default group).
    .sent: bytes this rank sent; .steps: [(compute_s, wait_s)] recorded by run()."""

    def __init__(self, ranks: list[int] | None = None):
        self.ranks = list(range(dist.get_world_size())) if ranks is None else [int(r) for r in ranks]
        if dist.get_rank() not in self.ranks:
            raise ValueError(f"ranks {self.ranks} do not include this rank ({dist.get_rank()})")
        self.size = len(self.ranks)
        self.rank = self.ranks.index(dist.get_rank())
        self.next, self.prev = self.ranks[(self.rank + 1) % self.size], self.ranks[(self.rank - 1) % self.size]
        self.sent = 0
        self.steps: list[tuple[float, float]] = []

    def start(self, send: torch.Tensor, recv: torch.Tensor, tag: int = 0):
        """Post the receive of `recv` from the previous rank and the send of `send` to the next -> a handle
        for finish(). Do not change `send` before then. tag tells apart two passes in flight at once."""
        net = p2p.network()
        nbytes = send.numel() * send.element_size()
        rticket = None if net is None else net.expect(self.prev, recv.numel() * recv.element_size())
        sticket = None if net is None else net.on_send(self.next, nbytes)
        # posted as one group: NCCL needs that when prev == next (cp = 2), Gloo posts them one by one
        buf = send.contiguous()   # held in the handle until finish(): a temporary copy must outlive the send
        rwork, swork = dist.batch_isend_irecv([dist.P2POp(dist.irecv, recv, self.prev, tag=tag),
                                               dist.P2POp(dist.isend, buf, self.next, tag=tag)])
        self.sent += nbytes
        return [(swork, sticket), (rwork, rticket)], net, buf

    @staticmethod
    def finish(handle) -> None:
        works, net, _ = handle
        for work, ticket in works:
            work.wait()
            if ticket is not None:
                net.complete(ticket)

    def run(self, block: torch.Tensor, compute, overlap: bool = True, clock=time.perf_counter) -> torch.Tensor:
        """Pass `block` around the ring; compute(step, src, block) runs on the block of group rank src at each
        of the p steps. overlap=True sends the block on while it computes; False waits for each transfer
        first. Records (compute_s, wait_s) per step in .steps -> the last block held."""
        cur = block.contiguous()
        for step in range(self.size):
            src = (self.rank - step) % self.size
            t0 = clock()
            handle, nxt = None, None
            if step < self.size - 1:
                nxt = torch.empty_like(cur)
                handle = self.start(cur, nxt)
                if not overlap:
                    self.finish(handle)
                    handle = None
            t1 = clock()
            compute(step, src, cur)
            t2 = clock()
            if handle is not None:
                self.finish(handle)
            self.steps.append((t2 - t1, (t1 - t0) + (clock() - t2)))
            cur = nxt if nxt is not None else cur
        return cur


def ring_timelines(compute_s, message_s: float, overlap: bool = True) -> list[Timeline]:
    """The model of RingPass.run: compute_s[r][t] seconds of compute at step t on rank r, message_s per transfer
    (latency + bytes / bandwidth). Rank r's step t+1 starts once its step t has computed, its send has left
    (message_s after it was posted, as the emulated NIC releases it) and the block from rank r-1 has arrived
    (message_s after that rank posted it). overlap=False: each step's transfer first, then its compute.
    -> one overlap.Timeline per rank; exposed communication = total_s - compute_s."""
    p = len(compute_s)
    steps = len(compute_s[0])
    start = [0.0] * p
    events = [[] for _ in range(p)]
    for t in range(steps):
        nxt = []
        for r in range(p):
            comm = message_s if t < steps - 1 else 0.0
            if comm:
                events[r].append(Span("comm", t, start[r], start[r] + comm))
            begin = start[r] if overlap else max(start[r] + comm, start[(r - 1) % p] + comm)
            events[r].append(Span("compute", t, begin, begin + compute_s[r][t]))
            arrive = start[(r - 1) % p] + comm
            nxt.append(max(begin + compute_s[r][t], start[r] + comm, arrive))
        start = nxt
    return [Timeline(sorted(ev, key=lambda e: e.start)) for ev in events]


def exposed_s(timeline: Timeline) -> float:
    """What a ring step added to its compute: total - compute."""
    return timeline.total_s - timeline.compute_s


# ------------------------------------------------------------------------------------ the layer
def all_gather_matmul(x: torch.Tensor, w: torch.Tensor, group=None) -> torch.Tensor:
    """The plain layer: gather every rank's rows of x, then one matmul with this rank's columns w."""
    p = dist.get_world_size(group)
    gathered = x.new_empty((p * x.shape[0], *x.shape[1:]))
    dist.all_gather_single(gathered, x.contiguous(), group=group)
    return gathered @ w


def collective_matmul(x: torch.Tensor, w: torch.Tensor, ring: RingPass, overlap: bool = True) -> torch.Tensor:
    """all_gather(x) @ w in p steps: at step t multiply the rows of group rank r-t while passing them on.
    -> [p * rows, cols], equal to all_gather_matmul."""
    rows = x.shape[0]
    out = x.new_empty((ring.size * rows, w.shape[1]))

    def compute(step, src, block):
        torch.matmul(block, w, out=out[src * rows:(src + 1) * rows])

    ring.run(x, compute, overlap=overlap)
    return out


def bytes_per_rank(rows: int, hidden: int, p: int, itemsize: int) -> int:
    """What each rank sends: (p-1) shards of rows x hidden, as a ring all-gather of the activations."""
    return (p - 1) * rows * hidden * itemsize
