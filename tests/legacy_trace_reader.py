"""The trace reader as it was before issue 30 (commlib/profiling/traces.py at b0de7ea), kept verbatim minus its
docstring and record(): tests/test_profiling_reader.py holds the new reader's results equal to these, field by
field, on every trace the repository holds and on synthetic ones of each form. Not part of the package."""

from __future__ import annotations

import bisect
import gzip
import json
import os
import re
import zlib
from dataclasses import dataclass, field

# the real GPU trace that ships with the course (assets/traces/README.md: its source, licence and trimming)
SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "assets", "traces", "a100_2gpu_rank0.json.gz")
# canonical op names from torch's "Collective name", c10d op names, gloo:/nccl: annotations, NCCL kernels
OP_NAMES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allreduce_coalesced_": "all_reduce", "allreduce_": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "_all_gather_base": "all_gather", "allgather_into_tensor_coalesced": "all_gather", "allgather_": "all_gather",
    "_allgather_base_": "all_gather", "all_gather_into_tensor": "all_gather", "allgather_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter", "reducescatter": "reduce_scatter",
    "broadcast": "broadcast", "broadcast_": "broadcast", "reduce": "reduce", "reduce_": "reduce",
    "alltoall": "all_to_all", "all_to_all": "all_to_all", "alltoall_base": "all_to_all",
    "alltoall_base_": "all_to_all", "alltoall_": "all_to_all", "all_to_allv": "all_to_all",
    "send": "send", "recv": "recv", "recv_": "recv", "send_": "send", "recv_any_source_": "recv",
    "sendrecv": "send_recv", "barrier": "barrier", "gather": "gather", "gather_": "gather",
    "scatter": "scatter", "scatter_": "scatter",
}
KERNEL_OPS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "AllGatherV": "all_gather",
              "ReduceScatter": "reduce_scatter", "Broadcast": "broadcast", "Reduce": "reduce",
              "SendRecv": "send_recv", "AllToAll": "all_to_all", "Generic": None}
# torch's dtype names (record_param_comms, "Input type") -> torch.dtype names and bytes per element
DTYPES = {"float": ("float32", 4), "float32": ("float32", 4), "double": ("float64", 8), "float64": ("float64", 8),
          "half": ("float16", 2), "float16": ("float16", 2), "c10::half": ("float16", 2),
          "bfloat16": ("bfloat16", 2), "c10::bfloat16": ("bfloat16", 2),
          "long": ("int64", 8), "int64": ("int64", 8), "long int": ("int64", 8), "int": ("int32", 4),
          "int32": ("int32", 4), "short": ("int16", 2), "byte": ("uint8", 1), "unsigned char": ("uint8", 1),
          "uint8": ("uint8", 1), "char": ("int8", 1), "signed char": ("int8", 1), "int8": ("int8", 1),
          "bool": ("bool", 1), "float8_e4m3fn": ("float8_e4m3fn", 1), "float8_e5m2": ("float8_e5m2", 1)}
_ALGOS = "COLLNET_DIRECT|COLLNET_CHAIN|NVLS_TREE|NVLS|COLLNET|TREE|RING|PAT"
_OLD = re.compile(rf"^ncclKernel_(?P<op>[A-Za-z]+)_(?P<algo>{_ALGOS})_(?P<proto>LL128|LL|SIMPLE)_")
_NEW = re.compile(rf"^ncclDevKernel_(?P<op>[A-Za-z]+?)(?:_(?P<rest>[A-Za-z0-9_]*?))?(?:_(?P<algo>{_ALGOS})_"
                  rf"(?P<proto>LL128|LL|SIMPLE))?(?:\(|$)")


