"""commlib's CUDA-only branches, run on CPU with a fake CUDA (tests/fake_cuda.py, issue 35).

No test machine has a GPU, so without this the lines below would first run on a lent GPU (where
`torch.cuda.Span`, a renamed call, failed BucketedDDP at its first bucket). With the fake, torch.cuda
answers from the host clock, "cuda" tensors are CPU tensors underneath and NCCL is Gloo underneath; the
ranks of the Cluster get the fake at start-up (tests/fake_cuda_site/sitecustomize.py through PYTHONPATH
and COMMLIB_FAKE_CUDA). The branches, each held entered by the fake's call counter (BRANCHES below):

- cluster/options.py resolve_backend: backend="auto" picks NCCL when there is one GPU per rank
- cluster/worker.py rank_main: torch.cuda.set_device(rank), init_process_group("cpu:gloo,cuda:nccl", device_id)
  and, after the task, CUDA results handed back as CPU tensors (_results_to_cpu)
- cluster/torchrun.py init_from_env: the same for torchrun's processes
- cluster/envinfo.py report: GPU count and names; cluster/demos.py hello: its tensor on the GPU
- parallel/ddp.py _CudaClock: BucketedDDP's communication stream and CUDA events, in a real training step
- profiling/jobs/live.py profile and time_async, profiling/jobs/recording.py record: CUDA activity and synchronisation
- compression/comm.py HookComm._clock: collectives bracketed by torch.cuda.synchronize
- algorithms/p2p.py _grouped: CUDA tensors send in grouped point-to-point (batch_isend_irecv)
- bench/sweeps.py sweep and _sync: buffers on the current GPU, synchronised around each timed call
- parallel/zero.py torch_fsdp2: a CUDA device mesh for CUDA parameters

Each check also holds values: the CUDA path's results equal the CPU path's (or torch's built-in). This module
is CI's one run of these branches on the fake: tools/gpu_check.sh's dry run only collects tests/test_gpu.py,
whose tests reach the same branches (they run on a lent GPU).
"""

import os
import re
import sys
from pathlib import Path

import cloudpickle
import pytest
import torch
import torch.distributed as dist

import commlib as cl
from tests import fake_cuda

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SITE = str(Path(__file__).resolve().parent / "fake_cuda_site")
GPUS = 2

# (file, function, what the fake saw there): one entry per CUDA-only branch of the docstring
BRANCHES = {
    ("commlib/cluster/options.py", "resolve_backend", "cuda.device_count"),
    ("commlib/cluster/worker.py", "rank_main", "cuda.set_device"),
    ("commlib/cluster/worker.py", "rank_main", "dist.init_process_group"),
    ("commlib/cluster/worker.py", "_results_to_cpu.<locals>.<lambda>", "Tensor.cpu"),
    ("commlib/cluster/torchrun.py", "init_from_env", "cuda.set_device"),
    ("commlib/cluster/torchrun.py", "init_from_env", "dist.init_process_group"),
    ("commlib/cluster/envinfo.py", "report", "cuda.get_device_name"),
    ("commlib/cluster/demos.py", "hello", "device='cuda'"),
    ("commlib/parallel/ddp.py", "BucketedDDP.__init__", "Tensor.device"),
    ("commlib/parallel/ddp.py", "_CudaClock.__init__", "cuda.Stream"),
    ("commlib/parallel/ddp.py", "_CudaClock.mark", "cuda.Event"),
    ("commlib/parallel/ddp.py", "_CudaClock.mark", "Event.record"),
    ("commlib/parallel/ddp.py", "_CudaClock.all_reduce", "Stream.wait_stream"),
    ("commlib/parallel/ddp.py", "_CudaClock.all_reduce", "cuda.stream"),
    ("commlib/parallel/ddp.py", "_CudaClock.wait_all", "Stream.wait_stream"),
    ("commlib/parallel/ddp.py", "_CudaClock.timeline", "Event.synchronize"),
    ("commlib/parallel/ddp.py", "_CudaClock.timeline.<locals>.<lambda>", "Event.elapsed_time"),
    ("commlib/profiling/jobs/live.py", "profile", "cuda.is_initialized"),
    ("commlib/profiling/jobs/live.py", "profile", "cuda.synchronize"),
    ("commlib/profiling/jobs/live.py", "profile", "profiler CUDA"),
    ("commlib/profiling/jobs/recording.py", "record", "profiler CUDA"),
    ("commlib/profiling/jobs/live.py", "time_async", "cuda.synchronize"),
    ("commlib/profiling/jobs/recording.py", "record", "cuda.synchronize"),
    ("commlib/compression/comm.py", "HookComm._clock", "cuda.synchronize"),
    ("commlib/algorithms/p2p.py", "_grouped", "Tensor.is_cuda"),
    ("commlib/bench/sweeps.py", "sweep", "cuda.current_device"),
    ("commlib/bench/sweeps.py", "_sync", "cuda.synchronize"),
    ("commlib/parallel/zero.py", "torch_fsdp2", "Tensor.is_cuda"),
}


