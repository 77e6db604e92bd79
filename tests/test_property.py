"""Out-of-range arguments to every public function of commlib.parallel (the live runs, Comm), commlib.compression and
the command line's commands raise only the project's own errors, whose one line names the argument (hypothesis).

One argument at a time is drawn out of its range (0, negative, huge, NaN, the wrong type); the others keep their
defaults. A function may also accept what it is given: what it may not do is raise a raw torch or Python error
(a shape mismatch, "Gloo pair not connected", an AttributeError) or say nothing about what was wrong.
"""

import contextlib
import io
import math
import sys

import cloudpickle
import hypothesis.strategies as st
import pytest
import torch
from hypothesis import HealthCheck, given, settings

import commlib as cl
from commlib import compression as cp

cloudpickle.register_pickle_by_value(sys.modules[__name__])

BAD = {  # kind of parameter -> values out of its range, or of the wrong type
    "int": [0, -1, 10**9, 2**70, 2.5, math.nan, "4", None, True, [4]],
    "count": [0, -1, 10**9, 2**70, 2.5, math.nan, "4", None, True],  # a size that must be >= 1
    "bool": ["yes", 2, None],
    "str": ["nope", 3, None, ["ring"]],
    "float": [-1.0, math.nan, math.inf, "fast", None],
}

# live run -> (required arguments, {parameter: kind}); every run on a world of 1 rank
LIVE = {
    "start_broadcast": ({}, {"impl": "str"}),
    "sharded_training": ({"stage": 1}, {"stage": "int", "prefetch": "bool", "impl": "str", "steps": "count",
                                        "batch": "count", "lr": "float", "sizes": "int"}),
    "tensor_parallel_block": ({"t": 1}, {"t": "count", "sequence_parallel": "bool", "impl": "str", "seq": "count",
                                         "batch": "count", "hidden": "count", "heads": "count"}),
    "pipelined": ({"pp": 1, "kind": "1f1b", "microbatches": 2},
                  {"pp": "count", "kind": "str", "microbatches": "count", "rows": "count", "hidden": "count",
                   "layers": "count"}),
    "expert_parallel": ({"ep": 1, "topk": 1}, {"ep": "count", "topk": "count", "impl": "str", "imbalance": "float",
                                               "tokens": "count", "hidden": "count", "experts": "count"}),
    "context_parallel_attention": ({"cp": 1}, {"cp": "count", "causal": "bool", "balance": "str", "variant": "str",
                                               "overlap": "bool", "batch": "count", "heads": "count",
                                               "seq": "count", "head_dim": "count"}),
    "collective_matmul": ({"tp": 1}, {"tp": "count", "overlap": "bool", "rows": "count", "hidden": "count",
                                      "cols": "count"}),
    "mesh_training": ({"dp": 1, "tp": 1}, {"dp": "count", "tp": "count", "steps": "count", "batch": "count",
                                           "seq": "count", "hidden": "count", "heads": "count", "table": "bool"}),
    "ring_overlap": ({}, {"kind": "str", "bandwidth": "float", "latency": "float", "overlap": "bool",
                          "balance": "str", "seq": "count", "heads": "count", "head_dim": "count", "rows": "count",
                          "hidden": "count", "repeats": "count", "pace": "bool"}),
}
LIVE_CASES = [(fn, name, kind) for fn, (_, params) in LIVE.items() for name, kind in params.items()]


def named_error(call, name: str) -> str | None:
    """None if call() returns or raises a ValueError/TypeError naming `name`; else what it did instead."""
    try:
        call()
    except (ValueError, TypeError) as e:
        if name not in str(e) or len(str(e).splitlines()) != 1:
            return f"{type(e).__name__} not naming {name!r} in one line: {e}"
    except Exception as e:  # noqa: BLE001  (what the test is about)
        return f"{type(e).__name__}: {e}"
    return None


def probe_live(max_examples: int) -> list[str]:
    """Inside a rank: hypothesis draws (live run, one parameter, a bad value) -> what went wrong, if anything."""
    import torch

    from commlib.parallel import Comm, live

    torch.set_num_threads(1)
    problems = []

    @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=st.sampled_from(LIVE_CASES), data=st.data())
    def probe(case, data):
        fn, name, kind = case
        bad = data.draw(st.sampled_from(BAD[kind]))
        kwargs = {**LIVE[fn][0], name: [bad] if name == "sizes" else bad}
        problem = named_error(lambda: getattr(live, fn)(**kwargs), name)
        if problem:
            problems.append(f"live.{fn}({name}={bad!r}): {problem}")

    probe()
    for bad in BAD["str"]:  # Comm, the one name commlib.parallel exports
        problem = named_error(lambda: Comm(impl=bad), "impl")
        if problem:
            problems.append(f"Comm(impl={bad!r}): {problem}")
    return problems


def test_live_runs_name_every_out_of_range_argument():
    with cl.Cluster(world_size=1, timeout=120) as c:
        problems = c.run(probe_live, 80)[0]
    assert problems == [], "\n".join(problems)


