"""The rank functions run unchanged under torchrun, as under a Cluster."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import commlib as cl
from commlib import demos

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
