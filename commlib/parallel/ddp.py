"""BucketedDDP: data parallelism with bucketed gradient all-reduce overlapped with backward, inside a rank.

Its buckets are torch DDP's (commlib.cost.timeline.make_buckets), and its `timeline` is the model's Timeline
measured: host clock readings on CPU (Gloo), CUDA events on GPUs (NCCL). The model alone, without ranks,
is commlib.cost.timeline.simulate.
"""

from __future__ import annotations

import time

from commlib.cost.timeline import Span, Timeline, bucket_caps, make_buckets


class BucketedDDP:
    """Data parallelism with bucketed, overlapped gradient all-reduce, for use inside a rank.

        model = BucketedDDP(module, bucket_cap_mb=None, overlap=True)   # None: DDP's default, 25 MiB
        loss = loss_fn(model(x), y); loss.backward(); optimizer.step()   # grads averaged over ranks

    As torch DDP does (torch 2.13, torch/nn/parallel/distributed.py and reducer.cpp): parameters are
    broadcast from rank 0 at construction; the first iteration reduces all gradients as one bucket,
    recording the order in which they become ready; at the start of the second forward the buckets are
    rebuilt in that order (make_buckets: the first bucket 1 MiB with the default cap, bucket_cap_mb
    otherwise, then bucket_cap_mb). A hook on each parameter copies its gradient, times 1/p, into its
    bucket; a full bucket is all-reduced asynchronously (in bucket order) while backward goes on; the end
    of backward waits for all of them and writes the averages back to .grad. overlap=False starts the
    all-reduces only after backward. `timeline` holds the last step's real intervals (an
    overlap.Timeline, seconds from the end of forward). The bucket buffers are allocated once per bucket
    layout: overlap adds no memory. register_comm_hook(state, hook) runs a torch DDP communication hook
    in place of each all-reduce.

    On CPU (Gloo) the intervals are host clock readings. With CUDA parameters (NCCL) the host only
    queues work, so its clock says nothing about when kernels ran: the intervals are CUDA events
    instead, recorded on the compute stream (gradients ready) and on a communication stream that
    waits for each bucket before its all-reduce (start, done). Reading `timeline` then waits for the
    GPU to finish the step; training itself never waits for it.
    """

    def __init__(self, module, bucket_cap_mb: float | None = None, overlap: bool = True,
                 first_bucket_mb: float | None = None):
        import torch
        import torch.distributed as dist

        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        if not dist.is_initialized():
            raise RuntimeError("BucketedDDP runs inside a rank: initialise torch.distributed first (a Cluster does)")
        self.caps = bucket_caps(bucket_cap_mb, first_bucket_mb)
        self.module, self.overlap = module, bool(overlap)
        self.world_size = dist.get_world_size()
        self.params = [p for p in module.parameters() if p.requires_grad]
        with torch.no_grad():  # start from rank 0's weights, as torch DDP does
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t, src=0)
        self._sizes = [p.numel() * p.element_size() for p in self.params]
        self._ready_order: list[int] = []   # gradient-ready order of the first backward
        self._recorded = self.rebuilt = False
        self._layout([list(reversed(range(len(self.params))))] if self.params else [])
        self._hooks = [p.register_post_accumulate_grad_hook(self._make_hook(i)) for i, p in enumerate(self.params)]
        device = self.params[0].device if self.params else torch.device("cpu")
        self._clock = _CudaClock(device) if device.type == "cuda" else _HostClock()
        self._last = None  # the marks of the last finished backward; `timeline` turns them into seconds
        self._comm_hook = None  # (state, hook) from register_comm_hook
        self._timeline = Timeline()
        self._reset()

    def _layout(self, buckets: list[list[int]]) -> None:
        """Use these buckets (lists of parameter indices, in all-reduce order): one flat buffer each."""
        import torch

        self.buckets = buckets
        self.bucket_bytes = [float(sum(self._sizes[i] for i in b)) for b in buckets]
        self._where = {}  # param index -> (bucket, offset)
        self._buffers = []
        for b, members in enumerate(buckets):
            offset = 0
            for i in members:
                self._where[i] = (b, offset)
                offset += self.params[i].numel()
            first = self.params[members[0]]
            self._buffers.append(torch.empty(offset, dtype=first.dtype, device=first.device))

    def __call__(self, *args, **kwargs):
        if self._recorded and not self.rebuilt:  # DDP rebuilds its buckets at the start of the second forward
            first, cap = self.caps
            self._layout(make_buckets(self._sizes, cap, first, order=self._ready_order))
            self.rebuilt = True
        out = self.module(*args, **kwargs)
        self._reset()
        return out

    def parameters(self):
        return self.module.parameters()

    def register_comm_hook(self, state, hook) -> None:
        """As torch DDP's: hook(state, bucket) -> Future of the bucket's average replaces its all-reduce. The
        bucket (a compression.Bucket: GradBucket's methods) holds this rank's gradients, not divided by p."""
        if not callable(hook):
            raise TypeError(f"hook must be callable, got {type(hook).__name__}")
        if self._comm_hook is not None:
            raise RuntimeError("register_comm_hook can only be called once")
        self._comm_hook = (state, hook)

    @property
    def timeline(self) -> Timeline:
        if self._last is not None:  # computed on first read (with CUDA this waits for the step's events)
            self._timeline, self._last = self._clock.timeline(*self._last), None
        return self._timeline

    def _reset(self) -> None:
        self._t0 = self._clock.mark()
        self._pending = [len(b) for b in self.buckets]
        self._ready_at = [None] * len(self.buckets)
        self._works, self._launched_at, self._done_at = [], [None] * len(self.buckets), [None] * len(self.buckets)
        self._next = 0
        self._queued = False
        self._got_grad: set[int] = set()

    def _make_hook(self, i: int):
        def hook(param):
            import torch

            if not self._queued:  # once per backward: wait for the all-reduces when backward ends
                torch.autograd.Variable._execution_engine.queue_callback(self._finish)
                self._queued = True
            self._got_grad.add(i)
            if not self._recorded:
                self._ready_order.append(i)
            b, off = self._where[i]
            view = self._buffers[b][off:off + param.numel()]
            torch.mul(param.grad.reshape(-1), 1.0 if self._comm_hook else 1.0 / self.world_size, out=view)
            self._pending[b] -= 1
            if self._pending[b] == 0:
                self._ready_at[b] = self._clock.mark()
                if self.overlap:
                    self._launch_ready()
        return hook

    def _launch(self, b: int) -> None:
        self._works.append(self._clock.all_reduce(lambda: self._all_reduce(b), b, self._launched_at, self._done_at))

    def _all_reduce(self, b: int):
        """Start averaging bucket b -> its Work (the comm hook's Future, wrapped as one, when there is a hook)."""
        import torch.distributed as dist

        buffer = self._buffers[b]
        if self._comm_hook is None:
            return dist.all_reduce(buffer, async_op=True)
        from commlib.compression import Bucket

        def into_buffer(fut):  # a hook may return a new tensor; DDP copies it into the bucket
            if fut.value() is not buffer:
                buffer.copy_(fut.value())
            return buffer

        state, hook = self._comm_hook
        bucket = Bucket(b, buffer, [self.params[i] for i in self.buckets[b]], last=b == len(self.buckets) - 1)
        fut = hook(state, bucket)
        return _FutureWork(fut.then(into_buffer), getattr(fut, "seq", None))

    def _launch_ready(self) -> None:
        while self._next < len(self.buckets) and self._pending[self._next] == 0:  # strictly in bucket order
            self._launch(self._next)
            self._next += 1

    def _finish(self) -> None:
        if any(self._pending):
            missing = [i for i in range(len(self.params)) if i not in self._got_grad]
            raise RuntimeError(f"parameters {missing[:10]} (indices in module.parameters()) got no gradient in "
                               "this backward; BucketedDDP needs every parameter to be used in every step")
        if not self.overlap:
            for b in range(len(self.buckets)):
                self._launch(b)
        end = self._clock.wait_all(self._works)
        for b, members in enumerate(self.buckets):
            for i in members:
                _, off = self._where[i]
                p = self.params[i]
                p.grad.copy_(self._buffers[b][off:off + p.numel()].view_as(p.grad))
        self._last = (self._t0, self._ready_at, self._launched_at, self._done_at, end)
        self._recorded = True  # the first backward's ready order is complete


