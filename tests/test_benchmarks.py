"""Every script in benchmarks/ runs with --quick (what CI runs): it exits 0 and prints its table.

Speed is not asserted here (DEVELOPERS.md: speed goes in benchmarks, correctness in tests); what is asserted is
that the scripts still run against today's package, and the one correctness figure they print.
Each takes well under a minute on 2 loaded cores.
"""

import json
import os
import re
import sys
from pathlib import Path

import pytest

from commlib.network import available
from script_runner import Runner

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
# script -> lines its table must contain (the header or the last rows)
TABLES = {
    "cluster_start_dispatch.py": ["cluster start:", "run(noop) dispatch median:", "spawn / dispatch:"],
    "compression_tradeoff.py": ["bytes/step", "measured", "textbook"],
    "diagnose_scale.py": ["events/s", "Holistic Trace Analysis: not run (--quick)", "linear:", "many ranks:"],
    "ddp_overlap.py": ["torch DDP: step", "BucketedDDP (overlap) / torch DDP:", "overlap / no-overlap:"],
    "fault_diagnosis.py": ["culprit named alone, of 3 cases: commlib 3 (100%)", "reduce_op", "torch's analyser"],
    "flight_recorder_overhead.py": ["on/off - 1", "run() dispatch", "all_reduce 1 MiB", "8 B, 1 rank"],
    "gloo_rings.py": ["NICs/node", "a latency a step", "streamed", "notice behind data"],
    "model_fit.py": ["p=2 sendrecv fit", "p=4 ring busbw at 1 MiB"],
    "network_run_whatif.py": ["predicted ms", "every error within 10%:"],
    "network_emulation.py": ["== paced network", "two flows through one NIC", "dist.all_reduce (Gloo)",
                             "commlib hierarchical"],
    "pipeline_bubble.py": ["(p-1)/(m+p-1)", "1f1b"],
    "profiler_overhead.py": ["added us/op", "MLP step", "+ with_stack", "most added per op:"],
    "plan_search.py": ["cold /s", "warm /s", "7B dense", "8x1B MoE"],
    "rank_output.py": ["output=ordered", "output=live"],
    "ring_overlap.py": ["attention zigzag overlap= True", "attention contiguous", "matmul overlap=False",
                        "exposed per rank: measured"],
    "ring_steps.py": ["step median", "held: a step over 3 ms"],
    "small_messages.py": ["rate MB/s", "KiB (bytes)", "2 x 1 kernel network"],
    "ring_vs_builtin.py": ["ring/builtin", "1M"],
    "topology_emulated.py": ["pacing, 1 NIC(s)", "pacing, 2 NIC(s)"],
    "whatif_accuracy.py": ["predicted ms", "bandwidth", "median |error| over the what-ifs:"],
    "whatif_scale.py": ["replay/diagnose", "replay / diagnose, worst case:", "flows: "],
    "workshop_learners.py": ["2 learner(s) at once: chapter 1 in", "left behind: nothing", "learners per core"],
    "zero_vs_fsdp2.py": ["fsdp2", "final parameters, ours vs FSDP2"],
}


# what --quick runs with: the what-if's accuracy on the kernel network where it can be built (CI: root, and
# tests/test_network_kernel.py fails there without it), else on the pacer
QUICK_ARGS = {"whatif_accuracy.py": ["--network", "kernel"] if available()[0] else []}


def test_every_benchmark_has_a_table_to_check():
    assert SCRIPTS == sorted(TABLES), "a script in benchmarks/ without an entry in TABLES (or the reverse)"