class TraceError(ValueError):
    """A file that cannot be read as one rank of the job: str() is one line, 'PATH: problem'."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


@dataclass(frozen=True)
class Call:
    rank: int
    op: str
    group: str             # process group name ("0" is the default group)
    group_size: int | None
    bytes: int | None      # nccl-tests convention (see the module docstring)
    dtype: str | None
    start_us: float        # on this rank's clock
    duration_us: float
    algorithm: str | None  # what the NCCL kernel name proves, else None
    protocol: str | None   # never proven by a kernel name: None unless a trace states it
    kernel: str | None     # the NCCL kernel (None for Gloo)

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us


@dataclass
class RankTrace:
    path: str
    rank: int
    world_size: int | None
    backend: str              # "nccl" or "gloo"
    device: str | None        # the GPU's name (deviceProperties), None on CPU
    calls: list[Call]
    compute: list[tuple[float, float]]   # spans of compute (kernels; or CPU ops off Gloo's threads), us
    wall: tuple[float, float]             # first to last event of the timeline used, us
    job: tuple = field(default=(), repr=False)   # what must agree between ranks of one job


def kernel_info(name: str) -> dict:
    """op, algorithm and the name's form ('old' | 'new' | None) of an NCCL kernel name; see the module
    docstring for why the protocol is never read from it and the algorithm only where the name proves it."""
    short = name.split("(")[0]
    m = _OLD.match(short)
    if m:  # one kernel per algorithm; p2p kernels name no algorithm of theirs
        op = KERNEL_OPS.get(m["op"])
        return {"op": op, "algorithm": None if op == "send_recv" else m["algo"].lower(), "form": "old"}
    m = _NEW.match(short)
    if m:
        return {"op": KERNEL_OPS.get(m["op"]), "algorithm": "tree" if m["algo"] == "TREE" else None, "form": "new"}
    return {"op": None, "algorithm": None, "form": None}


def dtype_of(text) -> tuple[str | None, int | None]:
    """torch's dtype spelling in a trace ('Float', 'BFloat16', 'long int', ...) -> (name, itemsize)."""
    if not isinstance(text, str):
        return None, None
    return DTYPES.get(text.strip().lower(), (None, None))


def nccl_bytes(op: str, in_nelems, out_nelems, itemsize) -> int | None:
    """nccl-tests' size: all_gather the gathered output, reduce_scatter the full input, others the input."""
    if itemsize is None or in_nelems is None:
        return None
    n = max(in_nelems, out_nelems or 0) if op in ("all_gather", "reduce_scatter") else in_nelems
    return int(n) * itemsize