class _FutureWork:
    """A comm hook's Future used as the Work of an async all-reduce. seq: the issue index of commlib's background
    work behind it (algorithms.background), whose wait a trace then records (commlib:wait seq=..)."""

    def __init__(self, fut, seq=None):
        self._fut, self._seq = fut, seq

    def get_future(self):
        return self._fut

    def wait(self) -> bool:
        if self._seq is None:
            self._fut.wait()
            return True
        import torch

        with torch.profiler.record_function(f"commlib:wait seq={self._seq}"):
            self._fut.wait()
        return True


class _HostClock:
    """CPU tensors: host clock readings. Gloo runs each all-reduce on its own thread, so the moment
    the future completes is when the all-reduce is done."""

    def mark(self) -> float:
        return time.perf_counter()

    def all_reduce(self, start, b: int, launched_at: list, done_at: list):
        launched_at[b] = time.perf_counter()
        work = start()
        work.get_future().then(lambda _f: done_at.__setitem__(b, time.perf_counter()))
        return work

    def wait_all(self, works) -> float:
        for work in works:
            work.wait()
        return time.perf_counter()

    @staticmethod
    def timeline(t0, ready_at, launched_at, done_at, end) -> Timeline:
        events, prev, stream = [], 0.0, 0.0
        for b in range(len(ready_at)):
            ready = ready_at[b] - t0
            events.append(Span("compute", b, prev, ready))
            prev = ready
            # one stream: an all-reduce launched while the previous one runs starts when that one is done
            start = max(launched_at[b] - t0, stream)
            stream = max(start, (done_at[b] or end) - t0)  # a future's callback may still be on its way
            events.append(Span("comm", b, start, stream))
        return Timeline(events)


