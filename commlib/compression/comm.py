"""What every compression hook shares: counted collectives, a bucket, error feedback, and the plain all-reduce.

A hook has torch DDP's signature, hook(state, bucket) -> Future[Tensor] holding the bucket's gradient
averaged over ranks, so `DistributedDataParallel.register_comm_hook(state, hook)` and
`overlap.BucketedDDP.register_comm_hook(state, hook)` both take it. Our hooks run their collectives to
completion before returning (a completed Future): the time inside the hook minus the time inside the
collectives is then the cost of compressing (torch's own hooks chain Futures instead, to overlap).

Error feedback (Seide et al. 2014; Karimireddy et al. 2019; Vogels et al. 2019, Algorithm 2): each rank
adds what compression left out of its last gradients (its residual e) before compressing again,

    delta = g + e;   send C(delta);   e <- delta - C(delta)      (C(delta): this rank's decompressed share)

so over T steps what was applied is the sum of the true gradients minus what is still in e. Residuals
are kept per parameter, so they survive DDP rebuilding its buckets after the first iteration.
"""

import time

import torch
import torch.distributed as dist

from commlib import algorithms as alg
from commlib import cost

COMM_ALGORITHMS = ("builtin", "ring")


class HookComm:
    """The collectives a hook calls, timed and counted on this rank.

    algorithm "builtin": torch.distributed's own (Gloo or NCCL); bytes_sent adds what a ring sends for each
    call (this rank's exact share, commlib.cost.bytes_sent_by_rank). "ring": commlib's ring algorithms,
    and bytes_sent adds the messages this rank really sent (their algorithms.Trace). With CUDA tensors each
    collective is bracketed by torch.cuda.synchronize(), so that `seconds` are the GPU's (and nothing overlaps).
    Under network.emulate() only "ring" is paced (it sends through commlib.algorithms): "builtin" raises there,
    rather than measure loopback and call it the emulated link."""

    def __init__(self, algorithm: str = "builtin", group=None):
        if algorithm not in COMM_ALGORITHMS:
            raise ValueError(f"algorithm must be one of {COMM_ALGORITHMS}, got {algorithm!r}")
        if algorithm == "ring" and group is not None:
            raise ValueError("algorithm='ring' runs on the default process group only; pass group=None")
        self.algorithm, self.group = algorithm, group
        self.trace = alg.Trace()
        self.bytes_sent, self.seconds, self.calls = 0, 0.0, 0

    @property
    def world_size(self) -> int:
        return dist.get_world_size(self.group)

    @staticmethod
    def _clock(t: torch.Tensor) -> float:
        if t.is_cuda:
            torch.cuda.synchronize(t.device)
        return time.perf_counter()

    def _check_paced(self) -> None:
        if self.algorithm == "builtin" and alg.network() is not None:
            raise RuntimeError("HookComm('builtin') runs torch.distributed's own collectives, which network.emulate() "
                               "does not pace; use HookComm('ring') inside emulate()")

    def _sent_since(self, n_events: int) -> int:
        """Bytes of the messages traced after the first n_events (not Trace.bytes_sent: that sums them all)."""
        return sum(e.nbytes for e in self.trace.events[n_events:])

    def _count(self, op: str, t: torch.Tensor, nbytes: int, t0: float) -> None:
        self.seconds += self._clock(t) - t0
        self.calls += 1
        if self.algorithm == "builtin":
            p, rank = self.world_size, dist.get_rank(self.group)
            self.bytes_sent += int(cost.bytes_sent_by_rank(op, nbytes, p, "ring", t.element_size())[rank])

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """Sum over ranks, in place; -> t."""
        self._check_paced()
        t0 = self._clock(t)
        if self.algorithm == "ring":
            before = len(self.trace.events)
            alg.ring_all_reduce(t, trace=self.trace)
            self.bytes_sent += self._sent_since(before)
        else:
            dist.all_reduce(t, group=self.group)
        self._count("all_reduce", t, t.numel() * t.element_size(), t0)
        return t

    def all_gather(self, payload: torch.Tensor) -> torch.Tensor:
        """Every rank's payload (1-D uint8, the same length on every rank) -> a (p, length) uint8 tensor."""
        self._check_paced()
        p, n = self.world_size, payload.numel()
        t0 = self._clock(payload)
        if self.algorithm == "ring":  # commlib's ring moves 4-byte words: pad to a whole word (0-3 bytes)
            words = torch.zeros(-(-n // 4) * 4, dtype=torch.uint8, device=payload.device)
            words[:n] = payload
            before = len(self.trace.events)
            out = alg.ring_all_gather(words.view(torch.int32), trace=self.trace).view(torch.uint8).view(p, -1)[:, :n]
            self.bytes_sent += self._sent_since(before)
        else:
            out = torch.empty(p * n, dtype=torch.uint8, device=payload.device)
            dist.all_gather_single(out, payload, group=self.group)
            out = out.view(p, n)
        self._count("all_gather", payload, p * n, t0)
        return out


class Bucket:
    """One bucket as a hook sees it: the methods of torch.distributed.GradBucket that hooks call.
    buffer: the flat gradients of `params`, in that order; gradients(): views of it shaped like them."""

    def __init__(self, index: int, buffer: torch.Tensor, params, last: bool):
        self._index, self._buffer, self._params, self._last = index, buffer, list(params), bool(last)

    def index(self) -> int:
        return self._index

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def set_buffer(self, tensor: torch.Tensor) -> None:
        self._buffer = tensor

    def is_last(self) -> bool:
        return self._last

    def parameters(self) -> list:
        return list(self._params)

    def gradients(self) -> list[torch.Tensor]:
        return split(self._buffer, self._params)


def split(flat: torch.Tensor, params) -> list[torch.Tensor]:
    """Views of a flat bucket-sized tensor, one per parameter, shaped like it."""
    out, offset = [], 0
    for p in params:
        out.append(flat[offset:offset + p.numel()].view(p.shape))
        offset += p.numel()
    return out


class HookState:
    """Per-process state of a hook: error feedback residuals, counted collectives, time spent in hooks.

    iter: completed iterations (a bucket with is_last() ends one). hook_seconds - comm.seconds: the time
    spent compressing and decompressing."""

    def __init__(self, error_feedback: bool = True, comm: HookComm | None = None):
        if not isinstance(error_feedback, bool):
            raise TypeError(f"error_feedback must be True or False, got {error_feedback!r}")
        if comm is not None and not isinstance(comm, HookComm):
            raise TypeError(f"comm must be a compression.HookComm, got {type(comm).__name__}")
        self.error_feedback = error_feedback
        self.comm = comm if comm is not None else HookComm()
        self.residuals: dict[int, torch.Tensor] = {}  # id(parameter) -> its flat residual
        self.iter, self.hook_seconds = 0, 0.0

    @property
    def overhead_seconds(self) -> float:
        return self.hook_seconds - self.comm.seconds

    def residual(self, bucket) -> torch.Tensor:
        """This rank's residual for the bucket's parameters, flat (zeros where there is none)."""
        buffer = bucket.buffer()
        return torch.cat([self.residuals.get(id(p), buffer.new_zeros(p.numel())) for p in bucket.parameters()])

    def with_residual(self, bucket) -> torch.Tensor:
        """delta = this rank's gradient + its residual, a new flat tensor (the bucket is left as it is)."""
        buffer = bucket.buffer()
        if not self.error_feedback or not self.residuals:
            return buffer.clone()
        return buffer + self.residual(bucket)

    def remember(self, bucket, residual: torch.Tensor) -> None:
        """Keep delta - C(delta) for the next step (nothing, without error feedback)."""
        if self.error_feedback:
            for p, r in zip(bucket.parameters(), split(residual, bucket.parameters())):
                self.residuals[id(p)] = r.reshape(-1)

    def finish(self, bucket, mean: torch.Tensor, t0: float) -> torch.futures.Future:
        """Write the mean into the bucket, count the iteration and the time, -> a completed Future."""
        buffer = bucket.buffer()
        if mean is not buffer:
            buffer.copy_(mean)
        if bucket.is_last():
            self.iter += 1
        self.hook_seconds += time.perf_counter() - t0
        fut = torch.futures.Future()
        fut.set_result(buffer)
        return fut


def allreduce_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """No compression: divide by p, then sum over ranks, as torch DDP does (default_hooks.allreduce_hook)."""
    t0 = time.perf_counter()
    buffer = bucket.buffer()
    state.comm.all_reduce(buffer.div_(state.comm.world_size))
    return state.finish(bucket, buffer, t0)