# ------------------------------------------------------------------------------------------ reading
def _open(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise TraceError(path, f"truncated or damaged gzip file ({e})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(path, f"not a torch.profiler trace (not JSON: {e})") from None
    except OSError as e:
        raise TraceError(path, f"cannot read it ({e.strerror or e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(path, "not a torch.profiler trace (no 'traceEvents' list)")
    return data


def _rank_of(path: str, info: dict) -> int | None:
    if isinstance(info.get("rank"), int):
        return info["rank"]
    m = re.search(r"(?:rank|worker)[-_]?(\d+)", os.path.basename(path), re.IGNORECASE)
    return int(m.group(1)) if m else None


def _dims_numel(dims) -> int | None:
    """numel of the first tensor in a record_shapes 'Input Dims' entry (a TensorList is one level deeper)."""
    if not dims:
        return None
    first = dims[0]
    if first and isinstance(first[0], list):  # TensorList: add its tensors up
        return sum(_numel(d) for d in first)
    return _numel(first) if isinstance(first, list) and first else None


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _from_args(args: dict) -> dict | None:
    """The collective's arguments as recent torch writes them (on a kernel or on record_param_comms)."""
    name = args.get("Collective name")
    if not isinstance(name, str):
        return None
    op = OP_NAMES.get(name.lower(), name.lower())
    dtype, size = dtype_of(args.get("dtype"))
    return {"op": op, "group": str(args.get("Process Group Name", "0")), "group_size": args.get("Group size"),
            "dtype": dtype, "bytes": nccl_bytes(op, args.get("In msg nelems"), args.get("Out msg nelems"), size)}


def _from_shapes(name: str, args: dict) -> dict | None:
    """An older `nccl:*` / `c10d::*` op: the op from its name, sizes from its input shapes (record_shapes)."""
    op_name = name.split(":")[-1].lower()
    op = OP_NAMES.get(op_name)
    if op is None:
        return None
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    dtype, size = dtype_of(next((t for t in types if t and t not in ("TensorList", "Scalar")), None))
    if op in ("all_gather", "reduce_scatter") and len(dims) >= 2 and all(isinstance(d, list) for d in dims[:2]) \
            and dims[0] and dims[1] and not isinstance(dims[0][0], list):  # (output, input) as c10d::_*_base_
        n = max(_numel(dims[0]), _numel(dims[1]))
    else:
        n = _dims_numel(dims)
    if op == "barrier":  # its one-byte tensor is not sent
        return {"op": op, "group": "0", "group_size": None, "dtype": None, "bytes": None}
    if size is None and "TensorList" in types:  # a tensor list records no dtype: assume 4-byte elements
        size = 4
    return {"op": op, "group": "0", "group_size": None, "dtype": dtype,
            "bytes": None if n is None or size is None else n * size}


def _cuda_calls(rank, events, kernels) -> list[Call]:
    """One Call per NCCL kernel; arguments from the kernel, else from the CPU op that launched it."""
    by_ext, launches, ops_by_tid = {}, {}, {}
    for e in events:
        cat, args = e.get("cat"), e.get("args") or {}
        if cat == "cuda_runtime" and "correlation" in args:
            launches[args["correlation"]] = e
        elif cat in ("cpu_op", "user_annotation") and (e.get("name") == "record_param_comms"
                                                       or str(e.get("name", "")).startswith("nccl:")):
            info = _from_args(args) or _from_shapes(e["name"], args)
            if info:
                by_ext.setdefault(args.get("External id"), info)
                start = float(e["ts"])
                ops_by_tid.setdefault(e.get("tid"), []).append((start, start + float(e.get("dur", 0)), info))
    starts = {}
    for tid, spans in ops_by_tid.items():
        spans.sort(key=lambda s: s[0])
        starts[tid] = [s[0] for s in spans]
    calls = []
    for k in kernels:
        args = k.get("args") or {}
        info = _from_args(args)
        launch = launches.get(args.get("correlation"))
        if info is None and launch is not None:  # the innermost op with sizes around its launch
            t, spans = float(launch["ts"]), ops_by_tid.get(launch.get("tid"), [])
            i = bisect.bisect_right(starts[launch.get("tid")], t)
            inside = [s for s in spans[max(0, i - 4):i] if s[1] >= t]   # collective ops nest a few deep at most
            info = min(inside, key=lambda s: (s[2]["bytes"] is None, s[1] - s[0]))[2] if inside else None
        if info is None:  # no launch recorded: the op whose External id the kernel carries
            info = by_ext.get(args.get("External id"))
        kinfo = kernel_info(k["name"])
        info = info or {"op": kinfo["op"] or "unknown", "group": "0", "group_size": None, "dtype": None, "bytes": None}
        calls.append(Call(rank, info["op"], info["group"], info["group_size"], info["bytes"], info["dtype"],
                          float(k["ts"]), float(k.get("dur", 0.0)), kinfo["algorithm"], None, k["name"]))
    return calls


# what Gloo runs for a user's op when it is not the op itself (ProcessGroupGloo's reduce_scatter_tensor is an
# all-reduce of the whole input)
GLOO_RUNS_AS = {"reduce_scatter": "all_reduce"}


def _gloo_calls(rank, events, comm_threads) -> list[Call]:
    """gloo:* work events (the work itself, with its own input shape and dtype), each matched in order with the
    c10d::* op that queued it: the op the user called, and its size in nccl-tests' convention."""
    work = sorted((e for e in events if str(e.get("name", "")).startswith("gloo:")), key=lambda e: float(e["ts"]))
    queued = sorted((e for e in events if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith("c10d::")
                     and e.get("tid") not in comm_threads and OP_NAMES.get(e["name"][6:].lower())),
                    key=lambda e: float(e["ts"]))
    calls, j = [], 0
    for w in work:
        ran = _from_shapes(w["name"], w.get("args") or {}) or {"op": w["name"][5:].lower(), "dtype": None,
                                                                 "bytes": None}
        asked = None
        for k in range(j, len(queued)):  # the next queued op Gloo runs this way (others ran inline, or not here)
            info = _from_shapes(queued[k]["name"], queued[k].get("args") or {})
            if info["op"] == ran["op"] or GLOO_RUNS_AS.get(info["op"]) == ran["op"]:
                asked, j = info, k + 1
                break
        op = asked["op"] if asked else ran["op"]
        dtype = (asked and asked["dtype"]) or ran["dtype"]
        nbytes = asked["bytes"] if asked and asked["dtype"] else (ran["bytes"] or (asked and asked["bytes"]))
        calls.append(Call(rank, op, "0", None, nbytes, dtype, float(w["ts"]), float(w.get("dur", 0.0)),
                          None, None, None))
    return calls


def read(path: str) -> RankTrace:
    """One rank's trace -> RankTrace (TraceError naming the file when it is not a usable trace)."""
    data = _open(path)
    events = [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e]
    info = data.get("distributedInfo") if isinstance(data.get("distributedInfo"), dict) else {}
    rank = _rank_of(path, info)
    if rank is None:
        raise TraceError(path, "no rank in it (no distributedInfo.rank) nor in its name (e.g. rank3.json)")
    kernels = [e for e in events if e.get("cat") == "kernel"]
    nccl = [e for e in kernels if str(e.get("name", "")).lower().startswith("nccl")]
    comm_threads = {e.get("tid") for e in events if str(e.get("name", "")).startswith("gloo:")}
    if nccl or (kernels and not comm_threads):
        calls = _cuda_calls(rank, events, sorted(nccl, key=lambda e: float(e["ts"])))
        compute = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in kernels if e not in nccl]
        timeline = kernels
        backend = "nccl"
    else:
        calls = _gloo_calls(rank, events, comm_threads)
        compute = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
                   if e.get("cat") == "cpu_op" and e.get("tid") not in comm_threads
                   and not str(e.get("name", "")).startswith(("c10d::", "record_param_comms"))]
        timeline = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation")
                    and not str(e.get("name", "")).startswith("ProfilerStep")]
        backend = "gloo"
    if not calls and not events:
        raise TraceError(path, "no events in it")
    spans = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in timeline] or [(0.0, 0.0)]
    wall = (min(s for s, _ in spans), max(e for _, e in spans))
    device = None
    props = data.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict) and backend == "nccl":
        device = props[0].get("name")
    pgs = tuple(sorted((str(g.get("pg_name")), g.get("pg_size")) for g in info.get("pg_config") or []
                       if isinstance(g, dict)))
    job = (info.get("world_size"), info.get("backend"), info.get("nccl_version"), pgs)
    size = {name: s for name, s in pgs}
    calls = [c if c.group_size is not None else _with_size(c, size.get(c.group), info.get("world_size"), len(pgs))
             for c in calls]
    return RankTrace(path, rank, info.get("world_size"), backend, device, calls, compute, wall, job)


