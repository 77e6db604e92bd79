"""The rank functions run unchanged under torchrun, as under a Cluster."""

import ast
import contextlib
import os
import re
import socket
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
    """torchrun's logs in a folder of the test's own: without --log-dir it makes /tmp/torchelastic_* and leaves it."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as logs:
        return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--log-dir", logs, *args], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=timeout)


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


PORT_TAKEN = "address already in use"  # in node 0's stderr when it cannot host the store on its port


def two_nodes(*script: str, timeout: float = 240, ports=None) -> list[subprocess.CompletedProcess]:
    """Two torchrun processes on 127.0.0.1 acting as two nodes of 2 ranks each (c10d rendezvous), on the first of
    `ports` (default: free_port()'s) that node 0 can listen on: another process can take free_port()'s port before
    node 0 binds it, seconds later."""
    for endpoint_port in ports or (free_port() for _ in range(3)):
        out = _two_nodes_once(f"127.0.0.1:{endpoint_port}", script, timeout)
        if PORT_TAKEN not in out[0].stderr.lower():
            return out
    return out


def _two_nodes_once(endpoint: str, script, timeout: float) -> list[subprocess.CompletedProcess]:
    """Node 0 hosts the rendezvous store (is_host=1), node 1 only connects (is_host=0). Left to guess, both would
    try to host on 127.0.0.1 and fall back to connecting; so a port another process took was never an error, only a
    wait for whatever listened there: stuck until the timeout. Now node 0 fails at once and node 1 is stopped."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        # output to files, not pipes: reading one node's pipes while the other's fill up could deadlock both
        files = [(open(f"{tmp}/{n}.out", "w+"), open(f"{tmp}/{n}.err", "w+")) for n in (0, 1)]
        procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--log-dir", f"{tmp}/logs{n}",
                                   "--nnodes=2", f"--node-rank={n}",
                                   "--nproc-per-node=2", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
                                   "--rdzv-id=commlib-test", f"--rdzv-conf=is_host={int(n == 0)}", *script],
                                  cwd=ROOT, env=env, stdout=files[n][0], stderr=files[n][1], text=True)
                 for n in (0, 1)]
        deadline = time.monotonic() + timeout
        try:
            procs[0].wait(max(deadline - time.monotonic(), 0.1))
            with open(f"{tmp}/0.err") as err:
                if procs[0].returncode != 0 and PORT_TAKEN in err.read().lower():
                    return _collect(procs, files, stop=True)  # node 1 would wait for a store that never comes
            procs[1].wait(max(deadline - time.monotonic(), 0.1))
        finally:
            _stop(procs)
        return _collect(procs, files)


def _stop(procs: list[subprocess.Popen]) -> None:
    """On a timeout, or when node 0 failed: torchrun and the ranks it started, none left behind."""
    for p in procs:
        if p.poll() is None:
            tree = []
            with contextlib.suppress(psutil.NoSuchProcess):
                tree = psutil.Process(p.pid).children(recursive=True)
            p.kill()
            p.wait()
            for child in tree:
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()


def _collect(procs, files, stop: bool = False) -> list[subprocess.CompletedProcess]:
    if stop:
        _stop(procs)
    out = []
    for p, (stdout, stderr) in zip(procs, files):
        stdout.seek(0), stderr.seek(0)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout.read(), stderr.read()))
        stdout.close(), stderr.close()
    return out


def test_two_nodes_run_the_example_and_the_bench():
    with socket.create_server(("127.0.0.1", 0)) as taken:  # the first port is another's: node 0 fails, then the next
        first = taken.getsockname()[1]
        results = two_nodes("examples/torchrun_hello.py", ports=[first, free_port(), free_port()])
    assert f"--rdzv-endpoint=127.0.0.1:{first}" not in results[0].args  # so the first try failed, as port taken
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
