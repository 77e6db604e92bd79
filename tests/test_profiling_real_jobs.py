"""diagnose on jobs no one here wrote (Holistic Trace Analysis' public test traces, assets/traces/README.md)
and on the odd cases real jobs give: older traces, NCCL seen from the CPU only, memcpy as busy time, files
without distributedInfo, nothing to diagnose."""

import gzip
import json
import math
import os
import subprocess
import sys
import warnings

import pytest

from commlib.profiling import diagnosis as td
from commlib.profiling import overlap as ov
from commlib.profiling.report import diagnosis as rp
from commlib.profiling import traces as tr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACES = os.path.join(ROOT, "assets", "traces")
SAMPLED = [os.path.join(TRACES, f"hta_sampled_rank-{r}.json.gz") for r in (0, 1)]
NON_GPU = os.path.join(TRACES, "hta_rank_non_gpu.json.gz")
# holistictraceanalysis 0.5.0, TraceAnalysis(trace_dir=<the two sampled files>,
# include_last_profiler_step=True).get_comm_comp_overlap(visualize=False): comp_comm_overlap_pctg per rank.
# (Its default, include_last_profiler_step=False, drops the last profiler step: 11.81 and 20.05 on one step.)
HTA_OVERLAP_PCT = {0: 14.95, 1: 19.93}
ITEMSIZE = {"float": 4, "signed char": 1, "int": 4, "long int": 8, "long": 8, "unsigned char": 1, "c10::BFloat16": 2, "c10::Half": 2}


@pytest.fixture(scope="module")
def sampled():
    return td.diagnose(SAMPLED)


def test_overlap_per_rank_is_holistic_trace_analysis_within_one_point(sampled):
    for rank, pct in HTA_OVERLAP_PCT.items():
        o = sampled["overlap"][rank]
        assert 100 * o["hidden_us"] / o["comm_us"] == pytest.approx(pct, abs=1.0)
        assert 0.0 <= o["waiting_us"] <= o["comm_us"]      # one story: waiting is part of communication


def _expected_bytes(path):
    """Every collective's bytes by nccl-tests' convention, from the trace's own ops: all-gathers the gathered
    output of c10d::_allgather_base_ (its first tensor), every other call its nccl:* op's input."""
    events = json.load(gzip.open(path))["traceEvents"]
    out = []
    for e in events:
        a, name = e.get("args") or {}, e.get("name", "")
        if name.startswith("nccl:") and name != "nccl:_all_gather_base":
            out.append(({"all_reduce": "all_reduce", "all_to_all": "all_to_all"}[name[5:]], math.prod(a["Input Dims"][0]) * ITEMSIZE[a["Input type"][0]]))
        elif name == "c10d::_allgather_base_":
            out.append(("all_gather", math.prod(a["Input Dims"][0]) * ITEMSIZE[a["Input type"][0]]))
    return sorted(out)


def test_every_collective_has_its_arguments_bytes_and_an_older_all_gather_is_the_gathered_total(sampled):
    for rank, path in enumerate(SAMPLED):
        got = sorted((c["op"], c["bytes"]) for c in sampled["calls"] if c["rank"] == rank)
        assert got == _expected_bytes(path) and len(got) == 10
    gathers = [c for c in sampled["calls"] if c["op"] == "all_gather"]
    # 1 GiB gathered from 16 MiB shards: a 64-rank group in a 128-rank job, whose name no trace gives
    assert {(c["bytes"], c["group"], c["group_size"]) for c in gathers} == {(1 << 30, None, 64)}
    assert not any(c["flag"] for c in gathers) and any("not known" in n for n in rp.json_report(sampled)["notes"])
    # 5 matched calls: rank 1 came last 4 times (3 to 30 ms late), rank 0 once (27 ms late): which rank comes
    # last changes from call to call by as much as either is late, so neither is named (stragglers.py's noise)
    assert sampled["stragglers"] == [] and sampled["noise"]["unnamed"][0]["delay_us"] == 83000.0
    assert "rank 1's 83.00 ms over 4 call(s), is within it" in rp.format_report(sampled).replace("\n  ", " ")
    # no pg_config: the other calls' group is a guess (the whole job), so nothing is priced or flagged on it
    priced = td.diagnose(SAMPLED, hardware="dgx_h100")
    assert all(c["model_ratio"] is None for c in priced["calls"])
    assert all(c["flag"] is None or c["flag"].startswith("waited") for c in rp.json_report(priced)["calls"])
    assert any("no process groups in the trace" in n for n in rp.json_report(priced)["notes"])


