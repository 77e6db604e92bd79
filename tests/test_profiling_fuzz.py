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

from commlib.profiling import diagnosis as td
from commlib.profiling.report import diagnosis as rp
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
    out = rp.json_report(report)
    json.dumps(out, allow_nan=False)   # strict JSON
    _numbers({k: v for k, v in out.items() if k != "ranks"})
    rp.format_report(report)


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


def _gloo_base():
    import tempfile

    from commlib.profiling.jobs import synthetic
    with tempfile.TemporaryDirectory() as d:
        data = json.load(open(synthetic.write_rank(os.path.join(d, "rank0.json"), 0, 2, 300, form="cpu")))
    return data


BASES["Gloo (CPU)"] = _gloo_base()


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pick=st.integers(0, 10**6), field=st.sampled_from(["ts", "dur", "name", "cat", "args", "Input Dims",
                                                           "Input type", "info.rank", "info.world_size"]),
       value=ODD, drop=st.booleans(), cut=st.one_of(st.none(), st.floats(0.0, 1.0)))
def test_a_mutated_gloo_trace_is_refused_in_one_line_or_reported_in_finite_non_negative_numbers(
        tmp_path, pick, field, value, drop, cut):
    data = json.loads(json.dumps(BASES["Gloo (CPU)"]))
    events = data["traceEvents"]
    comm = [e for e in events if e.get("name", "").startswith(("gloo:", "c10d::"))]
    e = comm[pick % len(comm)]
    target = e if field in ("ts", "dur", "name", "cat", "args") else e.setdefault("args", {})
    if field.startswith("info."):
        target, field = data.setdefault("distributedInfo", {}), field[5:]
    if drop:
        target.pop(field, None)
    else:
        target[field] = value
    text = json.dumps(data)
    (tmp_path / "rank0.json").write_text(text[:int(cut * len(text))] if cut is not None else text)
    _check(tmp_path / "rank0.json")


def _red_team(tmp_path, case):
    """The red team's files (issue 41), each one rank of a 2-rank A100 job; -> its path."""
    data = json.loads(json.dumps(BASES["kernel args (A100)"]))
    comm = next(e for e in data["traceEvents"] if "In msg nelems" in e.get("args", {}))
    raw = None
    if case == "nested 1500 deep":
        comm["args"]["Input Dims"] = "NEST"
        raw = json.dumps(data).replace('"NEST"', "[" * 1500 + "]" * 1500).encode()
    elif case == "invalid UTF-8":
        comm["name"] = "record_param_commsXX"
        raw = json.dumps(data).encode().replace(b"commsXX", b"comms\xff\xfe")
    elif case == "nelems 10^400":
        comm["args"]["In msg nelems"] = "BIG"
        raw = json.dumps(data).replace('"BIG"', "1" + "0" * 400).encode()
    elif case.startswith("nelems "):
        comm["args"]["In msg nelems"] = {"²": "²", "5000 digits": "9" * 5000, "10^30": 10**30, "2^80": 2**80}[case[7:]]
    elif case.startswith("world_size "):
        data["distributedInfo"]["world_size"] = {"10^12": 10**12, "²": "²"}[case[11:]]
    elif case == "rank 7 of 2":
        data["distributedInfo"]["rank"] = 7
    elif case.startswith("ts "):
        comm["ts"] = float(case[3:])
    elif case == "a name with a newline and an ANSI escape":   # a kernel's name, read with its arguments
        kernel = next(e for e in data["traceEvents"] if e.get("cat") == "kernel" and "In msg nelems" in e["args"])
        kernel["name"] = "nccl\n\x1b[2J"
        kernel["args"]["Group size"] = "x"
    path = tmp_path / "rank0.json"
    path.write_bytes(raw if raw is not None else json.dumps(data).encode())
    return path


@pytest.mark.parametrize("case, words", [
    ("nested 1500 deep", "JSON nested more than"), ("invalid UTF-8", "not UTF-8 text: byte b'\\xff'"),
    ("nelems ²", "field 'In msg nelems' is '²'"), ("nelems 5000 digits", "field 'In msg nelems' is '999"),
    ("nelems 10^400", "field 'In msg nelems' is 1000"), ("nelems 10^30", "field 'In msg nelems' is 10" + "0" * 29),
    ("nelems 2^80", "field 'In msg nelems' is 1208925819614629174706176"),
    ("world_size 10^12", "distributedInfo.world_size is 1000000000000, not a number of ranks (1 to 1048576)"),
    ("world_size ²", "distributedInfo.world_size is '²'"),
    ("rank 7 of 2", "rank 7 (distributedInfo.rank, or the file's name) is not a rank of its 2-rank job"),
    ("ts 1.7e308", "field 'ts' is 1.7e+308"), ("ts -1.7e308", "field 'ts' is -1.7e+308"),
    ("a name with a newline and an ANSI escape", "(nccl\\n\\x1b[2J): field 'Group size' is 'x'"),
])
def test_what_the_red_team_sent_is_one_line_naming_the_file_and_exit_2(tmp_path, capsys, case, words):
    from commlib.__main__ import main

    path = _red_team(tmp_path, case)
    for extra in ([], ["--json"]):
        with pytest.raises(SystemExit) as e:
            main(["diagnose", str(path), *extra])
        out, err = capsys.readouterr()
        assert e.value.code == 2 and out == "" and "Traceback" not in err, (case, err)
        assert len(err.strip().splitlines()) == 1 and f"{path}: " in err and words in err, (case, err)
        assert "\x1b" not in err


def test_a_file_name_with_a_newline_and_an_escape_is_escaped_in_the_one_line(tmp_path, capsys):
    from commlib.__main__ import main

    folder = tmp_path / "odd\n\x1b[31m"
    folder.mkdir()
    (folder / "rank0.json").write_text("[1]")
    with pytest.raises(SystemExit):
        main(["diagnose", str(folder / "rank0.json")])
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "odd\\n\\x1b[31m/rank0.json: " in err and "\x1b" not in err