@pytest.fixture(scope="module")
def fake():
    """The fake in this process (for the parent-side branches) and in the ranks of every Cluster started here."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMMLIB_FAKE_CUDA", str(GPUS))
        mp.setenv("PYTHONPATH", os.pathsep.join([SITE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                           if p]))
        with fake_cuda.installed(gpus=GPUS):
            fake_cuda.reset()
            yield fake_cuda


@pytest.fixture(scope="module")
def seen(fake):
    """Every (file, function, what) the fake saw, in this process and in the ranks; filled by the tests."""
    return set()


@pytest.fixture(scope="module")
def gpu_cluster(fake, seen):
    with cl.Cluster(world_size=GPUS, backend="auto", timeout=120) as c:
        yield c
        for calls in c.run(fake_cuda.calls):
            seen.update(calls)


def model(device, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 32, device=device), torch.nn.ReLU(),
                               torch.nn.Linear(32, 32, device=device), torch.nn.ReLU(),
                               torch.nn.Linear(32, 4, device=device))


def bucketed_ddp_cuda_vs_cpu():
    """Two steps of BucketedDDP on "cuda" (the CUDA clock) and on CPU (the host clock): the same gradients."""
    from commlib import overlap

    out = {}
    for device in ("cuda", "cpu"):
        ddp = overlap.BucketedDDP(model(device), bucket_cap_mb=0.002, first_bucket_mb=0.001)
        torch.manual_seed(10 + dist.get_rank())
        x = torch.randn(16, 8, device=device)
        for _ in range(2):
            ddp.module.zero_grad()
            ddp(x).square().mean().backward()
        out[device] = (type(ddp._clock).__name__, ddp.params[0].device.type, len(ddp.buckets),
                       ddp.timeline, [p.grad.cpu() for p in ddp.params])
    return out


def rank_side_branches():
    """Every other rank-side CUDA branch once, each with a value to check."""
    from commlib import algorithms as alg
    from commlib import bench, profiling
    from commlib.cluster import demos
    from commlib.compression.comm import HookComm
    from commlib.profiling import traces

    r = dist.get_rank()
    x = torch.arange(10, dtype=torch.float32, device="cuda") + r
    want = x.clone()
    dist.all_reduce(want)
    ring = alg.ring_all_reduce(x.clone())
    hook = HookComm("builtin")
    hooked = hook.all_reduce(x.clone())
    step = lambda: dist.all_reduce(torch.ones(256, device="cuda"))  # noqa: E731
    rows = bench.sweep("all_reduce", "builtin", min_bytes=1024, max_bytes=4096, factor=4, iters=2, warmup=0)
    trace = traces.record(step, os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fake-cuda-{os.getpid()}-{{rank}}.json"))
    os.remove(trace)
    return {"hello": demos.hello(), "ring_equal": torch.equal(ring, want), "hook_equal": torch.equal(hooked, want),
            "hook_calls": hook.calls, "bench_wrong": [row["wrong"] for row in rows],
            "profile_wall_s": profiling.profile(step, warmup=0)["wall_s"],
            "time_async_s": profiling.time_async(4096, wait=True, repeats=2, device="cuda"),
            "tensor_back": want, "device": torch.cuda.current_device()}


def fsdp2_forward():
    """torch_fsdp2 on "cuda" parameters: a CUDA device mesh, and the sharded forward equals the whole model's.
    (Only the forward: FSDP2's backward needs torch's own CUDA streams and kernels, beyond the fake.)"""
    from commlib.parallel import zero

    whole = model("cuda")
    torch.manual_seed(5)
    x = torch.randn(4, 8, device="cuda")
    want = whole(x)
    sharded = zero.torch_fsdp2(model("cuda"))
    weight = next(sharded.parameters())
    return weight.device_mesh.device_type, tuple(weight.to_local().shape), torch.allclose(sharded(x), want)


def test_the_fake_times_the_host_clock_and_refuses_what_a_gpu_refuses(fake):
    import time

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(torch.cuda.current_stream())
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.002:  # 2 ms of host time between the two records (no sleep: a busy wait)
        pass
    end.record()
    assert 2.0 <= start.elapsed_time(end) < 2000
    x = torch.ones(3, device="cuda")
    assert x.is_cuda and (x * 2).device == torch.device("cuda", 0) and not x.cpu().is_cuda
    assert torch.equal(x + torch.tensor(1.0), torch.full((3,), 2.0, device="cuda"))  # a CPU scalar is fine
    with pytest.raises(RuntimeError, match="same device"):
        x + torch.ones(3)
    with pytest.raises(RuntimeError, match="Both events must be recorded"):
        torch.cuda.Event(enable_timing=True).elapsed_time(end)
    with pytest.raises(AttributeError):
        torch.cuda.Span  # noqa: B018  (torch has no such name, and neither has the fake)


def test_auto_picks_nccl_with_a_gpu_per_rank_and_gloo_without(fake, seen):
    from commlib.cluster import core, envinfo

    assert core.resolve_backend("auto", GPUS) == "nccl" and core.resolve_backend("auto", GPUS + 1) == "gloo"
    info = envinfo.report()
    assert info["GPUs"] == GPUS and len(info["GPU names"]) == GPUS and info["nccl available"]
    seen.update(fake.calls())


def test_bucketed_ddp_on_cuda_has_the_cpu_gradients_and_a_timeline_from_cuda_events(gpu_cluster):
    assert gpu_cluster.backend == "nccl"
    for out in gpu_cluster.run(bucketed_ddp_cuda_vs_cpu):
        clock, device, n_buckets, tl, grads = out["cuda"]
        assert (clock, device) == ("_CudaClock", "cuda") and out["cpu"][:2] == ("_HostClock", "cpu")
        assert n_buckets == out["cpu"][2] >= 2, "several buckets, so that several all-reduces are bracketed"
        assert all(torch.equal(a, b) for a, b in zip(grads, out["cpu"][4]))
        assert [(e.kind, e.bucket) for e in tl.events] == [(k, b) for b in range(n_buckets) for k in ("compute", "comm")]
        assert all(0 <= e.start <= e.end for e in tl.events) and tl.total_s > 0


def test_profiling_bench_hooks_and_point_to_point_take_their_cuda_branches(gpu_cluster):
    p = gpu_cluster.world_size
    for rank, out in enumerate(gpu_cluster.run(rank_side_branches)):
        assert out["hello"]["all_reduce_sum"] == out["hello"]["expected"] == p * (p + 1) / 2
        assert "nccl" in out["hello"]["backend"] and out["device"] == rank, "one GPU per rank, rank r on GPU r"
        assert out["ring_equal"] and out["hook_equal"] and out["hook_calls"] == 1
        assert out["bench_wrong"] == [0, 0]
        assert out["profile_wall_s"] > 0 and out["time_async_s"] > 0
        assert type(out["tensor_back"]) is torch.Tensor, "the cluster hands CUDA results back as plain CPU tensors"
        assert torch.equal(out["tensor_back"], torch.arange(10.0) * p + sum(range(p)))


def test_fsdp2_of_cuda_parameters_shards_on_a_cuda_mesh(gpu_cluster):
    for mesh, shard, same in gpu_cluster.run(fsdp2_forward):
        assert mesh == "cuda" and shard == (32 // GPUS, 8) and same


def test_torchrun_entry_sets_the_device_and_initialises_nccl(fake, seen, monkeypatch):
    from commlib.cluster.torchrun import init_from_env
    from conftest import free_port

    threads = torch.get_num_threads()
    for name, value in [("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "1"), ("MASTER_ADDR", "127.0.0.1"),
                        ("MASTER_PORT", str(free_port())), ("GLOO_SOCKET_IFNAME", "")]:
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    try:
        assert init_from_env(backend="auto", timeout=30) == (0, 1)
        assert "nccl" in str(dist.get_backend()) and torch.cuda.current_device() == 1
    finally:
        dist.destroy_process_group()
        torch.set_num_threads(threads)
    seen.update(fake.calls())


def test_commlib_never_imports_the_fake():
    package = Path(__file__).resolve().parents[1] / "commlib"
    assert [f.name for f in package.rglob("*.py")
            if re.search(r"fake_cuda|^\s*(from|import) tests\b", f.read_text(), re.MULTILINE)] == []


def test_every_listed_cuda_branch_was_entered(gpu_cluster, seen):
    for calls in gpu_cluster.run(fake_cuda.calls):
        seen.update(calls)
    assert BRANCHES - seen == set(), "these CUDA-only lines did not run with the fake"