# compression: function -> (required arguments, {parameter: kind}); pure or one-process
_T = torch.ones(8)
COMPRESSION = {
    "bytes_per_rank": ({"method": "topk", "shape": (64, 32), "world_size": 4, "fraction": 0.1},
                       {"method": "str", "world_size": "count", "itemsize": "count", "fraction": "float",
                        "shape": "int"}),
    "collectives": ({"method": "powersgd", "shape": (64, 32), "world_size": 4, "rank": 2},
                    {"method": "str", "world_size": "count", "itemsize": "count", "rank": "count"}),
    "comm_time": ({"method": "int8", "shape": (64, 32), "world_size": 4, "link": "ib_hdr"},
                  {"method": "str", "world_size": "count", "compress_s": "float", "link": "str"}),
    "crossover_bandwidth": ({"method": "fp16", "shape": (64, 32), "world_size": 4, "compress_s": 1e-3,
                             "link": "ib_hdr"},
                            {"world_size": "count", "compress_s": "float", "link": "str", "itemsize": "count"}),
    "topk_count": ({"numel": 100, "fraction": 0.1}, {"numel": "count", "fraction": "float"}),
    "QuantState": ({}, {"code": "str", "error_feedback": "bool"}),
    "TopKState": ({"fraction": 0.1}, {"fraction": "float", "error_feedback": "bool"}),
    "PowerSGDState": ({}, {"rank": "count", "start_iter": "int", "min_compression_rate": "float",
                           "epsilon": "float", "seed": "int", "error_feedback": "bool", "warm_start": "bool"}),
    "HookComm": ({}, {"algorithm": "str"}),
    "hook_for": ({"method": "topk", "fraction": 0.1}, {"method": "str", "fraction": "float"}),
    "quantize": ({"delta": _T}, {"delta": "str", "code": "str"}),
    "dequantize": ({"codes": _T.to(torch.int8), "scale": torch.tensor(1.0)}, {"codes": "str", "scale": "str"}),
    "topk": ({"delta": _T, "k": 2}, {"delta": "str", "k": "count"}),
    "orthogonalize_": ({"a": torch.ones(4, 2)}, {"a": "str", "epsilon": "float"}),
    "int8_ring_sum": ({"codes": [[1, 2], [3, 4]]}, {"codes": "int"}),
}
COMPRESSION_CASES = [(fn, name, kind) for fn, (_, params) in COMPRESSION.items() for name, kind in params.items()]


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(case=st.sampled_from(COMPRESSION_CASES), data=st.data())
def test_compression_names_every_out_of_range_argument(case, data):
    fn, name, kind = case
    bad = data.draw(st.sampled_from(BAD[kind]))
    kwargs = {**COMPRESSION[fn][0], name: bad}
    problem = named_error(lambda: getattr(cp, fn)(**kwargs), name)
    assert problem is None, f"compression.{fn}({name}={bad!r}): {problem}"


# the command line: command -> {option: kind}; each must end in exit 2 and one line naming the option
CLI = {
    "bench": {"--op": "str", "--algorithm": "str", "--world-size": "count", "--backend": "str", "--min-bytes": "size",
              "--max-bytes": "size", "--factor": "count", "--dtype": "str", "--iters": "count", "--warmup": "int",
              "--repeats": "count", "--timeout": "float"},
    "diagnose": {"--hardware": "str"},
    "learner-copies": {"notebooks": "path"},
}
CLI_BAD = {"count": ["0", "-1", "2.5", "x", "", "99999999999999999999"], "int": ["-1", "x", "2.5"],
           "str": ["nope", "", "ALL_REDUCE"], "float": ["0", "-1", "nan", "inf", "x"],
           "size": ["0", "-1K", "1T", "lots", "1.5M"], "path": ["/nonexistent/x.ipynb", "/dev/null", "/"]}
CLI_CASES = [(cmd, opt, kind) for cmd, opts in CLI.items() for opt, kind in opts.items()]


@settings(max_examples=120, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(CLI_CASES), data=st.data())
def test_every_command_names_an_out_of_range_option_in_one_line(case, data, monkeypatch, tmp_path):
    from commlib.__main__ import main

    cmd, opt, kind = case
    value = data.draw(st.sampled_from(CLI_BAD[kind]))
    monkeypatch.setattr(cl, "Cluster", lambda *a, **k: pytest.fail("a Cluster started for a bad argument"))
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    if cmd == "bench":
        argv = ["bench", "--world-size", "2", "--max-bytes", "4K", f"{opt}={value}"]
    elif cmd == "diagnose":
        argv = ["diagnose", str(tmp_path), f"{opt}={value}"]
    else:
        argv = ["learner-copies", str(tmp_path / "out"), value]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        with pytest.raises(SystemExit) as e:
            main(argv)
    lines = err.getvalue().strip().splitlines()
    assert e.value.code == 2 and len(lines) == 1 and "Traceback" not in lines[0], (argv, lines)
    said = opt.lstrip("-").replace("-", "_") if cmd != "learner-copies" else value
    assert (opt in lines[0] or said in lines[0] or cmd == "diagnose"), (argv, lines)
