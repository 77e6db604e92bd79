"""commlib.profiling.diagnosis and `python -m commlib diagnose`: stragglers from constructed calls, the model, the real
2x A100 trace, a live CPU run with a straggler injected, the CLI's bad inputs and its --json keys."""

import json
import os
import subprocess
import sys

import cloudpickle
import pytest

import commlib as cl
from commlib import cost
from commlib import plan
from commlib import topology as topo
from commlib.profiling import diagnosis as td
from commlib.profiling import model as md
from commlib.profiling.report.words import flag_text
from commlib.profiling.report import diagnosis as rp
from commlib.profiling import stragglers
from commlib.profiling import traces as tr

cloudpickle.register_pickle_by_value(sys.modules[__name__])
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL = os.path.join(ROOT, "assets", "traces", "a100_2gpu_rank0.json.gz")
assert REAL == tr.SAMPLE


def _cause(*args, **kwargs) -> str:
    return flag_text(md.cause(*args, **kwargs))   # the cause's record, in the report's words


def rank_trace(rank, durations, starts=None, op="all_reduce", world=4):
    starts = starts or [1000.0 * i for i in range(len(durations))]
    calls = [tr.Call(rank, op, "0", world, 1 << 20, "float32", s, d, None, None, None)
             for s, d in zip(starts, durations)]
    return tr.RankTrace(f"rank{rank}.json", rank, world, "gloo", None, calls, [], (0.0, 5000.0))


def test_the_rank_with_the_shortest_call_arrived_last_and_is_charged_the_others_wait():
    # call 1: rank 3 arrives 300 us late (its call lasts 100, the others' 400); call 0 balanced
    ranks = [rank_trace(r, [100.0, 400.0 if r != 3 else 100.0]) for r in range(4)]
    found = stragglers.find(ranks)
    late, waits = found["stragglers"], found["waits"]
    assert late == [{"rank": 3, "group": "0", "group_size": 4, "delay_us": 900.0, "own_us": 900.0,
                                  "behind": [], "calls": 1, "root": True, "chain": []}]
    assert waits[(0, 1000.0)] == (300.0, 3) and waits[(3, 1000.0)] == (0.0, 3)


def test_no_straggler_when_every_rank_arrives_together():
    ranks = [rank_trace(r, [100.0, 200.0, 150.0]) for r in range(4)]
    assert stragglers.find(ranks)["stragglers"] == []
    # clocks are never compared: the same calls with each rank's clock shifted give the same answer
    shifted = [rank_trace(r, [100.0, 400.0 if r != 3 else 100.0], [1e6 * r, 1e6 * r + 1000]) for r in range(4)]
    assert stragglers.find(shifted)["stragglers"] == [{"rank": 3, "group": "0", "group_size": 4, "delay_us": 900.0, "own_us": 900.0,
                                  "behind": [], "calls": 1, "root": True, "chain": []}]


def test_matching_is_per_group_and_in_order_and_leaves_point_to_point_out():
    a = rank_trace(0, [10.0, 50.0])
    b = rank_trace(1, [10.0, 20.0])
    p2p = tr.Call(0, "send", "0", 2, 8, "float32", 5000.0, 99.0, None, None, None)
    a.calls.append(p2p)
    groups = stragglers.matched([a, b])
    assert [[c.duration_us for c in g] for g in groups] == [[10.0, 10.0], [50.0, 20.0]]


def test_model_is_topology_multi_ring_on_the_preset_at_achievable_speeds():
    hw = plan.hardware("dgx_h100", 2, achievable=True)
    call = tr.Call(0, "all_reduce", "0", 16, 1 << 28, "bfloat16", 0.0, 1.0, None, None, None)
    m = md.model(call, hw)
    expected = topo.collective_time("all_reduce", 1 << 28, plan.group_topology(hw, 16, 1), "multi_ring")
    assert m["time_s"] == expected
    bcast = tr.Call(0, "broadcast", "0", 8, 1 << 20, "float32", 0.0, 1.0, None, None, None)
    assert md.model(bcast, hw)["time_s"] == cost.collective_time("broadcast", 1 << 20, 8, hw.intra)
    assert md.model(tr.Call(0, "barrier", "0", 8, None, None, 0.0, 1.0, None, None, None), hw) is None


