"""The NCCL path, on a machine with GPUs. Every test here skips, with its reason, where there are none.

NCCL puts one rank on one GPU (two ranks on one GPU is an error), so world_size 1 needs one GPU and
world_size 2 needs two. A single rank still runs the real thing: the "cpu:gloo,cuda:nccl" group,
NCCL kernels, CUDA streams and events, results handed back as CPU tensors.
"""

import json
import subprocess
import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

import commlib as cl
from commlib import algorithms as alg
from commlib import bench, overlap, profiling
from commlib.profiling import diagnosis as diagnose
from commlib.profiling import traces
from commlib.cluster import demos

cloudpickle.register_pickle_by_value(sys.modules[__name__])

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
NCCL = dist.is_nccl_available()


def world_sizes(*sizes):
    return [pytest.param(p, id=f"p{p}", marks=pytest.mark.skipif(
        GPUS < p or not NCCL, reason=f"needs {p} GPU(s) and NCCL; this machine has {GPUS} GPU(s), "
                                     f"NCCL {'available' if NCCL else 'not built in'}")) for p in sizes]


@pytest.fixture(scope="module", params=world_sizes(1, 2))
def gpu_cluster(request):
    with cl.Cluster(world_size=request.param, backend="auto", timeout=180) as c:
        yield c


def both_backends():
    gpu = torch.ones(4, device="cuda") * (dist.get_rank() + 1)
    cpu = torch.ones(4) * (dist.get_rank() + 1)
    dist.all_reduce(gpu)
    dist.all_reduce(cpu)
    return gpu, cpu, torch.cuda.current_device(), str(dist.get_backend())


def test_auto_picks_nccl_and_cpu_tensors_still_work(gpu_cluster):
    p = gpu_cluster.world_size
    assert gpu_cluster.backend == "nccl"
    want = torch.full((4,), p * (p + 1) / 2)
    for rank, (gpu, cpu, device, backend) in enumerate(gpu_cluster.run(both_backends)):
        assert gpu.device.type == "cpu", "the cluster hands CUDA results back as CPU tensors"
        assert torch.equal(gpu, want) and torch.equal(cpu, want)
        assert device == rank and "nccl" in backend and "gloo" in backend


def test_hello_demo_reduces_on_the_gpu(gpu_cluster):
    p = gpu_cluster.world_size
    for out in gpu_cluster.run(demos.hello):
        assert out["all_reduce_sum"] == out["expected"] == p * (p + 1) / 2


