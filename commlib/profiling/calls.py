"""The calls stage: a rank's records (read/) -> collective Calls, one per collective per rank, in linear time
(every lookup is a dict or a bisect: a kernel's launch, the op around it, the queued op a Gloo work item
serves). traces.py's docstring says where each number comes from on CUDA/NCCL, CPU-only NCCL and Gloo."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from commlib import _validate
from commlib.profiling.groups import parse_ranks
from commlib.profiling.read.fields import OddField, count, dims_numel, numel
from commlib.profiling.read.kernels import kernel_info
from commlib.profiling.read.reader import TraceError, printable
from commlib.profiling.read.records import Records

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
# torch's dtype names (record_param_comms, "Input type") -> torch.dtype names and bytes per element
DTYPES = {"float": ("float32", 4), "float32": ("float32", 4), "double": ("float64", 8), "float64": ("float64", 8),
          "half": ("float16", 2), "float16": ("float16", 2), "c10::half": ("float16", 2),
          "bfloat16": ("bfloat16", 2), "c10::bfloat16": ("bfloat16", 2),
          "long": ("int64", 8), "int64": ("int64", 8), "long int": ("int64", 8), "int": ("int32", 4),
          "int32": ("int32", 4), "short": ("int16", 2), "byte": ("uint8", 1), "unsigned char": ("uint8", 1),
          "uint8": ("uint8", 1), "char": ("int8", 1), "signed char": ("int8", 1), "int8": ("int8", 1),
          "bool": ("bool", 1), "float8_e4m3fn": ("float8_e4m3fn", 1), "float8_e5m2": ("float8_e5m2", 1)}
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
    protocol: str | None   # "ll" where a symmetric kernel's name says it (read/kernels.py), else None
    kernel: str | None     # the NCCL kernel (None for Gloo)

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us


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


# ------------------------------------------------------------------------------------------ calls
def _checked(rec: Records, e, fn, *args):
    """fn(*args), an OddField in it reported as one line naming the file, the event's index and the field."""
    try:
        return fn(*args)
    except OddField as x:
        raise TraceError(rec.path, f"traceEvents[{e.index}] ({printable(e.name[:40])}): field '{x.field}' is "
                                   f"{_validate.shown_safely(x.value)}, not a count torch would write") from None


def _from_args(args) -> dict | None:
    """The collective's arguments as recent torch writes them (on a kernel or on record_param_comms)."""
    name = args.collective if args is not None else None
    if not isinstance(name, str):
        return None
    op = OP_NAMES.get(name.lower(), name.lower())
    dtype, size = dtype_of(args.dtype)
    group = "0" if args.pg_name is None else str(args.pg_name)
    members = parse_ranks(args.pg_ranks)
    group_size = count("Group size", args.group_size, low=1)
    group_size = group_size if group_size is not None else (len(members) if members else None)
    in_n, out_n = count("In msg nelems", args.in_nelems), count("Out msg nelems", args.out_nelems)
    return {"op": op, "group": group, "group_size": group_size, "dtype": dtype,
            "bytes": nccl_bytes(op, in_n, out_n, size)}