def _with_size(call: Call, pg_size, world_size, n_groups) -> Call:
    size = pg_size if pg_size is not None else (world_size if n_groups <= 1 else None)
    return Call(**{**call.__dict__, "group_size": size})


def trace_files(paths) -> list[str]:
    """Files named, and the .json / .json.gz files inside folders named (TraceError for a missing path or a
    folder without traces)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = []
    for p in map(str, paths):
        if os.path.isdir(p):
            found = sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith((".json", ".json.gz")))
            if not found:
                raise TraceError(p, "a folder with no trace files (.json or .json.gz) in it")
            files += found
        elif os.path.exists(p):
            files.append(p)
        else:
            raise TraceError(p, "no such file or folder")
    if not files:
        raise TraceError("(none)", "no trace files given")
    return files


def load(paths) -> list[RankTrace]:
    """Every rank's trace, in rank order; TraceError when files come from two jobs or two are one rank."""
    ranks = [read(f) for f in trace_files(paths)]
    first = ranks[0]
    for r in ranks[1:]:
        keys = ("world size", "backend", "NCCL version", "process groups")
        for key, a, b in zip(keys, first.job, r.job):
            if a is not None and b is not None and a != b:
                raise TraceError(r.path, f"from another job than {first.path}: {key} {b} here, {a} there")
    seen = {}
    for r in ranks:
        if r.rank in seen:
            raise TraceError(r.path, f"rank {r.rank} again: {seen[r.rank]} is rank {r.rank} too")
        seen[r.rank] = r.path
    return sorted(ranks, key=lambda r: r.rank)
