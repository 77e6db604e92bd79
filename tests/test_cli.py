"""commlib/__main__.py: `python -m commlib` lists every command, answers help without torch, each option explained."""

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commlib.__main__ import BENCH_DTYPES, BENCH_OPS, _parser, bench_algorithms

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> dict:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_help_lists_every_command_with_a_line_and_imports_no_torch():
    probe = ("import sys, time, contextlib, io; t = time.perf_counter(); from commlib.__main__ import main\n"
             "with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit): main(['--help'])\n"
             "print(time.perf_counter() - t, 'torch' in sys.modules); print(out.getvalue())")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    wall = time.perf_counter() - t0
    first, text = proc.stdout.split("\n", 1)
    _, torch_loaded = first.split()
    assert torch_loaded == "False", "help must not import torch (1-2 s of the 0.5 s budget)"
    assert wall < 5, wall  # the whole interpreter; a loaded CI machine, not a benchmark
    flat = " ".join(text.split())
    for name, parser in _commands().items():
        assert f"{name} {' '.join(parser.description.split())}" in flat, name  # the name, then its line


@pytest.mark.parametrize("name", ["bench", "diagnose", "learner-copies"])
def test_each_command_has_an_example_and_every_option_a_help_text(name):
    parser = _commands()[name]
    assert f"python -m commlib {name} " in parser.format_help().split("example:")[1]
    silent = [a.dest for a in parser._actions if not a.help]
    assert silent == [], f"{name}: options without help: {silent}"


def test_the_help_names_of_bench_are_what_bench_runs():
    from commlib import bench

    assert BENCH_OPS == bench.BENCHED_OPS and BENCH_DTYPES == tuple(bench.DTYPES)
    for op in BENCH_OPS:
        assert bench_algorithms(op) == bench.algorithms_for(op), op


def test_diagnose_does_not_import_torch(tmp_path):
    probe = ("import sys; from commlib.__main__ import main\ntry: main(['diagnose', sys.argv[1]])\n"
             "except SystemExit: pass\nprint('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.strip().splitlines()[-1] == "False", proc.stderr


def test_a_reader_that_stops_reading_gets_no_traceback(tmp_path):
    """`python -m commlib diagnose ... --json | head`: the pipe closes early; the command ends quietly, as any Unix
    filter does, not with a BrokenPipeError traceback (issue 41's red team)."""
    from commlib.profiling.jobs import synthetic

    synthetic.write_job(str(tmp_path), ranks=2, events=20_000)   # ~230 KB of JSON: more than a pipe holds (64 KiB)
    proc = subprocess.Popen([sys.executable, "-m", "commlib", "diagnose", str(tmp_path), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(100)   # then the reader goes away, with most of the output unread
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()[-2000:]
    assert proc.returncode == 1
