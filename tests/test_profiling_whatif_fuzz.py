"""whatif on what a red team brought (issue 41, section 2) and on random scenarios (hypothesis): one line naming
the traces, or finite numbers; bounded work for tiny buckets; a regrouped bucket's share of the excess by bytes;
--compress 1 as no compression; calls without a model said, not claimed priced."""

import json
import math
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commlib import topology as topo
from commlib.profiling.replay import graph, whatif
from commlib.profiling.report import whatif as whatif_report
from commlib.profiling.jobs import synthetic
from commlib.profiling import traces as tr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H100 = topo.preset("dgx_h100", 1, achievable=True)


def _job(nbytes, excess_us, size=2):
    """`size` ranks: compute [0, 1000], one all-reduce of nbytes queued at 1000 lasting the model's time on one H100
    node (Gloo's flat ring) + excess_us, then compute for 1000 us more."""
    dur = whatif.price("all_reduce", nbytes, size, H100, "flat_ring") * 1e6 + excess_us if size > 1 else excess_us
    out = []
    for r in range(size):
        call = tr.Call(r, "all_reduce", "0", size, nbytes, "float32", 1000.0, dur, None, None, None)
        rt = tr.RankTrace(f"rank{r}.json", r, size, "gloo", None, [call], [(0.0, 1000.0), (1001 + dur, 2001 + dur)],
                          (0.0, 2001 + dur))
        rt.issued = {0: 1000.0}
        out.append(rt)
    return out


def _cli(*args):
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "commlib", "whatif", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_a_regrouped_bucket_carries_its_share_of_the_excess_by_bytes():
    # HTA's negative-queue trace: a 1.79 GB call 7.7 ms above its model, regrouped into 1 MiB buckets. Each bucket
    # carried the whole 7.7 ms (a 62 s step, 50x measured); by bytes they carry 7.7 ms between them
    n = 1_790_000_000
    ranks = _job(n, 7700.0)
    sc = whatif.Scenario(topology="dgx_h100", bucket_mb=1)
    g = graph.build(ranks)
    priced, said, _, _ = whatif._scenario(g, sc, H100, 2, frozenset(["0"]), {}, 0.0, None)
    new = [t for t, m in zip(priced.transfer, priced.sets)]
    sizes = [priced.ranks[p].calls[i].bytes for p, i in (m[0] for m in priced.sets)]
    assert len(new) == math.ceil(n / 2**20) and sum(sizes) == n
    models = sum(whatif.price("all_reduce", b, 2, H100, "flat_ring") * 1e6 for b in sizes)
    assert sum(new) == pytest.approx(models + 7700.0, rel=1e-9)
    report = whatif.whatif(ranks, [sc], measured="dgx_h100")
    # the buckets go out one after another from 1000 us (the traced call's gradients were all ready then), the
    # program waits for the last and computes its 1000 us more: 1708 buckets' latency, not 1708 x 7.7 ms
    assert report["scenarios"][-1]["step_us"] == pytest.approx(1000.0 + sum(new) + 1.0 + 1000.0, rel=1e-6)


def test_compress_1_is_no_compression_and_charges_no_codec():
    ranks = _job(64 << 20, 500.0)
    plain, one = whatif.whatif(ranks, [whatif.Scenario(topology="dgx_h100"),
                                       whatif.Scenario(topology="dgx_h100", compress=1)], measured="dgx_h100",
                               codec=1e-9)["scenarios"][2:]
    assert one["step_us"] == plain["step_us"]
    assert any("no compression, so no codec time" in a for a in one["assumptions"])


def test_calls_without_a_model_are_said_to_keep_their_time():
    ranks = _job(1 << 20, 100.0)
    for r in ranks:   # a trace that sizes none of its calls
        r.calls = [tr.Call(c.rank, c.op, c.group, c.group_size, None, None, c.start_us, c.duration_us, None, None,
                           None) for c in r.calls]
    report = whatif.whatif(ranks, [whatif.Scenario(topology="dgx_h100", nodes=16)], measured="dgx_h100")
    s = report["scenarios"][-1]
    assert s["step_us"] == pytest.approx(report["scenarios"][0]["step_us"])
    assert any("1 of 1 call(s) have no model" in a for a in s["assumptions"])
    one = whatif.whatif(_job(1 << 20, 100.0, size=1), [whatif.Scenario(topology="dgx_h100", nodes=16)])
    assert any(a.startswith("a one-rank job: its calls moved no data") for a in one["scenarios"][-1]["assumptions"])


def test_events_at_one_instant_give_a_zero_step_not_a_division_by_zero(tmp_path):
    synthetic.write_job(str(tmp_path), ranks=2, events=200, form="cpu")
    for r in range(2):
        path = tmp_path / f"rank{r}.json"
        data = json.loads(path.read_text())
        for e in data["traceEvents"]:
            e["ts"], e["dur"] = 1000.0, 0.0
        path.write_text(json.dumps(data))
    out = _cli(str(tmp_path), "--hardware", "dgx_h100")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert out.stdout.splitlines()[2].split()[1:3] == ["0.00", "-"]   # measured: 0 ms, no ratio to it
    json.loads(_cli(str(tmp_path), "--hardware", "dgx_h100", "--json").stdout)


