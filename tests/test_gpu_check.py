"""tools/gpu_check.sh --dry-run: the GPU script's own steps, on CPU with the fake CUDA (issue 35).

The script runs on a lent GPU machine whose minutes are few; here every step (tests/test_gpu.py's collection,
the two NCCL bench sweeps, benchmarks/ddp_overlap.py on NCCL, the notebooks' collection) runs at smoke sizes
with tests/fake_cuda.py standing in for two GPUs, so a broken command line or a CUDA-only slip shows in CI.
The CUDA branches tests/test_gpu.py's tests reach run on the fake once, in tests/test_gpu_path.py."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "gpu_check.sh"
STEPS = ("test_gpu", "bench_builtin", "bench_ring", "ddp_overlap", "notebooks")


def run_script(*args, out: Path, timeout: float):
    env = dict(os.environ, OUT=str(out), PYTHON=sys.executable, GPU_CHECK_BUDGET_S="250")
    env.pop("COMMLIB_FAKE_CUDA", None)
    proc = subprocess.Popen(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log = proc.communicate(timeout=timeout)[0]
        return proc.returncode, log
    finally:
        if proc.poll() is None:  # timed out: the script, its steps and their ranks go with their group
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_dry_run_passes_every_step_on_the_fake_gpus(tmp_path):
    code, log = run_script("--dry-run", out=tmp_path, timeout=280)  # under pytest-timeout's 300 s
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert code == 0, log[-4000:]
    assert [line.split(":")[0] for line in summary[1:]] == list(STEPS)
    assert all(line.split(": ")[1].startswith("0 (") for line in summary[1:]), summary
    assert "fake_cuda.py stands in for 2 GPUs" in (tmp_path / "machine.txt").read_text()
    assert re.search(r"^\d+ tests collected in", (tmp_path / "test_gpu.txt").read_text(), re.MULTILINE)
    for bench in ("bench_builtin", "bench_ring"):
        text = (tmp_path / f"{bench}.txt").read_text()
        assert "world_size=2 backend=nccl" in text and "#wrong total: 0" in text, text
    ddp = (tmp_path / "ddp_overlap.txt").read_text()
    assert "backend: nccl" in ddp and "BucketedDDP overlap: step" in ddp, ddp


def test_an_unknown_argument_is_one_line_and_exit_2(tmp_path):
    code, log = run_script("--dryrun", out=tmp_path, timeout=30)
    assert code == 2 and log.count("\n") == 1 and log.startswith("usage: bash tools/gpu_check.sh [--dry-run]")
