"""Training jobs on the emulated multi-node cluster: what the what-if's predictions are checked
against (benchmarks/whatif_accuracy.py, chapter 9).

    out = c.run(train, "traces/job", bandwidth=100e6, latency=5e-4)   # every rank -> {"step_s": [...], "path"}
    job_step(out)                                                     # the job's median step, seconds

By default (job "bucketed_ddp"; train() lists the others: torch DDP, FSDP2, a tensor-parallel MLP, a CNN with
BatchNorm) each rank trains an MLP with overlap.BucketedDDP; each bucket is averaged through commlib's ring on a background
thread (algorithms.background), so its all-reduce overlaps backward, through NICs paced by network.emulate.
The compute is an emulated accelerator: every layer runs its real (small) matmul, then `commlib::accelerator`,
an op that sleeps a set time (layer_s forward, twice that backward). Why: N ranks on a 2-core laptop would
slow each other's real compute as N grows, and a replay keeps compute as measured; an accelerator's kernels do
not slow down when more ranks share the host. The op is a cpu_op of its own name in the trace, so the replay
reads it as compute. The steps are timed without the profiler, and the job's step (job_step) goes into the trace
(recording.record's untraced_s: whatif calibrates its compute to it); `recorded` more steps are recorded.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from pathlib import Path

import torch

from commlib.profiling.jobs.committed import load_committed

STEPS, RECORDED = 6, 4   # steps timed, steps in the trace
ACCURACY = Path(__file__).resolve().parents[3] / "benchmarks" / "whatif_accuracy.json"
ACCURACY_KERNEL = ACCURACY.with_name("whatif_accuracy_kernel.json")   # --network kernel: six jobs


@torch.library.custom_op("commlib::accelerator", mutates_args=())
def accelerator(x: torch.Tensor, seconds: float) -> torch.Tensor:
    """An accelerator's kernel as the host sees it: x, after `seconds` of wall time that use no core."""
    time.sleep(seconds)
    return x.clone()


@accelerator.register_fake
def _(x, seconds):
    return torch.empty_like(x)


def _keep_seconds(ctx, inputs, output):
    ctx.seconds = inputs[1]


def _backward(ctx, grad):
    return accelerator(grad, 2 * ctx.seconds), None   # a layer's backward: about twice its forward's work


accelerator.register_autograd(_backward, setup_context=_keep_seconds)


class Layer(torch.nn.Module):
    def __init__(self, width: int, seconds: float):
        super().__init__()
        self.linear, self.seconds = torch.nn.Linear(width, width), seconds

    def forward(self, x):
        return accelerator(torch.relu(self.linear(x)), self.seconds)


class Reduce(torch.autograd.Function):
    """Megatron's g: the row-parallel layer's partial sums all-reduced forward (Gloo's own), identity backward."""

    @staticmethod
    def forward(ctx, x):
        import torch.distributed as dist

        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class Copy(torch.autograd.Function):
    """Megatron's f: identity forward, the input's gradient all-reduced backward."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class TensorParallelLayer(torch.nn.Module):
    """A Megatron-style MLP layer split over every rank: a column-parallel matmul (this rank's `shard` columns of
    the hidden layer), the accelerator, a row-parallel matmul, its partial sums all-reduced (Reduce); the input's
    gradient all-reduced backward (Copy). Weak scaling: each rank keeps its shard, so the layer grows with the
    ranks, and so do neither a rank's compute nor its all-reduces (batch x width activations)."""

    def __init__(self, width: int, shard: int, seconds: float):
        super().__init__()
        self.col = torch.nn.Linear(width, shard, bias=False)
        self.row = torch.nn.Linear(shard, width, bias=False)
        self.seconds = seconds

    def forward(self, x):
        return Reduce.apply(self.row(accelerator(torch.relu(self.col(Copy.apply(x))), self.seconds)))


class ConvLayer(torch.nn.Module):
    """A CNN layer: 3x3 convolution, BatchNorm (running statistics: buffers that DDP broadcasts from rank 0 before
    every forward), ReLU, then the accelerator."""

    def __init__(self, channels: int, seconds: float):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(channels)
        self.seconds = seconds

    def forward(self, x):
        return accelerator(torch.relu(self.bn(self.conv(x))), self.seconds)