@pytest.mark.parametrize("mb, says", [("1e-9", "bucket_mb must be a number >= 1/1024 (1 KiB), got 1e-09"),
                                      ("0.0001", "bucket_mb must be a number >= 1/1024 (1 KiB), got 0.0001"),
                                      ("0.001", "more than the 100000 the replay takes: choose larger buckets")])
def test_tiny_buckets_are_refused_in_one_line_before_any_work(tmp_path, mb, says):
    synthetic.write_job(str(tmp_path), ranks=2, events=400, form="cpu")
    for r in range(2):   # calls of 1.79 GB: 0.001 MiB buckets would be millions of calls
        path = tmp_path / f"rank{r}.json"
        data = json.loads(path.read_text())
        for e in data["traceEvents"]:
            if "Input Dims" in e.get("args", {}):
                e["args"]["Input Dims"] = [[[447_500_000]]] + e["args"]["Input Dims"][1:] \
                    if e["name"].startswith("c10d") else [[447_500_000]]
        path.write_text(json.dumps(data))
    out = _cli(str(tmp_path), "--hardware", "dgx_h100", "--bucket-mb", mb)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert says in out.stderr and str(tmp_path) in out.stderr


def test_errors_name_the_traces_and_an_impossible_world_size_is_not_a_nodes_error(tmp_path):
    synthetic.write_job(str(tmp_path), ranks=2, events=200, form="cpu")
    for r in range(2):
        path = tmp_path / f"rank{r}.json"
        data = json.loads(path.read_text())
        data["distributedInfo"]["world_size"] = 10**12
        path.write_text(json.dumps(data))
    out = _cli(str(tmp_path), "--hardware", "dgx_h100")   # no --nodes given: no word of nodes
    assert out.returncode == 2 and "nodes must be" not in out.stderr and len(out.stderr.splitlines()) == 1
    # the reader refuses it first (1 to 2^20 ranks, the most the model prices), naming the file and the field
    assert f"{tmp_path / 'rank0.json'}: distributedInfo.world_size is 1000000000000, not a number of ranks" \
        in out.stderr


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(mb=st.one_of(st.none(), st.floats(1 / 1024, 64)), compress=st.one_of(st.none(), st.floats(1, 100)),
       nodes=st.one_of(st.none(), st.integers(1, 8)), nbytes=st.integers(1, 1 << 28), excess=st.floats(0, 1e4))
def test_any_scenario_on_a_small_job_gives_finite_non_negative_figures(mb, compress, nodes, nbytes, excess):
    ranks = _job(nbytes, excess)
    sc = whatif.Scenario(topology="dgx_h100", bucket_mb=mb, compress=compress, nodes=nodes)
    try:
        report = whatif.whatif(ranks, [sc], measured="dgx_h100", codec=1e-9)
    except ValueError as e:   # too many buckets, said in one line naming the traces
        assert "\n" not in str(e) and "rank0.json" in str(e) and "more than the" in str(e)
        return
    out = whatif_report.json_report(report)
    json.dumps(out, allow_nan=False)
    for s in out["scenarios"]:
        assert math.isfinite(s["step_us"]) and s["step_us"] >= 0
        assert s["critical_path"]["compute_us"] + s["critical_path"]["comm_us"] <= s["step_us"] * (1 + 1e-9) + 1e-6
    if compress == 1 or compress is None:
        plain = whatif.whatif(ranks, [whatif.Scenario(topology="dgx_h100", bucket_mb=mb, nodes=nodes)],
                              measured="dgx_h100", codec=1e-9)
        assert report["scenarios"][-1]["step_us"] == plain["scenarios"][-1]["step_us"]


def test_the_critical_path_is_cut_at_the_ending_ranks_start_never_longer_than_the_step():
    # issue 40: critical_path.compute_us 735,413 > step_us 731,352. Rank 0 (the longest: 10 ms) waits at 50 for
    # the all-reduce rank 1 joins at 75; rank 1 began 5 ms before rank 0 did. Walking back from rank 0's end
    # through rank 1 to rank 1's start made a path of 15 ms; cut at rank 0's start it is 10 ms less 1 us
    ranks = []
    for r, (first, start, last_end) in enumerate((((0.0, 50.0), 30.0, 10_000.0), ((-5000.0, 70.0), 75.0, 100.0))):
        call = tr.Call(r, "all_reduce", "0", 2, 1 << 20, "float32", start, 90.0 - start, None, None, None)
        rt = tr.RankTrace(f"rank{r}.json", r, 2, "gloo", None, [call], [first, (91.0, last_end)],
                          (first[0], last_end))
        rt.issued = {0: start}
        ranks.append(rt)
    out = graph.replay(graph.build(ranks))
    assert out["step_us"] == pytest.approx(10_000.0)
    path = out["critical_path"]
    assert path["comm_us"] == pytest.approx(15.0) and path["compute_us"] == pytest.approx(9909.0 + 75.0)
    assert path["compute_us"] + path["comm_us"] <= out["step_us"]
