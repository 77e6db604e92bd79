"""The rank functions run unchanged under torchrun, as under a Cluster."""

import ast
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

import commlib as cl
from commlib.cluster import demos
from conftest import free_port

ROOT = Path(__file__).resolve().parents[1]


def torchrun(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_example_script_under_torchrun_matches_a_cluster():
    proc = torchrun("--standalone", "--nproc-per-node=3", "examples/torchrun_hello.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [ast.literal_eval(m) for m in re.findall(r"\[rank \d+\] (\{[^}]*\})", proc.stdout)]
    assert sorted(r["rank"] for r in reports) == [0, 1, 2]
    assert {r["all_reduce_sum"] for r in reports} == {6.0}
    with cl.Cluster(world_size=3, timeout=30) as c:
        local = c.run(demos.hello)
    strip = lambda r: {k: v for k, v in r.items() if k not in ("pid", "host")}  # noqa: E731
    assert [strip(r) for r in local] == sorted((strip(r) for r in reports), key=lambda r: r["rank"])


def test_init_from_env_outside_torchrun_says_how_to_launch(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(RuntimeError, match="torchrun --nproc-per-node"):
        cl.init_from_env()
    with pytest.raises(ValueError, match="backend"):
        cl.init_from_env(backend="mpi")


def test_init_from_env_nccl_needs_a_gpu_per_process(monkeypatch):
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    env = {"RANK": str(gpus), "LOCAL_RANK": str(gpus), "WORLD_SIZE": str(gpus + 1),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match="one GPU per process: LOCAL_RANK="):
        cl.init_from_env(backend="nccl")  # raises before any rendezvous: nothing waits for the other ranks


def two_nodes(*script: str, timeout: float = 240) -> list[subprocess.CompletedProcess]:
    """Two torchrun processes on 127.0.0.1 acting as two nodes of 2 ranks each (c10d rendezvous)."""
    for attempt in range(3):  # free_port() can lose its port to another process before node 0 binds it
        out = _two_nodes_once(f"127.0.0.1:{free_port()}", script, timeout)
        if not any("address already in use" in r.stderr.lower() for r in out):
            return out
    return out


def _two_nodes_once(endpoint: str, script, timeout: float) -> list[subprocess.CompletedProcess]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        # output to files, not pipes: reading one node's pipes while the other's fill up could deadlock both
        files = [(open(f"{tmp}/{n}.out", "w+"), open(f"{tmp}/{n}.err", "w+")) for n in (0, 1)]
        procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={n}",
                                   "--nproc-per-node=2", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
                                   "--rdzv-id=commlib-test", *script],
                                  cwd=ROOT, env=env, stdout=files[n][0], stderr=files[n][1], text=True)
                 for n in (0, 1)]
        deadline = time.monotonic() + timeout
        try:
            for p in procs:
                p.wait(max(deadline - time.monotonic(), 0.1))
        finally:
            for p in procs:  # on a timeout: torchrun and the ranks it started, none left behind
                if p.poll() is None:
                    tree = psutil.Process(p.pid).children(recursive=True)
                    p.kill()
                    p.wait()
                    for child in tree:
                        with contextlib.suppress(psutil.NoSuchProcess):
                            child.kill()
        out = []
        for p, (stdout, stderr) in zip(procs, files):
            stdout.seek(0), stderr.seek(0)
            out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout.read(), stderr.read()))
            stdout.close(), stderr.close()
        return out


def test_two_nodes_run_the_example_and_the_bench():
    results = two_nodes("examples/torchrun_hello.py")
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    reports = [ast.literal_eval(m) for r in results for m in re.findall(r"\[rank \d+\] (\{[^}]*\})", r.stdout)]
    assert sorted(r["rank"] for r in reports) == [0, 1, 2, 3]
    assert {r["world_size"] for r in reports} == {4} and {r["all_reduce_sum"] for r in reports} == {10.0}
    results = two_nodes("-m", "commlib", "bench", "--op", "all_reduce", "--algorithm", "ring", "--min-bytes", "1K",
                        "--max-bytes", "4K", "--iters", "2", "--warmup", "1", "--json")
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    printed = [line for r in results for line in r.stdout.splitlines() if line.startswith("[{")]
    assert len(printed) == 1  # only global rank 0 prints
    rows = __import__("json").loads(printed[0])
    assert [r["nbytes"] for r in rows] == [1024, 2048, 4096] and all(r["wrong"] == 0 for r in rows)
