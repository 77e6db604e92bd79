"""The overlap timeline model: a backward pass that produces gradient buckets, and one communication stream.

simulate(compute_s, comm_s, overlap) lays out one backward pass that produces gradient buckets one
after another (bucket i is ready once compute_s[0..i] have run) and one communication stream that
all-reduces them in order. Without overlap every all-reduce waits for the end of backward:

    step = compute + comm                                   (no overlap)
    step = compute + comm - overlapped  >=  max(compute, comm) + (what the last bucket leaves exposed)

The last bucket can only start once backward has finished, so its communication is never hidden.
make_buckets groups parameters as torch DDP does; commlib.parallel.ddp.BucketedDDP runs the same with real
gradients and real collectives, inside a rank. Pure: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commlib import _validate as check
from commlib.cost.model import collective_time

DDP_BUCKET_CAP_MB = 25.0     # torch DDP's default bucket_cap_mb (MiB)
DDP_FIRST_BUCKET_MB = 1.0    # with the default cap only: torch DDP's first bucket, so communication starts early


@dataclass(frozen=True)
class Span:
    kind: str      # "forward", "compute" (backward, producing bucket `bucket`) or "comm"
    bucket: int
    start: float
    end: float


@dataclass
class Timeline:
    """Events of one step, (forward and) backward with its gradient communication, in seconds from its start."""

    events: list[Span] = field(default_factory=list)

    @property
    def compute_s(self) -> float:
        return sum(e.end - e.start for e in self.events if e.kind in ("forward", "compute"))

    @property
    def comm_s(self) -> float:
        return sum(e.end - e.start for e in self.events if e.kind == "comm")

    @property
    def total_s(self) -> float:
        return max((e.end for e in self.events), default=0.0)

    @property
    def exposed_comm_s(self) -> float:
        """The time the step is longer than its computation: communication nothing hid."""
        return self.total_s - max((e.end for e in self.events if e.kind in ("forward", "compute")), default=0.0)

    @property
    def overlap_fraction(self) -> float:
        """Share of the communication that ran while backward was still computing."""
        comm = self.comm_s
        return 0.0 if comm == 0 else max(0.0, (comm - self.exposed_comm_s) / comm)  # measured: no -0.001


def simulate(compute_s, comm_s, overlap: bool = True, forward_s: float = 0.0) -> Timeline:
    """Per bucket, in order of readiness: compute_s[i] of backward produces bucket i, comm_s[i] all-reduces it.
    One communication stream. overlap=False starts the first all-reduce only when backward has finished.
    forward_s: the forward pass before backward (an event of kind "forward", bucket -1). It produces no
    gradients, so this step's all-reduces cannot overlap with it."""
    compute = check.numbers("compute_s", compute_s, low=0, unit="seconds", item="bucket")
    comm = check.numbers("comm_s", comm_s, low=0, unit="seconds", item="bucket")
    forward = check.number("forward_s", forward_s, low=0, unit="seconds")
    if len(compute) != len(comm):
        raise ValueError(f"compute_s and comm_s need one entry per bucket, got {len(compute)} and {len(comm)}")
    events, t, ready = ([Span("forward", -1, 0.0, forward)] if forward else []), forward, []
    for i, c in enumerate(compute):
        events.append(Span("compute", i, t, t + c))
        t += c
        ready.append(t)
    stream = forward if overlap else t
    for i, c in enumerate(comm):
        start = max(ready[i], stream)
        events.append(Span("comm", i, start, start + c))
        stream = start + c
    return Timeline(events)


def bucket_caps(bucket_cap_mb, first_bucket_mb) -> tuple[float, float]:
    """torch DDP's caps in MiB: (first bucket, the others). The 1 MiB first bucket comes only with the default
    cap (torch/nn/parallel/distributed.py, _BucketCapacityConfig, torch 2.13); an explicit cap applies to
    every bucket, the first included."""
    for name, v in (("bucket_cap_mb", bucket_cap_mb), ("first_bucket_mb", first_bucket_mb)):
        if v is not None:
            check.number(name, v, low=0, strict=True, unit="MiB (or None for torch DDP's default)")
    cap = DDP_BUCKET_CAP_MB if bucket_cap_mb is None else float(bucket_cap_mb)
    if first_bucket_mb is not None:
        return float(first_bucket_mb), cap
    return (DDP_FIRST_BUCKET_MB if bucket_cap_mb is None else cap), cap


def make_buckets(param_bytes, bucket_cap_mb: float | None = None, first_bucket_mb: float | None = None,
                 order=None) -> list[list[int]]:
    """Group parameters (sizes in bytes, in forward order) into buckets as torch DDP does when it rebuilds
    them after the first iteration: in `order`, the order their gradients became ready (default: reverse
    forward order, what backward usually gives), closing a bucket once it holds at least its cap. The first
    bucket's cap is 1 MiB with the default bucket_cap_mb (25 MiB), else bucket_cap_mb like the others.
    -> lists of parameter indices, the first bucket (first to be all-reduced) first."""
    first, cap = bucket_caps(bucket_cap_mb, first_bucket_mb)
    param_bytes = check.numbers("param_bytes", param_bytes, low=0, unit="bytes", item="parameter")
    n = len(param_bytes)
    if order is None:
        order = list(reversed(range(n)))
    else:
        order = [check.integer(f"order[{k}]", i) for k, i in enumerate(check.listed("order", order, "parameter index"))]
    if sorted(order) != list(range(n)):
        raise ValueError(f"order must list every parameter index 0..{n - 1} once, got {order}")
    buckets, current, size, limit = [], [], 0.0, first * 2**20
    for i in order:
        current.append(i)
        size += param_bytes[i]
        if size >= limit:
            buckets.append(current)
            current, size, limit = [], 0.0, cap * 2**20
    if current:
        buckets.append(current)
    return buckets


def buckets_from_layers(param_bytes, backward_s, world_size: int, link, bucket_cap_mb: float | None = None,
                        first_bucket_mb: float | None = None, algorithm: str = "ring",
                        gamma: float = 0.0) -> tuple[list[float], list[float], list[float]]:
    """Layers in forward order (gradient bytes, backward seconds) -> per bucket, in order of readiness:
    (backward seconds that produce it, all-reduce seconds from the cost model, bytes). The buckets are
    DDP's from the second iteration on (its first iteration reduces everything as one bucket)."""
    param_bytes = check.numbers("param_bytes", param_bytes, low=0, unit="bytes", item="layer")
    backward_s = check.numbers("backward_s", backward_s, low=0, unit="seconds", item="layer")
    if len(param_bytes) != len(backward_s):
        raise ValueError(f"param_bytes and backward_s need one entry per layer, got {len(param_bytes)} and {len(backward_s)}")
    compute, comm, sizes = [], [], []
    for bucket in make_buckets(param_bytes, bucket_cap_mb, first_bucket_mb):
        nbytes = float(sum(param_bytes[i] for i in bucket))
        compute.append(float(sum(backward_s[i] for i in bucket)))
        comm.append(collective_time("all_reduce", nbytes, world_size, link, algorithm, gamma))
        sizes.append(nbytes)
    return compute, comm, sizes