def test_nccl_seen_from_the_cpu_only_is_nccl_with_cpu_times_and_a_note():
    report = td.diagnose([NON_GPU])
    assert report["backend"] == "nccl" and len(report["calls"]) == 6
    assert {c["op"] for c in report["calls"]} == {"all_to_all"}
    assert sorted(c["bytes"] for c in report["calls"]) == sorted(b for _, b in _expected_bytes(NON_GPU))
    assert any("no device times in this trace" in n and "ProfilerActivity.CUDA" in n for n in rp.json_report(report)["notes"])


def _without_info(src, dst):
    data = json.load(gzip.open(src))
    data.pop("distributedInfo", None)
    with open(dst, "w") as f:
        json.dump(data, f)
    return str(dst)


def test_a_file_without_distributed_info_is_rank_0_alone_or_takes_its_rank_from_its_name(tmp_path):
    alone = _without_info(NON_GPU, tmp_path / "job.json")
    report = td.diagnose([alone])
    assert report["ranks"] == [0] and any("read as rank 0 of a one-rank job" in n for n in rp.json_report(report)["notes"])
    (tmp_path / "named").mkdir()
    a = _without_info(NON_GPU, tmp_path / "named" / "trace_rank-3.json")
    b = _without_info(NON_GPU, tmp_path / "named" / "worker5.json")
    assert td.diagnose([a, b])["ranks"] == [3, 5]
    with pytest.raises(tr.TraceError, match=r"no rank in 2 of 3 files .*: job.json, other.json"):
        td.diagnose([alone, a, _without_info(NON_GPU, tmp_path / "other.json")])


def test_memcpy_and_memset_are_busy_time_not_idle():
    import numpy as np

    call = tr.Call(0, "all_reduce", "0", 2, 8, "float32", 10.0, 10.0, None, None, None)
    rank = tr.RankTrace("r.json", 0, 2, "nccl", None, [call], np.array([[0.0, 5.0]]), (0.0, 100.0),
                        copies=np.array([[30.0, 50.0], [40.0, 60.0]]))
    o = ov.overlap(rank)
    assert (o["comm_us"], o["compute_us"], o["idle_us"]) == (10.0, 5.0, 100.0 - 5.0 - 10.0 - 30.0)


def test_nothing_to_diagnose_is_an_error_with_one_line_per_file(tmp_path):
    empty = tmp_path / "rank0.json"
    empty.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": []}))
    quiet = tmp_path / "rank1.json"
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "dur": 2.0, "pid": 1, "tid": 1}
    quiet.write_text(json.dumps({"distributedInfo": {"rank": 1, "world_size": 2}, "traceEvents": [op]}))
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-m", "commlib", "diagnose", str(tmp_path)], capture_output=True,
                         text=True, env=env, timeout=120)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(lines) == 2, out.stderr
    assert "rank0.json: nothing to diagnose: no events at all: the profiler was stopped" in lines[0]
    assert "rank1.json: nothing to diagnose: 1 event(s), none a collective: with a schedule, write" in lines[1]


def _readme_recipe():
    """The first python block of README.md's section on diagnosing your own job: the recipe, as printed."""
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text[text.index("## Diagnose your own job's traces"):]
    return section[section.index("```python\n") + 10:section.index("```", section.index("```python\n") + 10)]


def _run_recipe(code, folder):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)

    def train_step():
        torch.mm(torch.ones(64, 64), torch.ones(64, 64))
        dist.all_reduce(torch.ones(1 << 12))

    os.chdir(folder)   # the recipe writes traces/rank{rank}.json where it runs
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        exec(code, {"train_step": train_step})
    return [str(w.message) for w in said]


def test_the_readme_profiler_recipe_run_on_two_cpu_ranks_gives_traces_diagnose_reads(tmp_path):
    import cloudpickle

    import commlib as cl

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with cl.Cluster(world_size=2, timeout=120) as c:
        said = c.run(_run_recipe, _readme_recipe(), str(tmp_path))
    # repeat=1: one cycle, so torch does not warn that it 'clears events at the end of each cycle' and start another
    assert [w for ws in said for w in ws if "cycle" in w] == [], said
    report = td.diagnose(str(tmp_path / "traces"))
    assert report["ranks"] == [0, 1] and report["backend"] == "gloo"
    # two recorded steps of one all-reduce each, on each rank, with the tensor's bytes
    assert sorted((c["rank"], c["op"], c["bytes"]) for c in report["calls"]) == \
        [(r, "all_reduce", (1 << 12) * 4) for r in (0, 1) for _ in range(2)]
    assert not [n for n in rp.json_report(report)["notes"] if n.startswith("group ")], report["notes"]   # a healthy job: no hang
