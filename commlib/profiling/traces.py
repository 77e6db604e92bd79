"""Per-rank torch.profiler traces (Chrome JSON, .json or .json.gz) -> collective calls.

    ranks = load(["rank0.json.gz", "rank1.json.gz"])   # or a folder; -> [RankTrace], in rank order

The file is read by reader.py (streaming, bounded, typed; the only code that opens a trace), several files in
parallel processes by parallel.py; this module turns a rank's records into Calls, in linear time (every lookup
is a dict or a bisect: a kernel's launch, the op around it, the queued op a Gloo work item serves).

One Call per collective per rank: op (all_reduce, all_gather, reduce_scatter, broadcast, reduce,
all_to_all, send, recv, barrier, ...), process group and its size, bytes in nccl-tests' convention (the full
tensor for all_reduce and broadcast, the gathered total for all_gather, the full input for reduce_scatter and
all_to_all), dtype, start and duration. Where a call's numbers come from:

  CUDA/NCCL  the `nccl*` kernels (device time). Recent torch writes the collective's arguments (`Collective
             name`, `In/Out msg nelems`, `Group size`, `dtype`, `Process Group Name`) on the kernel; older
             traces carry them only on the CPU op that launched it (`record_param_comms`, or `nccl:*` with
             its input shapes): the kernel's `correlation` names its cudaLaunchKernel, which runs inside that op.
             Of the ops around the launch, the one that says most wins: c10d::_allgather_base_ (output and
             input: the gathered total, and the group's size as their ratio) over nccl:_all_gather_base
             (one rank's shard, multiplied by the group's size once the group is known; else unknown).
  CPU only   `nccl:*` ops without kernels (recorded without ProfilerActivity.CUDA): NCCL calls with the CPU
             op's times, and a note.
  CPU/Gloo   the `gloo:*` events on Gloo's worker threads: the work itself, with its input shape and dtype
             (record_shapes). The `c10d::*` op that queued it, matched in order (Gloo's workers take work
             in queue order), says which op the user called and its size in nccl-tests' convention.

What an NCCL kernel's name proves (its algorithm, never its protocol): kernels.py.

Why not Holistic Trace Analysis (holistictraceanalysis, MIT): it needs pandas, plotly, networkx and pydot (none
are in requirements.txt), reads GPU kernels only (no Gloo, so not the course's CPU runs), computes no bytes,
algbw or busbw, and its straggler metric keeps only kernels named ncclKernel* (hta/analyzers/straggler.py at
f4d0062), which NCCL >= 2.19's ncclDevKernel_* names are not. What this module needs is JSON and a few rules.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass, field

from commlib import _validate
from commlib.profiling.read.fields import MAX_RANKS, OddField, count, dims_numel, numel
from commlib.profiling.groups import configured, file_calls, parse_ranks
from commlib.profiling.read.kernels import kernel_info
from commlib.profiling import checks
from commlib.profiling.read import streams
from commlib.profiling.read.annotations import commlib_calls
from commlib.profiling.read.parallel import read_all
from commlib.profiling.jobs.recording import record  # noqa: F401  (traces.record, as chapters 9 and 10 call it)
from commlib.profiling.read.steps import step_spans
from commlib.profiling.read.reader import (C10D_OR_PARAM_COMMS, CPU_OP, MAX_BYTES, PROFILER_STEP, Records,  # noqa: F401
                                      TraceError, no_gc, printable, read_records)

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
    compute: object                       # (n, 2) array of compute spans (kernels; or CPU ops off Gloo's threads), us
    wall: tuple[float, float]             # first to last event of the timeline used, us
    job: tuple = field(default=(), repr=False)   # what must agree between ranks of one job
    groups: list = field(default_factory=list, repr=False)    # its pg_config as groups.Group, creation order
    threads: list = field(default_factory=list, repr=False)   # Gloo: (worker thread, issue index) per call
    copies: object = None     # (n, 2) memcpy / memset spans: busy, not compute (as HTA and Nsight count them)
    shards: set = field(default_factory=set, repr=False)      # indices of all-gathers whose bytes are one shard
    notes: list = field(default_factory=list, repr=False)     # what the reader could not know, for the report
    holds: str = field(default="", repr=False)                # what the file holds, said where it has no call
    assumed: set = field(default_factory=set, repr=False)     # indices of calls whose group size is a guess
    issued: dict = field(default_factory=dict, repr=False)    # call index -> when it was queued (us), where known
    waits: dict = field(default_factory=dict, repr=False)     # call index -> (from, to) us: the wait that needed it
    steps: list = field(default_factory=list, repr=False)     # (start, end) us of each ProfilerStep#N, in order


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
def _rank_of(path: str, info: dict) -> int | None:
    try:   # an int, or one written as a string of ASCII digits; else the file's name says it
        return int(count("rank", info["rank"], high=MAX_RANKS - 1))
    except (KeyError, TypeError, OddField):
        pass
    m = re.search(r"(?:rank|worker)[-_]?(\d+)", os.path.basename(path), re.IGNORECASE)
    return int(m.group(1)) if m else None


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
    Adds to shards the indices of all-gathers whose bytes are one rank's shard (an older trace's nccl:* op)."""
    by_ext, ops_by_tid = {}, {}
    for e in rec.comm_ops:
        if e.cat in ("cpu_op", "user_annotation") and (e.name == "record_param_comms"
                                                       or e.name.startswith(("nccl:", "c10d::"))):
            info = _checked(rec, e, _from_args, e.args) or _checked(rec, e, _from_shapes, e.name, e.args)
            if info:
                by_ext.setdefault(e.args.external_id if e.args is not None else None, info)
                ops_by_tid.setdefault(e.tid, []).append((e.ts, e.ts + e.dur, info))
    starts = {}
    for tid, spans in ops_by_tid.items():
        spans.sort(key=lambda s: s[0])
        starts[tid] = [s[0] for s in spans]
    calls = []
    for k in kernels:
        args = k.args
        info = _checked(rec, k, _from_args, args)
        launch = rec.launches.get(args.correlation) if args is not None else None
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
        kinfo = kernel_info(k.name)
        info = info or {"op": kinfo["op"] or "unknown", "group": "0", "group_size": None, "dtype": None, "bytes": None}
        if info.get("shard"):
            shards.add(len(calls))
        calls.append(Call(rank, info["op"], info["group"], info["group_size"], info["bytes"], info["dtype"],
                          k.ts, k.dur, kinfo["algorithm"], None, k.name))
    return calls


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