def test_real_trace_report_busbw_model_and_flags():
    report = td.diagnose([REAL])
    assert report["hardware"] == "dgx_a100" and report["world_size"] == 2 and report["ranks"] == [0]
    c = next(c for c in report["calls"] if c["start_us"] == 4458677009853.422)
    algbw = 26550272 / 2636.669e-6 / 1e9          # hand count: bytes / kernel duration
    assert c["algbw_GBps"] == pytest.approx(algbw, rel=1e-12)
    assert c["busbw_GBps"] == pytest.approx(algbw * 2 * (2 - 1) / 2, rel=1e-12)   # nccl-tests, p = 2
    assert (c["algorithm"], c["protocol"], c["dtype"], c["group_size"]) == ("ring", None, "float32", 2)
    hw = plan.hardware("dgx_a100", 1, achievable=True)
    model_s = topo.collective_time("all_reduce", 26550272, plan.group_topology(hw, 2, 1), "multi_ring")
    assert c["model_ratio"] == pytest.approx(2636.669e-6 / model_s, rel=1e-12) and c["model_ratio"] > 10
    assert flag_text(c["flag"]).startswith("busbw far below the link's")
    assert report["stragglers"] == [] and "1 of 2 ranks" in rp.json_report(report)["notes"][0]
    o = report["overlap"][0]
    assert o["comm_us"] == pytest.approx(sum(c["duration_us"] for c in report["calls"]))   # never two at once
    assert o["hidden_us"] + o["exposed_us"] == pytest.approx(o["comm_us"])
    text = rp.format_report(report)
    assert max(len(line) for line in text.splitlines()) < 100 and "all_reduce" in text


def _step(extra):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    x = torch.ones(1 << 14)
    for _ in range(2):
        torch.mm(torch.ones(32, 32), torch.ones(32, 32))
        dist.all_reduce(x)
    p = dist.get_world_size()
    dist.all_gather_single(torch.empty(p * 1024), torch.ones(1024))
    dist.reduce_scatter_single(torch.empty(1024, dtype=torch.float64), torch.ones(p * 1024, dtype=torch.float64))
    dist.broadcast(torch.ones(100, dtype=torch.bfloat16), src=0)


def _record(folder, late_rank):
    return tr.record(_step, folder + "/rank{rank}.json", None, late_rank=late_rank, late_s=0.4)


def test_live_cpu_run_names_the_injected_straggler(tmp_path):
    with cl.Cluster(world_size=3, timeout=120) as c:
        paths = c.run(_record, str(tmp_path), 1)
    assert sorted(os.path.basename(p) for p in paths) == ["rank0.json", "rank1.json", "rank2.json"]
    report = td.diagnose(str(tmp_path))
    assert report["backend"] == "gloo" and report["world_size"] == 3
    # nccl-tests' bytes: the tensor; the gathered output; the full input (Gloo runs it as an all-reduce)
    assert sorted({(c["op"], c["bytes"], c["dtype"], c["group_size"]) for c in report["calls"]}) == [
        ("all_gather", 3 * 1024 * 4, "float32", 3), ("all_reduce", (1 << 14) * 4, "float32", 3),
        ("broadcast", 200, "bfloat16", 3), ("reduce_scatter", 3 * 1024 * 8, "float64", 3)]
    assert len(report["calls"]) == 3 * 5
    top = report["stragglers"][0]
    assert top["rank"] == 1          # the rank that slept; the others' wait is in their all_reduce
    assert top["delay_us"] >= 2 * 0.2e6
    waited = [c for c in report["calls"] if c["flag"] and c["flag"].get("rank") == 1]
    assert {c["rank"] for c in waited} == {0, 2}


