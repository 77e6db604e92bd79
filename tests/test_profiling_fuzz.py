"""diagnose on mutated real traces (hypothesis): odd field types, missing keys, negative and huge values,
truncation. Whatever the file, diagnose either refuses it in one line naming it (TraceError) or reports only
finite, non-negative numbers, and the CLI never prints a traceback; named odd fields get their own checks."""

import gzip
import json
import math
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commlib.profiling import diagnose as td
from commlib.profiling import traces as tr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEEP = 400   # events of each real trace kept as a base: every kind the reader reads, small enough to fuzz fast


def _base(name):
    data = json.load(gzip.open(os.path.join(ROOT, "assets", "traces", name)))
    events = data["traceEvents"]
    comm = [i for i, e in enumerate(events) if e.get("name", "").startswith(("nccl", "record_param", "c10d"))]
    keep = sorted(set(range(min(KEEP, len(events)))) | set(comm[:40]))
    data["traceEvents"] = [events[i] for i in keep]
    return data


BASES = {"kernel args (A100)": _base("a100_2gpu_rank0.json.gz"), "shapes only (128 ranks)":
         _base("hta_sampled_rank-0.json.gz")}
ODD = st.one_of(st.none(), st.text(max_size=4), st.integers(-10**20, 10**20), st.just(1e308), st.just(-1.0),
                st.floats(allow_nan=False, allow_infinity=False), st.lists(st.integers(-3, 3), max_size=3),
                st.just({"x": 1}), st.sampled_from(["2", "-3", "8.0", "[0, 1]", "Float", ""]))
FIELDS = ["ts", "dur", "name", "cat", "args", "Collective name", "In msg nelems", "Out msg nelems", "Group size",
          "dtype", "Input Dims", "Input type", "Process Group Name", "Process Group Ranks", "correlation",
          "External id", "stream", "info.rank", "info.world_size", "info.pg_config", "info.backend", "kernel.name"]


def _numbers(x, where="report"):
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return
    if isinstance(x, (int, float)):
        assert math.isfinite(x) and x >= 0, (where, x)
    elif isinstance(x, dict):
        for k, v in x.items():
            _numbers(v, f"{where}.{k}")
    elif isinstance(x, (list, tuple)):
        for v in x:
            _numbers(v, where)


def _check(path):
    try:
        report = td.diagnose([str(path)])
    except tr.TraceError as e:
        assert "\n" not in str(e) and str(e).startswith(str(path)), str(e)
        return
    out = td.json_report(report)
    json.dumps(out, allow_nan=False)   # strict JSON
    _numbers({k: v for k, v in out.items() if k != "ranks"})
    td.format_report(report)


@settings(max_examples=60, deadline=None, derandomize=True,   # the same examples every run: never flaky
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from(sorted(BASES)), pick=st.integers(0, 10**6), field=st.sampled_from(FIELDS),
       value=ODD, drop=st.booleans(), cut=st.one_of(st.none(), st.floats(0.0, 1.0)))
def test_a_mutated_real_trace_is_refused_in_one_line_or_reported_in_finite_non_negative_numbers(
        tmp_path, base, pick, field, value, drop, cut):
    data = json.loads(json.dumps(BASES[base]))
    events = data["traceEvents"]
    comm = [e for e in events if e.get("name", "").startswith(("nccl", "record_param", "c10d"))]
    e = (comm or events)[pick % len(comm or events)]
    target = e if field in ("ts", "dur", "name", "cat", "args") else e.setdefault("args", {})
    if field.startswith("info."):   # the header: distributedInfo's fields
        target, field = data.setdefault("distributedInfo", {}), field[5:]
    elif field == "kernel.name":    # a kernel's name: the op and algorithm are read from it
        kernels = [k for k in events if k.get("cat") == "kernel"] or events
        target, field = kernels[pick % len(kernels)], "name"
    if not isinstance(target, dict):
        target = e
    if drop:
        target.pop(field, None)
    else:
        target[field] = value
    text = json.dumps(data)
    if cut is not None:
        text = text[:int(cut * len(text))]
    path = tmp_path / "rank0.json"
    path.write_text(text)
    _check(path)


@pytest.mark.parametrize("base, op, field, value, expect", [
    ("kernel args (A100)", "record_param_comms", "In msg nelems", "abc", "field 'In msg nelems' is 'abc'"),
    ("kernel args (A100)", "record_param_comms", "Group size", -3, "field 'Group size' is -3"),
    ("shapes only (128 ranks)", "nccl:all_reduce", "Input Dims", [["x"]], "field 'Input Dims' is 'x'"),
])
def test_an_odd_field_is_one_line_naming_the_file_the_event_and_the_field(tmp_path, base, op, field, value, expect):
    data = json.loads(json.dumps(BASES[base]))
    i, e = next((i, e) for i, e in enumerate(data["traceEvents"]) if e.get("name") == op)
    e["args"][field] = value
    (tmp_path / "rank0.json").write_text(json.dumps(data))
    with pytest.raises(tr.TraceError) as err:
        td.diagnose([str(tmp_path / "rank0.json")])
    assert f"rank0.json: traceEvents[{i}] ({op}): {expect}" in str(err.value)


def test_numbers_written_as_strings_are_read_and_negative_durations_refused(tmp_path):
    data = json.loads(json.dumps(BASES["kernel args (A100)"]))
    data["distributedInfo"]["world_size"] = "2"
    data["distributedInfo"]["rank"] = "0"
    for e in data["traceEvents"]:
        if "In msg nelems" in e.get("args", {}):
            e["args"]["In msg nelems"] = str(e["args"]["In msg nelems"])
    (tmp_path / "rank0.json").write_text(json.dumps(data))
    as_strings = td.diagnose([str(tmp_path / "rank0.json")])
    data2 = json.loads(json.dumps(BASES["kernel args (A100)"]))
    (tmp_path / "b" ).mkdir()
    (tmp_path / "b" / "rank0.json").write_text(json.dumps(data2))
    plain = td.diagnose([str(tmp_path / "b" / "rank0.json")])
    assert as_strings["world_size"] == 2 and [c["bytes"] for c in as_strings["calls"]] == \
        [c["bytes"] for c in plain["calls"]]
    k = next(i for i, e in enumerate(data2["traceEvents"]) if e.get("cat") == "kernel")
    data2["traceEvents"][k]["dur"] = -5
    (tmp_path / "b" / "rank0.json").write_text(json.dumps(data2))
    with pytest.raises(tr.TraceError, match=rf"traceEvents\[{k}\] .*field 'dur' is -5"):
        td.diagnose([str(tmp_path / "b" / "rank0.json")])


def test_cli_json_is_strict_and_odd_input_is_one_line_exit_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT}
    bad = tmp_path / "rank0.json"
    data = json.loads(json.dumps(BASES["kernel args (A100)"]))
    data["distributedInfo"]["world_size"] = "eight"
    bad.write_text(json.dumps(data))
    out = subprocess.run([sys.executable, "-m", "commlib", "diagnose", str(bad), "--json"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "distributedInfo.world_size is 'eight'" in out.stderr