JOBS = ("bucketed_ddp", "torch_ddp", "fsdp2", "tensor_parallel", "cnn_batchnorm")
TP_BATCH, CNN_BATCH, CNN_CHANNELS, CNN_SIDE = 64, 4, 48, 8   # 64 KiB activations; 83 KiB of gradient per conv


def train(folder: str, bandwidth: float, latency: float = 5e-4, gpus_per_node: int = 1, nics_per_node: int = 1,
          layers: int = 8, width: int = 256, batch: int = 32, layer_s: float = 2e-3, bucket_mb: float = 0.5,
          steps: int = STEPS, recorded: int = RECORDED, algorithm: str = "ring", job: str = "bucketed_ddp",
          pace: bool = True) -> dict:
    """Inside every rank: warm up (DDP's first step is one bucket, then it rebuilds them), time `steps` steps,
    record `recorded` more into folder/rank{rank}.json (one trace: a replay of it gives their sum; whatif's
    steps= divides). job "bucketed_ddp": overlap.BucketedDDP, commlib's `algorithm` on a background thread;
    "torch_ddp": torch's DistributedDataParallel, Gloo's own all-reduce; "fsdp2": torch's fully_shard per layer
    (all-gathers and reduce-scatters on Gloo; bucket_mb does not apply); "tensor_parallel": a Megatron-style MLP
    split over every rank (TensorParallelLayer: no data parallelism, 2 all-reduces of TP_BATCH x width floats per
    layer and step, latency-bound; bucket_mb does not apply); "cnn_batchnorm": torch DDP on a CNN of ConvLayers
    (BatchNorm: DDP broadcasts its buffers every forward). pace=False on a Cluster whose network
    is the kernel's (commlib.network): the NICs are shaped there, not by the pacer. recorded=0: the steps are only
    timed, and nothing is recorded (folder unused, path None).
    -> {"step_s": each timed step, "path": the trace, "recorded": recorded}."""
    from commlib.algorithms.background import Background, average_hook
    from commlib.network import emulate
    from commlib.overlap import BucketedDDP
    from commlib.profiling.jobs.recording import job_step_s, record

    if job not in JOBS:
        raise ValueError(f"job must be one of {JOBS}, got {job!r}")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    paced = emulate(gpus_per_node, bandwidth, latency, nics_per_node) if pace else contextlib.nullcontext()
    with paced, (Background(algorithm, gpus_per_node if algorithm == "hierarchical" else None)
                 if job == "bucketed_ddp" else contextlib.nullcontext()) as bg:
        if job == "tensor_parallel":
            model = torch.nn.Sequential(*[TensorParallelLayer(width, width, layer_s) for _ in range(layers)])
        elif job == "cnn_batchnorm":
            net = torch.nn.Sequential(*[ConvLayer(CNN_CHANNELS, layer_s) for _ in range(layers)])
            model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=bucket_mb)
        else:
            net = torch.nn.Sequential(*[Layer(width, layer_s) for _ in range(layers)])
        if job == "bucketed_ddp":
            model = BucketedDDP(net, bucket_cap_mb=bucket_mb)
            model.register_comm_hook(bg, average_hook)
        elif job == "torch_ddp":
            model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=bucket_mb)
        elif job == "fsdp2":  # each layer's parameters sharded, all-gathered for forward and backward, grads reduce-scattered
            from torch.distributed.fsdp import fully_shard

            for layer in net:
                fully_shard(layer)
            model = fully_shard(net)
        inputs = {"tensor_parallel": (TP_BATCH, width), "cnn_batchnorm": (CNN_BATCH, CNN_CHANNELS, CNN_SIDE, CNN_SIDE)}
        x = torch.randn(*inputs.get(job, (batch, width)))

        def step():
            for p in model.parameters():
                p.grad = None
            model(x).square().mean().backward()

        for _ in range(2):
            step()
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
        path = record(lambda: [_marked(step) for _ in range(recorded)], folder + "/rank{rank}.json", warmup=1,
                      untraced_s=job_step_s(times)) if recorded else None   # untraced_s: whatif keeps the profiler out
    return {"step_s": times, "path": path, "recorded": recorded}