def run_cli(*args):
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "commlib", "diagnose", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_cli_json_keys():
    p = run_cli(REAL, "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert {"world_size", "calls", "overlap", "stragglers"} <= set(out)
    keys = {"rank", "op", "bytes", "dtype", "group_size", "algorithm", "protocol", "start_us", "duration_us",
            "algbw_GBps", "busbw_GBps", "model_ratio"}
    assert all(keys <= set(c) for c in out["calls"]) and len(out["calls"]) == 21
    assert min(c["start_us"] for c in out["calls"]) == 0.0
    assert set(out["overlap"]["0"]) >= {"comm_us", "hidden_us", "exposed_us"}
    assert out["stragglers"] == []
    h = json.loads(run_cli(REAL, "--json", "--hardware", "dgx_h100").stdout)
    assert h["hardware"] == "dgx_h100" and h["calls"][5]["model_ratio"] > out["calls"][5]["model_ratio"]


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    from commlib.__main__ import main

    (tmp_path / "notes.json").write_text("hello")
    (tmp_path / "cut.json.gz").write_bytes(open(REAL, "rb").read()[:5000])
    (tmp_path / "empty").mkdir()
    other = tmp_path / "rank1.json"
    mm = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "dur": 2.0}
    other.write_text(json.dumps({"traceEvents": [mm], "distributedInfo": {"rank": 1, "world_size": 8}}))
    cases = [([str(tmp_path / "notes.json")], "notes.json: not a torch.profiler trace"),
             ([str(tmp_path / "cut.json.gz")], "cut.json.gz: truncated gzip file"),
             ([str(tmp_path / "empty")], "empty: a folder with no trace files"),
             ([str(tmp_path / "missing.json")], "missing.json: no such file"),
             ([REAL, str(other)], "rank1.json: from another job"),
             ([REAL, REAL], "rank 0 again"),
             ([REAL, "--hardware", "tpu"], "--hardware")]
    for args, words in cases:
        with pytest.raises(SystemExit) as e:
            main(["diagnose", *args])
        out, err = capsys.readouterr()
        assert e.value.code == 2 and out == "", args
        lines = err.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (args, err)
    p = run_cli(str(tmp_path / "cut.json.gz"))   # and from a real shell: no traceback
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def test_a_call_twice_as_slow_as_its_identical_twin_is_not_the_link():
    hw = plan.hardware("dgx_h100", 1, achievable=True)
    call = tr.Call(0, "all_reduce", "0", 8, 1 << 28, "bfloat16", 0.0, 9000.0, None, None, None)
    m = md.model(call, hw)
    assert _cause(call, 5.0, m, 0.0, None, 0.0, fastest_us=3000.0).startswith("3.0x its fastest identical call")
    assert _cause(call, 5.0, m, 0.0, None, 0.0, fastest_us=9000.0).startswith("busbw far below")
    assert _cause(call, 5.0, m, 8000.0, 3, 0.0, fastest_us=3000.0).startswith("waited 8000 us for rank 3")
    small = tr.Call(0, "all_reduce", "0", 8, 4096, "bfloat16", 0.0, 900.0, None, None, None)
    assert _cause(small, 50.0, md.model(small, hw), 0.0, None, 0.0).startswith("message too small")


def test_a_cpu_job_priced_on_gpu_hardware_gets_no_gpu_words_and_no_advice_to_give_hardware(tmp_path):
    """Issue 40: `diagnose --hardware dgx_h100` on a Gloo job said compute kernels 'share the GPU's SMs ... with
    NCCL', and 'no hardware model unless --hardware' though it was given."""
    from commlib.profiling.jobs import synthetic

    paths = synthetic.write_job(str(tmp_path), 2, 3_000, "cpu")
    priced = td.diagnose(paths, hardware="dgx_h100")
    text = rp.format_report(priced)
    said = rp.json_report(priced)
    flags = {c["flag"] for c in said["calls"] if c["flag"]}
    assert flags and priced["hardware"] == "dgx_h100"
    for word in ("GPU", "SMs", "NCCL", "kernel", "unless --hardware", "give --hardware"):
        assert word not in " ".join(flags) and word not in said["hardware_why"], word
    assert "(dgx_h100 (given); the traces are a CPU job's" in text
    plain = td.diagnose(paths)
    assert plain["hardware"] is None and rp.json_report(plain)["hardware_why"].endswith("--hardware PRESET prices the calls")
    call = tr.Call(0, "all_reduce", "0", 2, 64 << 20, "float32", 0.0, 1000.0, None, None, None)
    m = {"time_s": 1e-4, "latency_s": 1e-6}
    assert _cause(call, 10.0, m, 0.0, None, 900.0).startswith("other CPU ops ran beside it")
    assert "the backend's transport" in _cause(call, 10.0, m, 0.0, None, 0.0)
    gpu = tr.Call(0, "all_reduce", "0", 2, 64 << 20, "float32", 0.0, 1000.0, "ring", None, "ncclDevKernel_x")
    assert "GPU's SMs" in _cause(gpu, 10.0, m, 0.0, None, 900.0)