@pytest.fixture(scope="module")
def run_script_process():
    """Each script in a process of its own, as `python benchmarks/SCRIPT --quick`, forked from one that imported
    torch and commlib once (tests/script_runner.py): not 17 times."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with Runner(ROOT, env) as run:
        yield run


@pytest.mark.slow
@pytest.mark.timeout(180)
# whatif_accuracy's median is a measurement of the machine's own runs: course.py test runs it alone, after the rest
@pytest.mark.parametrize("script", [pytest.param(s, marks=pytest.mark.alone) if s == "whatif_accuracy.py" else s
                                    for s in SCRIPTS])
def test_benchmark_runs_quick_and_prints_its_table(script, tmp_path, run_script_process):
    code, stdout, stderr = run_script_process(f"benchmarks/{script}", ["--quick", *QUICK_ARGS.get(script, [])],
                                              cwd=tmp_path, timeout=170)
    out = stdout + stderr
    assert code == 0, f"{script} --quick exited {code}:\n{out[-3000:]}"
    for line in TABLES[script]:
        assert line in stdout, f"{script} --quick did not print {line!r}:\n{out[-3000:]}"
    assert not list(tmp_path.iterdir()), f"{script} --quick wrote files: {list(tmp_path.iterdir())}"
    if script == "whatif_accuracy.py":  # issue 49: the kernel network's quick run keeps its median within 10%
        median = float(re.search(r"median \|error\| over the what-ifs: ([\d.]+)%", stdout).group(1))
        assert median <= 10.0, out[-3000:]
    if script == "zero_vs_fsdp2.py":  # the one correctness check the script makes: same parameters as FSDP2
        err = float(re.search(r"max \|difference\| = (\S+)", stdout).group(1))
        assert err < 1e-5


def test_a_fit_without_bandwidth_is_reported_not_divided_by(monkeypatch):
    """Before: --max-bytes 64K fitted beta = 0 and 1 / beta raised ZeroDivisionError (issue 24, item 17)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # for this test only: the scripts' names stay out of the rest
    import model_fit

    line = model_fit.fit_line(2, 30e-6, 0.0, 4)
    assert "no bandwidth can be fitted" in line and "alpha 30.0 µs" in line
    assert "1.000 GB/s" in model_fit.fit_line(2, 30e-6, 1e-9, 4)


def test_hta_figures_carried_twice_still_name_the_run_that_measured_them(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import diagnose_scale as ds

    key = ("gpu", 2, 1_000_000)
    row = lambda **hta: {"case": key[0], "ranks": key[1], "events_per_rank": key[2], **hta}  # noqa: E731
    measured = {f"{k}_s": 40.0 for k in ds.HTA_BACKENDS}
    path = tmp_path / "scale.json"
    path.write_text(json.dumps({"meta": {"date": "2026-12-04", "load_before": [3.1]}, "rows": [row(**measured)]}))
    first = ds.carry_hta([row()], str(path))   # the run after the one that measured HTA
    assert first["hta_from"].startswith("HTA's figures carried from the run of 2026-12-04 (load 3.1)")
    path.write_text(json.dumps({"meta": {"date": "2026-12-07", "load_before": [1.0], **first},
                                "rows": [row(**measured)]}))
    again = [row()]
    assert ds.carry_hta(again, str(path))["hta_from"] == first["hta_from"]   # not "the run of 2026-12-07"
    assert again[0]["hta_s"] == 40.0


BAD_ARGUMENTS = {  # script -> (arguments, words of the one line it must print)
    "cluster_start_dispatch.py": (["--world-size", "0"], "argument --world-size: must be an int >= 1"),
    "compression_tradeoff.py": (["--bandwidths", "-5"], "argument --bandwidths: must be a finite number"),
    "ddp_overlap.py": (["--width", "60000", "--layers", "900"], "--layers 900 --width 60000 needs about"),
    "diagnose_scale.py": (["--hta-python", "/no/such/python"], "argument --hta-python: '/no/such/python' is not an"),
    "fault_diagnosis.py": (["--seed", "-1"], "argument --seed: must be an int >= 0"),
    "flight_recorder_overhead.py": (["--runs", "0"], "argument --runs: must be an int >= 1"),
    "gloo_rings.py": (["--repeats", "0"], "argument --repeats: must be an int >= 1"),
    "model_fit.py": (["--max-bytes", "100G"], "--max-bytes 107374182400 needs about 1.72e+03 GB"),
    "network_emulation.py": (["--bandwidth", "5"], "argument --bandwidth: must be a"),
    "network_run_whatif.py": (["--steps", "0"], "argument --steps: must be an int >= 1"),
    "pipeline_bubble.py": (["--microbatches", "4", "0"], "argument --microbatches: must be an int >= 1"),
    "profiler_overhead.py": (["--rounds", "0"], "argument --rounds: must be an int >= 1 and <= 100, got 0"),
    "plan_search.py": (["--nodes", "x"], "argument --nodes: must be an int, got 'x'"),
    "rank_output.py": (["--lines", "-1"], "argument --lines: must be an int >= 1"),
    "workshop_learners.py": (["--learners", "0,2"], "--learners must be integers from 1 to 64, comma-separated"),
    "ring_steps.py": (["--repeats", "0"], "argument --repeats: must be an int >= 1"),
    "small_messages.py": (["--repeats", "0"], "argument --repeats: must be an int >= 1"),
    "ring_overlap.py": (["--bandwidth", "nan"], "argument --bandwidth: must be a finite number"),
    "ring_vs_builtin.py": (["--sizes", "64Q"], "argument --sizes: size must look like 512, 1K, 64M or 1G"),
    "topology_emulated.py": (["--nics", "3"], "argument --nics: must be an int >= 1 and <= 2"),
    "whatif_accuracy.py": (["--bandwidth", "0"], "argument --bandwidth: must be a"),
    "whatif_scale.py": (["--events", "5"], "argument --events: must be an int >= 1000"),
    "zero_vs_fsdp2.py": (["--hidden", "60000", "--layers", "900"], "--hidden 60000 --layers 900 needs about"),
}


def run_script(script, args, monkeypatch, capsys) -> tuple[int, str]:
    """The script's main() in this process (its argument checks need no rank) -> (exit code, stderr)."""
    import runpy

    import commlib as cl

    def no_cluster(*a, **k):
        raise AssertionError("a Cluster started before the arguments were checked")

    monkeypatch.setattr(cl, "Cluster", no_cluster)
    monkeypatch.setattr(sys, "argv", [script, *args])
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(ROOT / "benchmarks" / script), run_name="__main__")
    return e.value.code, capsys.readouterr().err