class _CudaClock:
    """CUDA tensors: CUDA events. The all-reduces are issued from a communication stream that first
    waits for the compute stream (so the bucket's gradients are in it); NCCL's own stream waits for
    that one, and `work.wait()` there makes the communication stream wait for NCCL. Events on it
    before and after therefore bracket the all-reduce as the GPU ran it, in bucket order."""

    def __init__(self, device):
        import torch

        self.device = device
        self.stream = torch.cuda.Stream(device=device)

    def mark(self, stream=None):
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record(stream if stream is not None else torch.cuda.current_stream(self.device))
        return event

    def all_reduce(self, start, b: int, launched_at: list, done_at: list):
        import torch

        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            launched_at[b] = self.mark(self.stream)
            work = start()
            work.wait()  # non-blocking for the host: this stream waits for NCCL's
            done_at[b] = self.mark(self.stream)
        return work

    def wait_all(self, works):
        """The works were already waited for on the communication stream: the compute stream waits for it."""
        import torch

        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        return None

    @staticmethod
    def timeline(t0, ready_at, launched_at, done_at, end) -> Timeline:
        for event in [t0, *ready_at, *launched_at, *done_at]:
            event.synchronize()  # the host waits for the GPU to get there
        since = lambda event: t0.elapsed_time(event) / 1e3  # noqa: E731  (ms -> s)
        events, prev = [], 0.0
        for b in range(len(ready_at)):
            ready = since(ready_at[b])
            events.append(Span("compute", b, prev, ready))
            prev = ready
            events.append(Span("comm", b, since(launched_at[b]), since(done_at[b])))
        return Timeline(events)