def read(path: str, max_bytes: int = MAX_BYTES) -> RankTrace:
    """One rank's trace -> RankTrace (TraceError naming the file when it is not a usable trace). compute is an
    (n, 2) float array of (start, end) spans, us. rank is None where neither distributedInfo nor the file's
    name says it (load decides)."""
    with no_gc():
        return _read(path, max_bytes)


def _read(path: str, max_bytes: int) -> RankTrace:
    rec = read_records(path, max_bytes)
    info = rec.info
    rank = _rank_of(path, info)
    is_nccl = [k.name.lower().startswith("nccl") for k in rec.kernels]
    own, own_threads, own_issued, own_waits = commlib_calls(rank, rec.comm_ops, Call)   # commlib's background work
    comm_threads = {e.tid for e in rec.comm_ops if e.name.startswith("gloo:")} | {t for t, _ in own_threads}
    cpu = rec.cpu
    notes, shards, threads, issued, waits = [], set(), [], {}, {}
    copies = _spans([(k.ts, k.ts + k.dur) for k in rec.copies])
    if any(is_nccl) or (rec.kernels and not comm_threads):
        nccl = sorted((k for k, n in zip(rec.kernels, is_nccl) if n), key=lambda k: k.ts)
        calls = _cuda_calls(rank, rec, nccl, shards)
        notes += [n for n in [checks.stream_overlaps(path, nccl)] if n]
        issued, waits = streams.edges(rec.kernels, nccl, rec.syncs)
        compute = _spans([(k.ts, k.ts + k.dur) for k, n in zip(rec.kernels, is_nccl) if not n])
        timeline = _spans([(k.ts, k.ts + k.dur) for k in [*rec.kernels, *rec.copies]])
        backend = "nccl"
    elif not comm_threads and any(e.name.startswith("nccl:") for e in rec.comm_ops):
        calls = _cpu_nccl_calls(rank, rec, shards)   # NCCL seen from the CPU only (no CUDA activity recorded)
        compute = _spans([(s, e) for s, e, kind in zip(cpu.start, cpu.end, cpu.kinds)
                          if kind & CPU_OP and not kind & C10D_OR_PARAM_COMMS])
        timeline = _spans([(s, e) for s, e, kind in zip(cpu.start, cpu.end, cpu.kinds) if not kind & PROFILER_STEP])
        backend = "nccl"
        notes.append(f"{os.path.basename(path)}: no device times in this trace (NCCL seen from the CPU only): "
                     "the times are the CPU ops'; record with ProfilerActivity.CUDA for the kernels'")
    else:
        calls, threads, issued = _gloo_calls(rank, rec, comm_threads)
        if own:   # with commlib's own calls, in start order
            order = sorted(range(len(calls) + len(own)), key=lambda i: (calls + own)[i].start_us)
            at = {old: new for new, old in enumerate(order)}
            issued = {at[i]: t for i, t in issued.items()} | {at[len(calls) + i]: t for i, t in own_issued.items()}
            waits = {at[len(calls) + i]: w for i, w in own_waits.items()}
            calls, threads = [(calls + own)[i] for i in order], [(threads + own_threads)[i] for i in order]
        pick = [kind & CPU_OP and not kind & C10D_OR_PARAM_COMMS and tid not in comm_threads
                for kind, tid in zip(cpu.kinds, cpu.tid)]
        compute = _spans([(s, e) for s, e, p in zip(cpu.start, cpu.end, pick) if p])
        timeline = _spans([(s, e) for s, e, kind in zip(cpu.start, cpu.end, cpu.kinds) if not kind & PROFILER_STEP])
        backend = "gloo"
    wall = (float(timeline[:, 0].min()), float(timeline[:, 1].max())) if len(timeline) else (0.0, 0.0)
    steps = step_spans(cpu, wall)
    device = None
    props = rec.devices
    if props and isinstance(props[0], dict) and backend == "nccl" and isinstance(props[0].get("name"), str):
        device = props[0]["name"]
    groups = configured(info)
    try:
        info["world_size"] = count("world_size", info.get("world_size"), low=1, high=MAX_RANKS)
    except OddField as x:
        raise TraceError(path, f"distributedInfo.world_size is {_validate.shown_safely(x.value)}, not a number of "
                               f"ranks (1 to {MAX_RANKS})") from None
    if rank is not None and info["world_size"] is not None and rank >= info["world_size"]:
        raise TraceError(path, f"rank {rank} (distributedInfo.rank, or the file's name) is not a rank of its "
                               f"{info['world_size']}-rank job (distributedInfo.world_size): 0 to {info['world_size'] - 1}")
    job = (info.get("world_size"), info.get("backend"), info.get("nccl_version"))
    size = {g.name: g.size for g in groups}
    if not groups and info.get("world_size"):   # no pg_config: a call the trace does not size is taken as the
        assumed = {i for i, c in enumerate(calls) if c.group_size is None}   # whole job's, and marked so
        if assumed:
            notes.append(f"{os.path.basename(path)}: no process groups in the trace (pg_config): {len(assumed)} "
                         f"call(s) taken as whole-job ({info['world_size']} ranks) calls; nothing is flagged "
                         "against the model on them")
    else:
        assumed = set()
    calls = [c if c.group_size is not None else _with_size(c, size.get(c.group), info.get("world_size"), len(groups))
             for c in calls]
    return RankTrace(path, rank, info.get("world_size"), backend, device, calls, compute, wall, job, groups, threads,
                     copies, shards, notes, _holds(rec), assumed, issued, waits, steps)


