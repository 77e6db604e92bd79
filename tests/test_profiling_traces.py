"""commlib.profiling.traces: NCCL kernel names, dtypes, nccl-tests bytes, and the real 2x A100 trace counted by hand."""

import copy
import gzip
import json
import os

import pytest

from commlib.profiling import calls
from commlib.profiling.read import kernels
from commlib.profiling import traces as tr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL = os.path.join(ROOT, "assets", "traces", "a100_2gpu_rank0.json.gz")
assert REAL == tr.SAMPLE


@pytest.mark.parametrize("name, op, algorithm, form", [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce", "ring", "old"),
    ("ncclKernel_AllReduce_TREE_LL_Sum_half(ncclDevComm*, unsigned long, ncclWork*)", "all_reduce", "tree", "old"),
    ("ncclKernel_AllReduce_NVLS_TREE_LL_Sum_float", "all_reduce", "nvls_tree", "old"),
    ("ncclKernel_ReduceScatter_COLLNET_DIRECT_LL_Sum_bfloat16", "reduce_scatter", "collnet_direct", "old"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "send_recv", None, "old"),
    # new form: only TREE is proven; RING_LL is the kernel every other algorithm and protocol runs in
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce", None, "new"),
    ("ncclDevKernel_AllReduce_Sum_bf16_TREE_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce", "tree", "new"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather", None, "new"),
    ("ncclDevKernel_ReduceScatter_Sum_u32_RING_LL", "reduce_scatter", None, "new"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv", None, "new"),
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", None, None, "new"),
    ("void at::native::vectorized_elementwise_kernel<4>", None, None, None),
])
def test_kernel_names_prove_the_algorithm_only_where_nccl_specialises_it(name, op, algorithm, form):
    info = kernels.kernel_info(name)
    assert (info["op"], info["algorithm"], info["form"], info["protocol"]) == (op, algorithm, form, None)
    assert info["since"] == {"old": None, "new": "2.19", None: None}[form]


@pytest.mark.parametrize("name, op, algorithm, protocol, since", [
    # NCCL 2.27's names (v2.27.3 src/device/symmetric/generate.py, kernel_cname)
    ("ncclSymDevKernel_AllReduce_AGxLL_R_sum_f32(ncclSymDevArgs)", "all_reduce", "sym_AGxLL_R", "ll", "2.27"),
    ("ncclSymDevKernel_AllGather_STMC(ncclSymDevArgs)", "all_gather", "sym_STMC", None, "2.27"),
    # renamed ncclSymkDevKernel_ in 2.28; the algorithms of v2.30.7
    ("ncclSymkDevKernel_AllReduce_AGxLLMC_R_sum_bf16(ncclSymkDevWorkArgs4K)", "all_reduce", "sym_AGxLLMC_R", "ll", "2.28"),
    ("ncclSymkDevKernel_AllReduce_RSxLDMC_AGxSTMC_sum_f16", "all_reduce", "sym_RSxLDMC_AGxSTMC", None, "2.28"),
    ("ncclSymkDevKernel_AllReduce_RSxTmaLD_AGxTmaST_sum_f8e4m3", "all_reduce", "sym_RSxTmaLD_AGxTmaST", None, "2.28"),
    ("ncclSymkDevKernel_AllGather_LL", "all_gather", "sym_LL", "ll", "2.28"),
    ("ncclSymkDevKernel_AllGather_RailRing_LsaSTMC", "all_gather", "sym_RailRing_LsaSTMC", None, "2.28"),
    ("ncclSymkDevKernel_ReduceScatter_LL_avg_f32", "reduce_scatter", "sym_LL", "ll", "2.28"),
    ("ncclSymkDevKernel_ReduceScatter_RailA2A_LsaLDMC_sum_f8e5m2", "reduce_scatter", "sym_RailA2A_LsaLDMC", None,
     "2.28"),
])
def test_symmetric_kernels_name_their_algorithm_and_ll_where_they_use_it(name, op, algorithm, protocol, since):
    assert kernels.kernel_info(name) == {"op": op, "algorithm": algorithm, "protocol": protocol,
                                         "form": "symmetric", "since": since}


def test_a_symmetric_kernel_in_a_trace_gives_its_call_the_algorithm_and_protocol(tmp_path):
    import json

    kernel = {"ph": "X", "cat": "kernel", "name": "ncclSymkDevKernel_AllReduce_AGxLL_R_sum_bf16(ncclSymkDevWorkArgs4K)",
              "ts": 10.0, "dur": 8.0, "pid": 0, "tid": 7,
              "args": {"Collective name": "allreduce", "In msg nelems": 4096, "Out msg nelems": 4096, "Group size": 8,
                       "dtype": "BFloat16", "Process Group Name": "0"}}
    info = {"rank": 0, "world_size": 8, "backend": "nccl",
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 8, "ranks": list(range(8))}]}
    (tmp_path / "rank0.json").write_text(json.dumps({"distributedInfo": info, "traceEvents": [kernel]}))
    (call,) = tr.load([str(tmp_path / "rank0.json")])[0].calls
    assert (call.op, call.algorithm, call.protocol, call.bytes) == ("all_reduce", "sym_AGxLL_R", "ll", 8192)