def _from_shapes(name: str, args) -> dict | None:
    """An older `nccl:*` / `c10d::*` op: the op from its name, sizes from its input shapes (record_shapes)."""
    op_name = name.split(":")[-1].lower()
    op = OP_NAMES.get(op_name)
    if op is None:
        return None
    dims = (args.input_dims if args is not None else None) or []
    types = (args.input_type if args is not None else None) or []
    for key, value in (("Input Dims", dims), ("Input type", types)):
        if not isinstance(value, list):
            raise OddField(key, value)
    dtype, size = dtype_of(next((t for t in types if isinstance(t, str) and t not in ("", "TensorList", "Scalar")),
                                None))
    group_size, shard = None, False
    if op in ("all_gather", "reduce_scatter") and len(dims) >= 2 and all(isinstance(d, list) for d in dims[:2]) \
            and dims[0] and dims[1] and not isinstance(dims[0][0], list):  # (output, input) as c10d::_*_base_
        big, small = max(numel(dims[0]), numel(dims[1])), min(numel(dims[0]), numel(dims[1]))
        n = big
        if small and big % small == 0:   # the whole over one rank's share: the group's size
            group_size = big // small
    else:
        n = dims_numel(dims)
        # nccl:all_gather / nccl:_all_gather_base record their input only: one rank's shard
        shard = op == "all_gather" and name.startswith("nccl:")
    if op == "barrier":  # its one-byte tensor is not sent
        return {"op": op, "group": "0", "group_size": None, "dtype": None, "bytes": None}
    if size is None and "TensorList" in types:  # a tensor list records no dtype: assume 4-byte elements
        size = 4
    return {"op": op, "group": "0", "group_size": group_size, "dtype": dtype, "shard": shard,
            "bytes": None if n is None or size is None else n * size}


def _cuda_calls(rank, rec: Records, kernels, shards: set) -> list[Call]:
    """One Call per NCCL kernel; arguments from the kernel, else from the CPU op that launched it (the kernel's
    correlation names its launch; the innermost collective op around the launch on that thread, by bisect).
    Adds to shards the indices of all-gathers whose bytes are one rank's shard (an older trace's nccl:* op).
    A job repeats a few distinct calls: each distinct set of arguments and each kernel name is read once."""
    seen, names = {}, {}
    by_ext, ops_by_tid, starts = _launch_ops(rec, seen)   # (read, so checked, even where kernels say it all)
    infos = [_args_once(rec, k, seen) for k in kernels]
    calls = []
    for k, info in zip(kernels, infos):
        args = k.args
        launch = rec.launches.get(args.correlation) if info is None and args is not None else None
        if info is None and launch is not None:  # the innermost op with sizes around its launch
            t, tid = launch
            spans = ops_by_tid.get(tid, [])
            i = bisect.bisect_right(starts[tid], t) if spans else 0
            inside = [s for s in spans[max(0, i - 6):i] if s[1] >= t]   # collective ops nest a few deep at most
            # the op that says most: sizes, then the whole (not a shard), then the innermost
            info = min(inside, key=lambda s: (s[2]["bytes"] is None, s[2].get("shard", False), s[1] - s[0]))[2] \
                if inside else None
        if info is None:  # no launch recorded: the op whose External id the kernel carries
            info = by_ext.get(args.external_id if args is not None else None)
        kinfo = names.get(k.name) or names.setdefault(k.name, kernel_info(k.name))
        info = info or {"op": kinfo["op"] or "unknown", "group": "0", "group_size": None, "dtype": None, "bytes": None}
        if info.get("shard"):
            shards.add(len(calls))
        calls.append(Call(rank, info["op"], info["group"], info["group_size"], info["bytes"], info["dtype"],
                          k.ts, k.dur, kinfo["algorithm"], kinfo["protocol"], k.name))
    return calls


def _args_once(rec: Records, e, seen: dict) -> dict | None:
    """_from_args of an event, worked out once per distinct set of arguments (seen: the cache)."""
    a = e.args
    if a is None:
        return None
    try:
        key = (a.collective, a.dtype, a.pg_name, a.pg_ranks, a.group_size, a.in_nelems, a.out_nelems)
        hash(key)
    except TypeError:   # a list among them: not cached
        return _checked(rec, e, _from_args, a)
    if key not in seen:
        seen[key] = _checked(rec, e, _from_args, a)
    return seen[key]


