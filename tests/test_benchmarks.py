"""Every script in benchmarks/ runs with --quick (what CI runs): it exits 0 and prints its table.

Speed is not asserted here (DEVELOPERS.md: speed goes in benchmarks, correctness in tests); what is asserted is
that the scripts still run against today's package, and the one correctness figure they print.
Each takes well under a minute on 2 loaded cores.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
# script -> lines its table must contain (the header or the last rows)
TABLES = {
    "cluster_start_dispatch.py": ["cluster start:", "run(noop) dispatch median:", "spawn / dispatch:"],
    "compression_tradeoff.py": ["bytes/step", "measured", "textbook"],
    "diagnose_scale.py": ["events/s", "Holistic Trace Analysis: not run (--quick)", "linear:", "many ranks:"],
    "ddp_overlap.py": ["torch DDP: step", "BucketedDDP (overlap) / torch DDP:", "overlap / no-overlap:"],
    "flight_recorder_overhead.py": ["on/off - 1", "run() dispatch", "all_reduce 1 MiB", "8 B, 1 rank"],
    "model_fit.py": ["p=2 sendrecv fit", "p=4 ring busbw at 1 MiB"],
    "pipeline_bubble.py": ["(p-1)/(m+p-1)", "1f1b"],
    "plan_search.py": ["cold /s", "warm /s", "7B dense", "8x1B MoE"],
    "rank_output.py": ["output=ordered", "output=live"],
    "ring_overlap.py": ["attention zigzag overlap= True", "attention contiguous", "matmul overlap=False",
                        "exposed per rank: measured"],
    "ring_vs_builtin.py": ["ring/builtin", "1M"],
    "topology_emulated.py": ["pacing, 1 NIC(s)", "pacing, 2 NIC(s)"],
    "zero_vs_fsdp2.py": ["fsdp2", "final parameters, ours vs FSDP2"],
}


def test_every_benchmark_has_a_table_to_check():
    assert SCRIPTS == sorted(TABLES), "a script in benchmarks/ without an entry in TABLES (or the reverse)"


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_quick_and_prints_its_table(script, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--quick"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=170)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{script} --quick exited {done.returncode}:\n{out[-3000:]}"
    for line in TABLES[script]:
        assert line in done.stdout, f"{script} --quick did not print {line!r}:\n{out[-3000:]}"
    assert not list(tmp_path.iterdir()), f"{script} --quick wrote files: {list(tmp_path.iterdir())}"
    if script == "zero_vs_fsdp2.py":  # the one correctness check the script makes: same parameters as FSDP2
        err = float(re.search(r"max \|difference\| = (\S+)", done.stdout).group(1))
        assert err < 1e-5


def test_a_fit_without_bandwidth_is_reported_not_divided_by(monkeypatch):
    """Before: --max-bytes 64K fitted beta = 0 and 1 / beta raised ZeroDivisionError (issue 24, item 17)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # for this test only: the scripts' names stay out of the rest
    import model_fit

    line = model_fit.fit_line(2, 30e-6, 0.0, 4)
    assert "no bandwidth can be fitted" in line and "alpha 30.0 µs" in line
    assert "1.000 GB/s" in model_fit.fit_line(2, 30e-6, 1e-9, 4)
