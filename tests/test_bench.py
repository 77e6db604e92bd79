"""commlib.bench and `python -m commlib bench`: rows, columns, checks, and torchrun mode."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from commlib import bench, cost

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"nbytes", "count", "dtype", "time_s", "algbw_GBps", "busbw_GBps", "wrong"}


@pytest.mark.parametrize("text, value", [("512", 512), ("1K", 1024), ("64M", 64 << 20), ("1G", 1 << 30),
                                         ("4MiB", 4 << 20), (2048, 2048)])
def test_parse_size(text, value):
    assert bench.parse_size(text) == value


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="512, 1K, 64M"):
        bench.parse_size("lots")
    with pytest.raises(ValueError, match="min_bytes <= max_bytes"):
        bench.sizes(4096, 1024)
    assert bench.sizes(1024, 8192) == [1024, 2048, 4096, 8192]


def test_every_implementation_gives_right_results_and_consistent_columns(cluster4):
    for op, algorithm in bench.IMPLEMENTATIONS:
        rows = cluster4.run(bench.sweep, op, algorithm, 256, 4096, iters=2, warmup=1)
        assert all(r == rows[0] for r in rows), "every rank reports the same (slowest-rank) figures"
        for row in rows[0]:
            assert set(row) == KEYS
            assert row["wrong"] == 0, (op, algorithm, row)
            assert row["count"] % 4 == 0 and row["nbytes"] == row["count"] * 4
            assert row["algbw_GBps"] == pytest.approx(row["nbytes"] / row["time_s"] / 1e9)
            assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * cost.bus_factor(op, 4))


def test_sweep_rejects_unknown_pairs(cluster4):
    def bad():
        return bench.sweep("all_gather", "tree")

    import commlib as cl

    with pytest.raises(cl.RankError, match="algorithm for 'all_gather'"):
        cluster4.run(bad)


def cli(*args, torchrun=False, timeout=180):
    cmd = [sys.executable, "-m", "commlib", "bench", *args]
    with tempfile.TemporaryDirectory() as logs:   # torchrun's logs: by default a /tmp/torchelastic_* left behind
        if torchrun:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--log-dir", logs, "--standalone",
                   "--nproc-per-node=2", "-m", "commlib", "bench", *args]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))


def test_cli_json_and_table():
    proc = cli("--op", "all_reduce", "--algorithm", "ring", "--world-size", "2", "--min-bytes", "1K",
               "--max-bytes", "4K", "--iters", "2", "--warmup", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(proc.stdout)
    assert [r["nbytes"] for r in rows] == [1024, 2048, 4096]
    assert all(set(r) == KEYS and r["wrong"] == 0 for r in rows)
    proc = cli("--op", "broadcast", "--algorithm", "tree", "--world-size", "3", "--min-bytes", "1K",
               "--max-bytes", "1K", "--iters", "1", "--warmup", "0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    header = proc.stdout.splitlines()[1].split()
    assert header == ["size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"]
    assert "none" in proc.stdout.splitlines()[3]


def test_cli_rejects_bad_algorithm_before_starting():
    proc = cli("--op", "all_gather", "--algorithm", "naive", "--world-size", "2")
    assert proc.returncode == 2 and "must be one of ('builtin', 'ring')" in proc.stderr


def test_cli_under_torchrun_uses_the_launchers_ranks():
    proc = cli("--op", "all_reduce", "--algorithm", "rabenseifner", "--min-bytes", "1K", "--max-bytes", "2K",
               "--iters", "2", "--warmup", "1", "--json", torchrun=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r["nbytes"] for r in rows] == [1024, 2048] and all(r["wrong"] == 0 for r in rows)


def test_sendrecv_moves_each_ranks_tensor_to_the_right(cluster4):
    rows = cluster4.run(bench.sweep, "sendrecv", "builtin", 1024, 2048, iters=2, warmup=1)[0]
    assert [r["wrong"] for r in rows] == [0, 0]
    assert all(r["busbw_GBps"] == pytest.approx(r["algbw_GBps"]) for r in rows)


def test_run_sweep_from_the_notebook_side(cluster4):
    rows = bench.run_sweep(cluster4, "all_reduce", "ring", 1024, 4096, progress=True, iters=2, warmup=1)
    assert [r["nbytes"] for r in rows] == [1024, 2048, 4096] and all(r["wrong"] == 0 for r in rows)


def test_loopback_link_and_gamma_are_measured():
    link = bench.loopback_link(nbytes=4 << 20, repeats=2, pings=50)
    assert link.name == "loopback" and "measured here" in link.source
    assert 1e7 < link.bandwidth < 1e12 and 0 < link.latency < 1e-2  # plausible for any machine, not a speed test
    gamma = bench.measure_gamma(nbytes=1 << 20, repeats=3)
    assert 0 < gamma < 1e-6


def test_repeats_keep_each_sizes_median():
    runs = [[{"nbytes": 1000, "count": 250, "dtype": "float32", "time_s": t, "algbw_GBps": 0, "busbw_GBps": 0,
              "wrong": w}] for t, w in [(3e-6, 0), (1e-6, 2), (2e-6, 0)]]
    (row,) = bench.combine_repeats(runs, "all_reduce", 4)
    assert row["time_s"] == 2e-6 and row["wrong"] == 2
    assert row["algbw_GBps"] == pytest.approx(1000 / 2e-6 / 1e9) and row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 1.5)


def test_run_sweep_with_repeats(cluster4):
    rows = bench.run_sweep(cluster4, "all_reduce", "tree", 1024, 2048, progress=False, repeats=3, iters=2, warmup=1)
    assert [r["nbytes"] for r in rows] == [1024, 2048] and all(r["wrong"] == 0 for r in rows)
    with pytest.raises(ValueError, match="repeats"):
        bench.run_sweep(cluster4, repeats=0)


def bench_cli_in_process(monkeypatch, *args, env=None) -> tuple[int, str, str]:
    """main(["bench", ...]) here, outside torchrun unless env says otherwise; starting a Cluster is a failure."""
    import contextlib
    import io

    import commlib as cl
    from commlib.__main__ import TORCHRUN_VARS, main

    for k in TORCHRUN_VARS + ("LOCAL_RANK",):
        monkeypatch.delenv(k, raising=False)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(cl, "Cluster", lambda *a, **k: pytest.fail("a Cluster was started"))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["bench", *args])
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


OUT_OF_RANGE = [  # (arguments after `bench`, the argument the error must name)
    (["--world-size", "2", "--min-bytes", "0"], "--min-bytes"),
    (["--world-size", "2", "--min-bytes", "4K", "--max-bytes", "1K"], "--max-bytes"),
    (["--world-size", "2", "--min-bytes", "lots"], "--min-bytes"),
    (["--world-size", "2", "--factor", "1"], "--factor"),
    (["--world-size", "0"], "--world-size"),
    (["--world-size", "65"], "--world-size"),
    (["--world-size", "2", "--iters", "0"], "--iters"),
    (["--world-size", "2", "--warmup", "-1"], "--warmup"),
    (["--world-size", "2", "--repeats", "0"], "--repeats"),
    (["--world-size", "2", "--timeout", "0"], "--timeout"),
    (["--world-size", "2", "--timeout", "nan"], "--timeout"),
    (["--world-size", "2", "--timeout", "1e10"], "--timeout"),
    ([], "--world-size"),  # missing, outside torchrun
    (["--world-size", "2", "--backend", "nccl"], "--backend"),
]


@pytest.mark.parametrize("args, name", OUT_OF_RANGE, ids=[" ".join(a) or "no-world-size" for a, _ in OUT_OF_RANGE])
def test_cli_out_of_range_values_exit_2_with_one_line_naming_the_argument(monkeypatch, args, name):
    import torch

    if "nccl" in args and torch.cuda.device_count() >= 2:
        pytest.skip("this machine has GPUs: nccl is valid")
    code, out, err = bench_cli_in_process(monkeypatch, *args)
    assert code == 2 and out == "", (code, out, err)
    assert len(err.splitlines()) == 1 and name in err and "Traceback" not in err, err


def test_cli_errors_under_torchrun_are_printed_by_rank_0_only(monkeypatch):
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for rank, lines in (("0", 1), ("1", 0)):
        code, out, err = bench_cli_in_process(monkeypatch, "--factor", "1", env=dict(env, RANK=rank))
        assert code == 2 and out == "" and len(err.splitlines()) == lines, (rank, err)


# ------------------------------------------------------------------ faults and odd input (issue 24)
def test_cli_refuses_a_size_the_machine_cannot_hold_before_starting():
    proc = cli("--world-size", "2", "--min-bytes", "99999G", "--max-bytes", "99999G", timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "--max-bytes" in proc.stderr and "more than this machine" in proc.stderr


def test_cli_timeout_is_one_line_naming_it():
    proc = cli("--world-size", "2", "--timeout", "0.3", timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--timeout 0.3" in proc.stderr, proc.stderr


def test_cli_with_a_rank_outside_the_world_says_so_instead_of_waiting():
    """Before: RANK=1 WORLD_SIZE=1 waited silently for a rank 0 that does not exist."""
    env = dict(os.environ, RANK="1", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    proc = subprocess.run([sys.executable, "-m", "commlib", "bench"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "RANK=1 WORLD_SIZE=1: RANK must be an int in [0, WORLD_SIZE)" in proc.stderr