def _launch_ops(rec: Records, seen: dict):
    """The collective CPU ops, for kernels that carry no arguments: {External id: info}, {thread: [(start, end,
    info)] by start}, {thread: their starts}."""
    by_ext, ops_by_tid = {}, {}
    for e in rec.comm_ops:
        if e.cat in ("cpu_op", "user_annotation") and (e.name == "record_param_comms"
                                                       or e.name.startswith(("nccl:", "c10d::"))):
            info = _args_once(rec, e, seen) or _checked(rec, e, _from_shapes, e.name, e.args)
            if info:
                by_ext.setdefault(e.args.external_id if e.args is not None else None, info)
                ops_by_tid.setdefault(e.tid, []).append((e.ts, e.ts + e.dur, info))
    starts = {}
    for tid, spans in ops_by_tid.items():
        spans.sort(key=lambda s: s[0])
        starts[tid] = [s[0] for s in spans]
    return by_ext, ops_by_tid, starts


# what Gloo runs for a user's op when it is not the op itself (ProcessGroupGloo's reduce_scatter_tensor is an
# all-reduce of the whole input)
GLOO_RUNS_AS = {"reduce_scatter": "all_reduce"}


def _gloo_calls(rank, rec: Records, comm_threads) -> tuple[list[Call], list, dict]:
    """gloo:* work events (the work itself, with its own input shape and dtype), each matched in order with the
    c10d::* op that queued it: the op the user called, and its size in nccl-tests' convention. The next queued op
    that Gloo runs as this work's op is found by bisect in a per-op index (not by a scan: linear time when work
    and queued ops do not match one to one). Also returns each call's (worker thread, issue index): the
    thread says its process group (groups.py), the index the order the program issued it; and {call: the time its
    c10d::* op queued it}, where matched."""
    work = sorted((e for e in rec.comm_ops if e.name.startswith("gloo:")), key=lambda e: e.ts)
    queued = sorted((e for e in rec.comm_ops if e.cat == "cpu_op" and e.name.startswith("c10d::")
                     and e.tid not in comm_threads and OP_NAMES.get(e.name[6:].lower())), key=lambda e: e.ts)
    infos = [_checked(rec, q, _from_shapes, q.name, q.args) for q in queued]
    runs = {}   # the op Gloo runs -> indices of the queued ops it serves, ascending
    for k, info in enumerate(infos):
        for ran in {info["op"], GLOO_RUNS_AS.get(info["op"])} - {None}:
            runs.setdefault(ran, []).append(k)
    calls, threads, issued_at, j = [], [], {}, 0
    for w in work:
        ran = _checked(rec, w, _from_shapes, w.name, w.args) or {"op": w.name[5:].lower(), "dtype": None, "bytes": None}
        asked, issued = None, len(queued) + len(calls)
        ks = runs.get(ran["op"], ())
        i = bisect.bisect_left(ks, j)
        if i < len(ks):   # the next queued op Gloo runs this way (others ran inline, or not here)
            asked, j, issued = infos[ks[i]], ks[i] + 1, ks[i]
            issued_at[len(calls)] = queued[ks[i]].ts
        op = asked["op"] if asked else ran["op"]
        dtype = (asked and asked["dtype"]) or ran["dtype"]
        nbytes = asked["bytes"] if asked and asked["dtype"] else (ran["bytes"] or (asked and asked["bytes"]))
        calls.append(Call(rank, op, "0", None, nbytes, dtype, w.ts, w.dur, None, None, None))
        threads.append((w.tid, issued))
    return calls, threads, issued_at


def _cpu_nccl_calls(rank, rec: Records, shards: set) -> list[Call]:
    """One Call per nccl:* op on the CPU (its time is the CPU op's: the launch, not the kernel), sized from its
    shapes or from the record_param_comms beside it."""
    calls = []
    for e in sorted((e for e in rec.comm_ops if e.name.startswith("nccl:")), key=lambda e: e.ts):
        info = _checked(rec, e, _from_shapes, e.name, e.args) or {"op": e.name[5:].lower(), "group": "0", "group_size": None,
                                                 "dtype": None, "bytes": None}
        if info.get("shard"):
            shards.add(len(calls))
        calls.append(Call(rank, info["op"], info["group"], info["group_size"], info["bytes"], info["dtype"],
                          e.ts, e.dur, None, None, None))
    return calls