@pytest.mark.parametrize("script", SCRIPTS)
def test_bad_arguments_are_one_line_exit_2_before_any_rank_starts(script, monkeypatch, capsys):
    """Before: model_fit --max-bytes 100G started allocating and was killed; tiny sizes and zero_vs_fsdp2's bad
    values gave tracebacks."""
    args, words = BAD_ARGUMENTS[script]
    code, err = run_script(script, args, monkeypatch, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert words in err, err


def test_model_fit_refuses_sizes_too_small_to_fit_and_more_than_the_free_memory(monkeypatch, capsys):
    from commlib.bench import arguments

    code, err = run_script("model_fit.py", ["--max-bytes", "2K"], monkeypatch, capsys)
    assert code == 2 and "argument --max-bytes: must be a size in [8192," in err, err
    monkeypatch.setattr(arguments, "available_memory", lambda: 1 << 30)   # 1 GiB free
    code, err = run_script("model_fit.py", ["--max-bytes", "1G"], monkeypatch, capsys)
    assert code == 2 and "--max-bytes 1073741824 needs about 18" in err and "1.07 GB free now" in err, err


OUTPUT_OPTION = {"compression_tradeoff.py": "--out", "diagnose_scale.py": "--out", "fault_diagnosis.py": "--out",
                 "network_emulation.py": "--json", "network_run_whatif.py": "--json", "ring_overlap.py": "--json",
                 "topology_emulated.py": "--json", "whatif_accuracy.py": "--json", "whatif_scale.py": "--json"}


@pytest.mark.parametrize("script, option", sorted(OUTPUT_OPTION.items()))
def test_a_result_file_in_a_missing_folder_is_refused_before_the_run(script, option, tmp_path, run_script_process):
    """arguments.output_file: one line and exit 2 at once, not a traceback when the run ends and writes."""
    code, stdout, stderr = run_script_process(f"benchmarks/{script}", [option, str(tmp_path / "no" / "x.json")],
                                              cwd=tmp_path, timeout=60)
    assert (code, stdout) == (2, ""), stderr
    assert stderr.strip() == f"{script}: error: argument {option}: '{tmp_path / 'no' / 'x.json'}' must be a file " \
                             "in a folder that exists"