def fit_nic(bandwidth: float, latency: float = 5e-4, sizes=(4 << 10, 64 << 10, 256 << 10, 1 << 20),
            repeats: int = 7, pace: bool = True, estimate: str = "median") -> tuple[float, float]:
    """Inside every rank, each rank a node of one GPU: the emulated NIC as commlib's ring sees it. Times
    ring_all_reduce under emulate(1, ...) at each size (the slowest rank's time, `estimate` over the repeats:
    "median", or "min", the run nothing disturbed) and fits t = 2(p-1) alpha + 2(p-1)/p n beta -> (alpha s per
    message, beta s per byte): alpha holds the wire's latency plus the software's cost per message, beta the
    paced wire plus copying and adding. (With several GPUs per node half the ring's hops would be loopback, not
    the NIC: not what this fits.)

    "min" is for the kernel network, where what disturbs a run only adds time (a 64 KiB packet that holds the
    shaper: kernel.gso_cap; a rank woken late). A median of 7 keeps some of it in the largest sizes, and the
    intercept of a line through 128 KiB-2 MiB moves with it: on 2 x 1 at 10 MB/s, 11 quiet calibrations gave
    alpha 0 to 4.2 ms (median 0); the minima of 6 of them, 0 to 0.24 ms (issue 49's closing note)."""
    import torch.distributed as dist

    from commlib import algorithms as alg
    from commlib import cost
    from commlib.network import emulate

    if estimate not in ("median", "min"):
        raise ValueError(f"estimate must be 'median' or 'min', got {estimate!r}")
    pick = statistics.median if estimate == "median" else min
    torch.set_num_threads(1)
    p = dist.get_world_size()
    times = []
    with emulate(1, bandwidth, latency) if pace else contextlib.nullcontext():
        for n in sizes:
            t = torch.ones(n // 4)
            runs = []
            for _ in range(repeats):
                dist.barrier()
                t0 = time.perf_counter()
                alg.ring_all_reduce(t)
                took = torch.tensor([time.perf_counter() - t0])
                dist.all_reduce(took, op=dist.ReduceOp.MAX)
                runs.append(float(took))
            times.append(pick(runs))
    a, b = cost.fit_alpha_beta(list(sizes), times)
    return a / (2 * (p - 1)), b / (2 * (p - 1) / p)


def small_calls(sizes=(4 << 10, 16 << 10, 64 << 10, 256 << 10), repeats: int = 40, gaps=(2e-3, 4e-3)) -> list:
    """Inside every rank: Gloo's all-reduce of each size, `repeats` times, each call after a sleep of one of `gaps`
    in turn (a layer's forward and backward on the emulated accelerator: ranks that have idled, as a job's do) ->
    per size the mean call, its slowest rank's time, seconds. On the kernel network it is what a small call costs
    there (benchmarks/small_messages.py measures it at several rates: network.links.small_calls): each of the
    ring's steps wakes a thread of each rank, and a rank that slept wakes late, most of all on a virtual machine,
    while HTB lets a packet through on credit after an idle link (kernel._burst), so a call can end under its
    bytes' time. Neither follows the alpha-beta model: on the course's 2-core VM a 64 KiB call took 2.3-2.7 ms
    on 40 MB/s NICs (its bytes: 1.7 ms), 3.1-3.8 ms on 10 GB/s ones."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    out = []
    for n in sizes:
        t = torch.ones(n // 4)
        dist.barrier()
        dist.all_reduce(t)
        times = []
        for i in range(repeats):
            time.sleep(gaps[i % len(gaps)])
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - t0)
        slowest = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        out.append(float(slowest.mean()))
    return out


def job_step(results: list[dict]) -> float:
    """The job's step: per step the slowest rank's time, then the median over steps (seconds)."""
    return statistics.median(max(steps) for steps in zip(*(r["step_s"] for r in results)))


def predict_and_run(small, large, folder: str, bandwidth: float = 100e6, latency: float = 5e-4,
                    steps: int = STEPS, recorded: int = RECORDED, gamma: float | None = None) -> dict:
    """The what-if checked against runs (issue 34's test): on `small`, a Cluster of 2 ranks (2 emulated nodes of
    one GPU each), fit the NIC as the ring sees it (fit_nic), record the job at `bandwidth`, predict it at 1/4
    and 4x that bandwidth and on twice the nodes (`large`, 4 ranks), then run each and measure.
    large=None predicts twice the nodes without running it (its measured_s and error None).
    -> {"fit": (alpha, beta), "report": whatif's report, "rows": [{name, predicted_s, measured_s, error}]}."""
    import dataclasses

    from commlib import bench, cost
    from commlib import topology as topo
    from commlib.profiling.replay import whatif as wi

    kw = {"latency": latency, "steps": steps, "recorded": recorded}
    alpha, beta = small.run(fit_nic, bandwidth, latency)[0]
    base = small.run(train, f"{folder}/measured", bandwidth=bandwidth, **kw)
    nic = cost.Link("emulated NIC (fitted alpha)", bandwidth, alpha, "network.emulate; alpha fitted by fit_nic")
    measured = topo.Topology(small.world_size, 1, nic, nic)
    at = lambda f: dataclasses.replace(measured, inter=dataclasses.replace(nic, bandwidth=bandwidth * f))  # noqa: E731
    scenarios = [wi.Scenario("1/4 bandwidth", topology=at(0.25)), wi.Scenario("4x bandwidth", topology=at(4.0)),
                 wi.Scenario("2x nodes", nodes=2 * small.world_size)]
    gamma = bench.measure_gamma() if gamma is None else gamma
    report = wi.whatif(f"{folder}/measured", scenarios, measured=measured, gamma=gamma, steps=recorded)
    runs = {"measured": job_step(base),
            "1/4 bandwidth": job_step(small.run(train, f"{folder}/slow", bandwidth=bandwidth / 4, **kw)),
            "4x bandwidth": job_step(small.run(train, f"{folder}/fast", bandwidth=bandwidth * 4, **kw)),
            "2x nodes": job_step(large.run(train, f"{folder}/nodes", bandwidth=bandwidth, **kw)) if large else None}
    rows = [{"name": s["name"], "predicted_s": s["step_us"] * 1e-6, "measured_s": runs[s["name"]],
             "error": s["step_us"] * 1e-6 / runs[s["name"]] - 1 if runs[s["name"]] else None}
            for s in report["scenarios"] if s["name"] in runs]
    return {"fit": (alpha, beta), "gamma": gamma, "report": report, "rows": rows}


def run_scenarios(cluster, report: dict, scenarios: dict, **kw) -> dict:
    """Chapter 9's check of whatif's `report` against runs: the job as recorded (train(**kw)) re-run before and
    after the scenarios, each scenario (name -> train's keyword arguments that change, over kw) run between them,
    each run timed and not recorded.
    A busier host only slows a run, so the faster of the two re-runs is the base each scenario's measured change is
    taken from; the predicted change is from the replay's own step (the report's first row). One re-run instead of
    the two read a single busy second on a shared host as the job's step (CI: nbval on 3 workers, 2 cores).
    -> {"base_s": (before, after), "rows": [{name, predicted_s, measured_s, change_predicted, change_measured}]}."""
    def run(**knobs) -> float:
        return job_step(cluster.run(train, "", **{**kw, **knobs, "recorded": 0}))

    steps = {s["name"]: s["step_us"] * 1e-6 for s in report["scenarios"]}
    missing = sorted(set(scenarios) - set(steps))
    if missing:
        raise ValueError(f"scenarios must be named as in the report ({sorted(steps)}), got {missing}")
    before = run()
    measured = {name: run(**knobs) for name, knobs in scenarios.items()}
    after = run()
    traced, base = report["scenarios"][0]["step_us"] * 1e-6, min(before, after)
    rows = [{"name": name, "predicted_s": steps[name], "measured_s": measured[name],
             "change_predicted": steps[name] / traced, "change_measured": measured[name] / base}
            for name in scenarios]
    return {"base_s": (before, after), "rows": rows}


def load_accuracy(path=ACCURACY) -> dict:
    """The committed run of benchmarks/whatif_accuracy.py (--json): its rows, the machine, the median error."""
    return load_committed(path, "benchmarks/whatif_accuracy.py")


def median_error(result: dict) -> float:
    """The median |error| over the what-ifs that were run (the measured row left out)."""
    return statistics.median(abs(r["error"]) for r in result["rows"] if r["name"] != "measured" and r["error"] is not None)


def _marked(step) -> None:
    """One training step, marked commlib:step in the trace: the recorded steps share one ProfilerStep, and whatif
    splits the trace at these marks (profiling/read/steps.py)."""
    with torch.profiler.record_function("commlib:step"):
        step()