def test_dtypes_and_nccl_tests_bytes():
    assert calls.dtype_of("Float") == ("float32", 4) and calls.dtype_of("BFloat16") == ("bfloat16", 2)
    assert calls.dtype_of("Long") == ("int64", 8) and calls.dtype_of("unsigned char") == ("uint8", 1)
    assert calls.dtype_of("what") == (None, None) and calls.dtype_of(None) == (None, None)
    # all_gather: the gathered output; reduce_scatter: the full input; all_reduce: the tensor
    assert calls.nccl_bytes("all_gather", 1024, 4096, 2) == 8192
    assert calls.nccl_bytes("reduce_scatter", 4096, 1024, 2) == 8192
    assert calls.nccl_bytes("all_reduce", 1000, 1000, 4) == 4000
    assert calls.nccl_bytes("all_reduce", 1000, 1000, None) is None


def test_real_trace_against_a_hand_count_of_its_raw_events():
    """Hand count from the raw JSON (assets/traces/a100_2gpu_rank0.json.gz): 21 kernels named ncclKernel_*, on
    stream 40; 15 'ncclKernel_AllReduce_RING_LL_Sum_float' (three DDP steps of five buckets: In msg nelems
    2049000, 7875584, 6563840, 6637568, 2431040, dtype Float, Group size 2) and 6
    'ncclKernel_Broadcast_RING_LL_Sum_int8_t' (53120 Float and 53 Long, three times). The kernel at ts
    4458677009853.422 lasts 2636.669 us with In msg nelems 6637568 Float."""
    r = tr.read(REAL)
    assert (r.rank, r.world_size, r.backend, r.device) == (0, 2, "nccl", "NVIDIA A100-PG509-200")
    assert len(r.calls) == 21
    assert [c.op for c in r.calls].count("all_reduce") == 15 and [c.op for c in r.calls].count("broadcast") == 6
    sizes = [c.bytes for c in r.calls if c.op == "all_reduce"][:5]
    assert sizes == [2049000 * 4, 7875584 * 4, 6563840 * 4, 6637568 * 4, 2431040 * 4]
    assert sorted({(c.bytes, c.dtype) for c in r.calls if c.op == "broadcast"}) == [(424, "int64"), (212480, "float32")]
    assert {(c.algorithm, c.protocol, c.group, c.group_size) for c in r.calls} == {("ring", None, "0", 2)}
    c = next(c for c in r.calls if c.start_us == 4458677009853.422)
    assert (c.op, c.bytes, c.dtype, c.duration_us) == ("all_reduce", 26550272, "float32", 2636.669)
    assert len(r.compute) == 2700 - 21   # every other kernel is compute


def _rewrite(tmp_path, name, change):
    with gzip.open(REAL, "rt") as f:
        data = json.load(f)
    change(data)
    out = tmp_path / name
    out.write_text(json.dumps(data))
    return str(out)


def test_older_traces_without_kernel_arguments_are_correlated_through_the_launch(tmp_path):
    def strip(data):  # as torch < 2.2 wrote them: the arguments only on the CPU op
        for e in data["traceEvents"]:
            if e.get("cat") == "kernel":
                for key in ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
                            "Process Group Name", "External id"):
                    e["args"].pop(key, None)
    old = tr.read(_rewrite(tmp_path, "rank0.json", strip))
    new = tr.read(REAL)
    assert [(c.op, c.bytes, c.dtype, c.group_size) for c in old.calls] == \
           [(c.op, c.bytes, c.dtype, c.group_size) for c in new.calls]


def test_traces_of_two_jobs_and_two_files_for_one_rank_are_refused(tmp_path):
    other = _rewrite(tmp_path, "rank1.json", lambda d: d["distributedInfo"].update(world_size=4, rank=1))
    with pytest.raises(tr.TraceError, match="another job.*world size 4"):
        tr.load([REAL, other])
    again = _rewrite(tmp_path, "copy.json", lambda d: None)
    with pytest.raises(tr.TraceError, match="rank 0 again"):
        tr.load([REAL, again])


def test_bad_files_name_the_file_and_the_problem(tmp_path):
    (tmp_path / "notes.json").write_text("hello")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "cut.json.gz").write_bytes(open(REAL, "rb").read()[:5000])
    (tmp_path / "empty").mkdir()
    cases = {"notes.json": "not a torch.profiler trace", "list.json": "no 'traceEvents'",
             "cut.json.gz": "truncated gzip file", "empty": "folder with no trace files",
             "missing.json": "no such file"}
    for name, problem in cases.items():
        with pytest.raises(tr.TraceError) as e:
            tr.load([str(tmp_path / name)])
        assert str(e.value).startswith(str(tmp_path / name) + ": ") and problem in str(e.value)


def test_the_shipped_trace_is_what_the_committed_trim_script_keeps():
    import importlib.util

    spec = importlib.util.spec_from_file_location("trim_trace", os.path.join(ROOT, "assets", "traces", "trim_trace.py"))
    trim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trim)
    with gzip.open(REAL, "rt") as f:
        data = json.load(f)
    assert trim.trim(copy.deepcopy(data)) == data            # trimming again keeps every event
    events = data["traceEvents"]
    assert len(events) == 3915 and sum(e.get("cat") == "kernel" for e in events) == 2700
    assert data["distributedInfo"]["nccl_version"] == "2.17.1"