def _holds(rec: Records) -> str:
    """What a file with no collective call holds, and the likely cause, in a few words."""
    if not rec.events:
        return ("no events at all: the profiler was stopped (or its schedule never reached an active step) "
                "before export_chrome_trace, or on_trace_ready wrote it before any step ran")
    if rec.events < 10:   # what export_chrome_trace after a scheduled loop leaves (torch 2.13: 1 event)
        return (f"{rec.events} event(s), none a collective: with a schedule, write the trace from "
                "on_trace_ready (README's recipe); exported after the loop it keeps almost nothing")
    return (f"{rec.events} events, none a collective: a rank that communicated nothing in the recorded "
            "steps, or a schedule window that missed them")


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


def _spans(pairs):
    import numpy as np

    return np.array(pairs, dtype=np.float64).reshape(-1, 2)


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
        elif os.path.lexists(p):
            files.append(p)
        else:
            raise TraceError(p, "no such file or folder")
    if not files:
        raise TraceError("(none)", "no trace files given")
    return files


def load(paths, max_bytes: int = MAX_BYTES, workers: int | None = None, timeout_s: float = 600.0) -> list[RankTrace]:
    """Every rank's trace, in rank order, each call filed under its process group (groups.py); TraceError when
    files come from two jobs or two are one rank. Ranks are read in parallel processes (workers: default one per
    core, at most one per file), each within timeout_s."""
    files = trace_files(paths)
    ranks = read_all(files, read, max_bytes, workers=workers, timeout_s=timeout_s)
    if not any(r.calls for r in ranks):   # nothing to diagnose: say what each file holds
        raise TraceError(ranks[0].path, "nothing to diagnose: " + ranks[0].holds + "".join(
            f"\n{printable(r.path)}: nothing to diagnose: {r.holds}" for r in ranks[1:]))
    unnamed = [r for r in ranks if r.rank is None]
    if len(ranks) == 1 and unnamed:   # a single-GPU run, or one file of a job: rank 0 of a one-rank job
        unnamed[0].rank = 0
        unnamed[0].notes.append(f"{os.path.basename(unnamed[0].path)}: no distributedInfo (nor a rank in its "
                                "name): read as rank 0 of a one-rank job")
        unnamed[0].calls = [Call(**{**c.__dict__, "rank": 0}) for c in unnamed[0].calls]
    elif unnamed:
        raise TraceError(unnamed[0].path, f"no rank in {len(unnamed)} of {len(ranks)} files (no distributedInfo.rank,"
                                          " nor rank3 / rank-3 / rank_3 / worker3 in the name): "
                                          + ", ".join(printable(os.path.basename(r.path)) for r in unnamed))
    first = ranks[0]
    for r in ranks[1:]:
        keys = ("world size", "backend", "NCCL version")
        for key, a, b in zip(keys, first.job, r.job):
            if a is not None and b is not None and a != b:
                raise TraceError(r.path, f"from another job than {printable(first.path)}: {key} {b} here, {a} there")
    seen = {}
    for r in ranks:
        if r.rank in seen:
            raise TraceError(r.path, f"rank {r.rank} again: {seen[r.rank]} is rank {r.rank} too")
        seen[r.rank] = r.path
    return file_calls(sorted(ranks, key=lambda r: r.rank))