def algorithms_on_cuda():
    """Every commlib algorithm on CUDA tensors (grouped NCCL point-to-point) against NCCL's built-in."""
    p, r = dist.get_world_size(), dist.get_rank()
    failures = []
    for numel in (1, 1003, (5 << 20) // 4 + 3):  # the last one: several 2 MiB segments per ring chunk
        for dtype in (torch.float32, torch.float16, torch.int64):
            g = torch.Generator().manual_seed(r * 7 + numel)
            x = torch.randint(-8, 8, (numel,), generator=g).to(dtype).cuda()  # small ints: every order exact
            want = x.clone()
            dist.all_reduce(want)
            for name, fn in [("ring", alg.ring_all_reduce), ("naive", alg.naive_all_reduce),
                             ("tree", alg.tree_all_reduce), ("recursive_doubling", alg.recursive_doubling_all_reduce),
                             ("rabenseifner", alg.rabenseifner_all_reduce)]:
                t = x.clone()
                fn(t)
                if not (t.is_cuda and torch.equal(t, want)):
                    failures.append(f"{name} {dtype} numel={numel}")
            shard = alg.ring_reduce_scatter(x)
            lo = sum(alg.shard_sizes(numel, p)[:r])
            if not torch.equal(shard, want[lo:lo + shard.numel()]):
                failures.append(f"ring_reduce_scatter {dtype} numel={numel}")
            if not torch.equal(alg.ring_all_gather(shard), want):
                failures.append(f"ring_all_gather {dtype} numel={numel}")
            b = x.clone() if r == 0 else torch.zeros_like(x)
            alg.tree_broadcast(b, src=0)
            ref = x.clone()
            dist.broadcast(ref, src=0)
            if not torch.equal(b, ref):
                failures.append(f"tree_broadcast {dtype} numel={numel}")
    torch.cuda.synchronize()
    return failures


def test_algorithms_on_cuda_tensors_match_nccl(gpu_cluster):
    for rank, failures in enumerate(gpu_cluster.run(algorithms_on_cuda)):
        assert failures == [], f"rank {rank}: {failures}"


def sweep_everything():
    out = {}
    for op, algorithm in bench.IMPLEMENTATIONS:
        rows = bench.sweep(op, algorithm, min_bytes=1024, max_bytes=4 << 20, factor=64, iters=3, warmup=1)
        out[op, algorithm] = [(r["nbytes"], r["wrong"], r["time_s"], r["busbw_GBps"]) for r in rows]
    return out


def test_bench_sweeps_every_implementation_on_cuda(gpu_cluster):
    rows = gpu_cluster.run(sweep_everything)[0]
    assert set(rows) == set(bench.IMPLEMENTATIONS)
    for key, got in rows.items():
        assert [n for n, *_ in got] == [1024, 65536, 4 << 20], key
        assert all(wrong == 0 and t > 0 and bw >= 0 for _, wrong, t, bw in got), (key, got)


@pytest.mark.parametrize("p", world_sizes(1, 2))
def test_bench_command_line_uses_nccl(p):
    out = subprocess.run([sys.executable, "-m", "commlib", "bench", "--world-size", str(p), "--backend", "nccl",
                          "--max-bytes", "1M", "--iters", "5", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert rows and all(r["wrong"] == 0 for r in rows)


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                               torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()


def bucketed_ddp_on_cuda(use_overlap):
    r = dist.get_rank()
    torch.manual_seed(100 + r)
    x, y = torch.randn(256, 64, device="cuda"), torch.randint(0, 10, (256,), device="cuda")
    ours = overlap.BucketedDDP(make_model(), bucket_cap_mb=0.5, first_bucket_mb=0.01, overlap=use_overlap)
    theirs = torch.nn.parallel.DistributedDataParallel(make_model(), device_ids=[r], bucket_cap_mb=0.5)
    for model in (ours, theirs):
        for _ in range(2):
            model.module.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
    same = all(torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6) for a, b in zip(ours.parameters(), theirs.parameters()))
    tl = ours.timeline  # reading it waits for the step's CUDA events
    return same, len(ours.buckets), [(e.kind, e.bucket, e.start, e.end) for e in tl.events], ours.params[0].grad


@pytest.mark.parametrize("use_overlap", [True, False], ids=["overlap", "no-overlap"])
def test_bucketed_ddp_on_cuda_matches_torch_ddp_and_times_the_gpu(gpu_cluster, use_overlap):
    results = gpu_cluster.run(bucketed_ddp_on_cuda, use_overlap)
    for rank, (same, n_buckets, events, _) in enumerate(results):
        assert same, f"rank {rank}: gradients differ from torch DDP's"
        assert n_buckets >= 3 and len(events) == 2 * n_buckets
        compute = {b: (s, e) for kind, b, s, e in events if kind == "compute"}
        comm = {b: (s, e) for kind, b, s, e in events if kind == "comm"}
        backward_end = max(e for _, e in compute.values())
        for b in range(n_buckets):
            assert 0 <= compute[b][0] <= compute[b][1] and comm[b][0] <= comm[b][1]
            assert comm[b][0] >= compute[b][1] - 1e-6, "an all-reduce started before its bucket was ready"
            if b:
                assert comm[b][0] >= comm[b - 1][1] - 1e-6, "all-reduces overlap each other on one stream"
        if not use_overlap:
            assert min(s for s, _ in comm.values()) >= backward_end - 1e-6
    for rank in range(1, len(results)):
        assert torch.equal(results[rank][3], results[0][3]), "ranks ended with different averaged gradients"


def profiled_cuda_step():
    a = torch.randn(2048, 2048, device="cuda")
    g = torch.randn(8 << 20, device="cuda")

    def step():
        (a @ a).sum()
        dist.all_reduce(g)

    return profiling.profile(step)


def test_profiler_reads_the_gpu_timeline(gpu_cluster):
    for report in gpu_cluster.run(profiled_cuda_step):
        assert report["compute_s"] > 0, report
        if gpu_cluster.world_size > 1:  # one rank: NCCL may copy instead of running a kernel
            assert report["comm_s"] > 0, report


def nccl_step():
    x = torch.ones(1 << 20, device="cuda")                         # 4 MiB of float32
    for _ in range(3):
        dist.all_reduce(x)
    p = dist.get_world_size()
    out = torch.empty(p << 18, device="cuda", dtype=torch.bfloat16)
    dist.all_gather_single(out, torch.ones(1 << 18, device="cuda", dtype=torch.bfloat16))


def test_diagnose_reads_the_nccl_kernels_of_a_live_run(gpu_cluster, tmp_path):
    p = gpu_cluster.world_size
    if p < 2:
        pytest.skip("one rank: NCCL may copy instead of running a kernel")
    gpu_cluster.run(traces.record, nccl_step, str(tmp_path / "rank{rank}.json"))
    report = diagnose.diagnose(str(tmp_path))
    assert report["backend"] == "nccl" and report["world_size"] == p
    rows = {(c["op"], c["bytes"], c["dtype"], c["group_size"]) for c in report["calls"]}
    assert rows == {("all_reduce", 4 << 20, "float32", p), ("all_gather", p << 19, "bfloat16", p)}, rows
    assert all(c["kernel"].lower().startswith("nccl") and c["protocol"] is None for c in report["calls"])
    assert all(c["busbw_GBps"] > 0 for c in report["calls"])
    assert set(report["overlap"]) == set(range(p))
