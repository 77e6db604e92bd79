"""tools/durations.py: seconds per test file from pytest's --durations output or its JUnit XML."""

import json
import os
import subprocess

import pytest

from tools import durations

LOG = """\
============================= slowest durations ==============================
14.46s call     tests/test_parallel_ddp.py::test_bucketed_ddp_gradients_and_buckets_equal_torch_ddps[3]
8.26s call     tests/test_parallel_ddp.py::test_bucketed_ddp_gradients_and_buckets_equal_torch_ddps[2]
4.67s call     notebooks/00_start_here.ipynb::Cell 0
2.44s setup    tests/test_parallel_collective_matmul.py::test_collective_matmul_equals_all_gather_then_matmul[2-True]
1.46s setup    notebooks/00_start_here.ipynb::Cell 0
0.13s teardown tests/test_parallel_collective_matmul.py::test_ring_overlap_repeats_reports_medians
0.01s call     tests/test_cost_timeline.py::test_wrong_types[<lambda>-order[0] must be an int1]

(171 durations < 0.005s hidden.  Use -vv to show these durations.)
================= 65 passed, 2 skipped, 3 warnings in 53.65s (0:00:53) =================
"""

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">
<testsuite name="pytest" errors="0" failures="1" skipped="0" tests="5" time="61.5">
<testcase classname="tests.test_a" name="test_one" time="2.5" />
<testcase classname="tests.test_a.TestGroup" name="test_two" time="1.25"><failure message="no">x</failure></testcase>
<testcase classname="tests.test_b" name="test_three[1]" time="7.0" />
<testcase classname="notebooks.06_overlap.ipynb" name="Cell 0" time="3.0" />
<testcase classname="notebooks.06_overlap.ipynb" name="Cell 1" time="0.5" />
</testsuite></testsuites>"""


def test_a_log_sums_setup_call_and_teardown_per_file_slowest_first():
    got = durations.parse_log(LOG)
    quiet = LOG.replace("================= 65 passed", "65 passed").replace(" (0:00:53) =================", "")
    assert durations.parse_log(quiet) == got  # -q prints the last line without its frame
    assert got == {"total_s": 53.65, "tests": {"tests/test_parallel_ddp.py": 22.72, "notebooks/00_start_here.ipynb": 6.13,
                                               "tests/test_parallel_collective_matmul.py": 2.57,
                                               "tests/test_cost_timeline.py": 0.01}}
    assert list(got["tests"]) == ["tests/test_parallel_ddp.py", "notebooks/00_start_here.ipynb",
                                  "tests/test_parallel_collective_matmul.py", "tests/test_cost_timeline.py"]


def test_a_junit_report_maps_classes_and_notebooks_to_their_files(tmp_path):
    (tmp_path / "tests").mkdir()
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / "tests" / name).write_text("")
    got = durations.parse_junit(JUNIT, root=tmp_path)
    assert got == {"total_s": 61.5, "tests": {"tests/test_b.py": 7.0, "tests/test_a.py": 3.75,
                                              "notebooks/06_overlap.ipynb": 3.5}}
    assert durations.test_file("tests.test_a.TestGroup", tmp_path) == "tests/test_a.py"
    assert durations.test_file("tests.test_gone", tmp_path) == "tests/test_gone.py"  # not on disk: read as a module


@pytest.mark.parametrize("call, words", [
    (lambda: durations.parse_log("3 passed in 1.0s"), "no '--durations' lines"),
    (lambda: durations.parse_log(LOG.rsplit("\n", 2)[0]), "did not finish"),
    (lambda: durations.parse_junit("<testsuites"), "not XML"),
    (lambda: durations.parse_junit("<report/>"), "no <testsuite>"),
    (lambda: durations.parse_junit('<!DOCTYPE x [<!ENTITY a "aaaa">]><testsuite time="1"/>'), "no DOCTYPE"),
])
def test_what_is_not_a_run_is_refused(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_a_fifo_is_refused_unopened_and_the_cli_says_so_in_one_line(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert durations.main(["--log", str(fifo), "--out", str(tmp_path / "d.json")]) == 2  # returns: nothing opened it
    assert capsys.readouterr().err == f"durations: {fifo} is not a regular file\n"
    with pytest.raises(SystemExit) as info:
        durations.main(["--log"])
    assert info.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_the_cli_writes_the_json_and_run_reads_pytests_report(tmp_path, monkeypatch, capsys):
    (tmp_path / "run.log").write_text(LOG)
    out = tmp_path / "d.json"
    assert durations.main(["--log", str(tmp_path / "run.log"), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == durations.parse_log(LOG)
    seen = {}

    def fake_pytest(cmd, cwd, check):  # what --run hands pytest, and a report as pytest would write it
        seen.update(cmd=cmd, cwd=cwd)
        report = next(a for a in cmd if a.startswith("--junitxml=")).split("=", 1)[1]
        with open(report, "w") as f:
            f.write(JUNIT)

    monkeypatch.setattr(subprocess, "run", fake_pytest)
    assert durations.main(["--out", str(out), "--run", "-x", "tests/test_a.py"]) == 0
    assert seen["cmd"][-2:] == ["-x", "tests/test_a.py"] and seen["cwd"] == durations.ROOT
    got = json.loads(out.read_text())
    assert got["tests"] == durations.parse_junit(JUNIT)["tests"] and 0 <= got["total_s"] < 60  # the process's wall time


NBVAL_ONE_PROCESS = durations.ROOT / "tests" / "nbval_durations.json"


def test_the_committed_nbval_timings_keep_each_chapter_within_60_s_and_the_twelve_within_180_s():
    """Issue 65, item 4: the chapters' nbval in one process on 2 cores (`python tools/durations.py --out
    tests/nbval_durations.json --run notebooks -p no:xdist`), committed with the chapters' outputs."""
    with open(NBVAL_ONE_PROCESS) as f:
        got = json.load(f)
    chapters = sorted(p.name for p in (durations.ROOT / "notebooks").glob("[0-9]*.ipynb"))
    per = {k.split("/")[-1]: v for k, v in got["tests"].items()}
    assert sorted(per) == chapters, "the file does not time every chapter: run the command above again"
    assert {k: v for k, v in per.items() if v > 60} == {} and got["total_s"] <= 180, got
