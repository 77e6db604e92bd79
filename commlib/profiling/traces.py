"""Per-rank torch.profiler traces (Chrome JSON, .json or .json.gz) -> collective calls.

    ranks = load(["rank0.json.gz", "rank1.json.gz"])   # or a folder; -> [RankTrace], in rank order

The file is read by reader.py (streaming, bounded, typed; the only code that opens a trace), several files in
parallel processes by parallel.py (both in read/); calls.py turns a rank's records into Calls, in linear time
(every lookup is a dict or a bisect); this module puts a rank's Calls, groups and spans into a RankTrace.

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

import operator
import os
import re
from dataclasses import dataclass, field

from commlib import _validate
from commlib.profiling.read.fields import MAX_RANKS, OddField, count
from commlib.profiling.calls import Call, _cpu_nccl_calls, _cuda_calls, _gloo_calls
from commlib.profiling.groups import configured, file_calls
from commlib.profiling.read import streams
from commlib.profiling.read.annotations import commlib_calls
from commlib.profiling.read.parallel import read_all
from commlib.profiling.jobs.recording import record  # noqa: F401  (traces.record, as chapters 9 and 10 call it)
from commlib.profiling.read.kernels import kernel_info  # noqa: F401  (traces.kernel_info, as chapter 9 calls it)
from commlib.profiling.read.steps import step_spans
from commlib.profiling.read.reader import MAX_BYTES, TraceError, no_gc, printable, read_records  # noqa: F401
from commlib.profiling.read.records import C10D_OR_PARAM_COMMS, CPU_OP, OFFCORE, PROFILER_STEP, Records  # noqa: F401

# the real GPU trace that ships with the course (assets/traces/README.md: its source, licence and trimming)
SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "assets", "traces", "a100_2gpu_rank0.json.gz")
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
    network: object = field(default=None, repr=False)         # "commlib_network" as written (network.spec), or None
    leaves: object = None     # (n, 2) the innermost compute ops and the others' starts and ends (_leaves), us
    pid: object = field(default=None, repr=False)   # Gloo: the process id its worker threads' events carry
    untraced: object = field(default=None, repr=False)   # "commlib_untraced" as written (jobs/recording), or None
    offcore: object = field(default=None, repr=False)    # (n, 2) compute spans that take no core (records.OFFCORE), us
    ops: object = field(default=None, repr=False)   # the CPU ops its compute counts (nested ones too: the profiler
    #                                                 records each), None where unknown (kernels: replay/compute.floor)


def _rank_of(path: str, info: dict) -> int | None:
    try:   # an int, or one written as a string of ASCII digits; else the file's name says it
        return int(count("rank", info["rank"], high=MAX_RANKS - 1))
    except (KeyError, TypeError, OddField):
        pass
    m = re.search(r"(?:rank|worker)[-_]?(\d+)", os.path.basename(path), re.IGNORECASE)
    return int(m.group(1)) if m else None


def read(path: str, max_bytes: int = MAX_BYTES) -> RankTrace:
    """One rank's trace -> RankTrace (TraceError naming the file when it is not a usable trace). compute is an
    (n, 2) float array of (start, end) spans, us. rank is None where neither distributedInfo nor the file's
    name says it (load decides)."""
    with no_gc():
        return _read(path, max_bytes)


def _read(path: str, max_bytes: int) -> RankTrace:
    rec = read_records(path, max_bytes)
    info = rec.info
    leaves = None
    rank = _rank_of(path, info)
    is_nccl = rec.kernel_nccl   # 1 per NCCL kernel, 0 per other (Records.add, by name)
    own, own_threads, own_issued, own_waits = commlib_calls(rank, rec.comm_ops, Call)   # commlib's background work
    comm_threads = {e.tid for e in rec.comm_ops if e.name.startswith("gloo:")} | {t for t, _ in own_threads}
    cpu = rec.cpu
    notes, shards, threads, issued, waits, offcore, ops = [], set(), [], {}, {}, None, None
    copies = _event_spans(rec.copies)
    if any(is_nccl) or (rec.kernels and not comm_threads):
        nccl = sorted((k for k, n in zip(rec.kernels, is_nccl) if n), key=lambda k: k.ts)
        calls = _cuda_calls(rank, rec, nccl, shards)
        notes += [n for n in [streams.stream_overlaps(path, nccl)] if n]
        issued, waits = streams.edges(rec.kernels, nccl, rec.syncs)
        import numpy as np

        # each kernel's span once (Records.add's columns, no copy): the compute ones, and all with the copies
        spans = np.frombuffer(rec.kernel_spans, dtype=np.float64).reshape(-1, 2)
        compute = spans[np.frombuffer(is_nccl, dtype=np.uint8) == 0]
        timeline = np.concatenate((spans, copies))
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
        ops = int(sum(map(bool, pick)))
        leaves = _leaves(cpu, pick)
        if rec.any_kind(OFFCORE):   # commlib's emulated accelerator's ops: compute that takes no core
            off = [(s, e) for s, e, p, k in zip(cpu.start, cpu.end, pick, cpu.kinds) if p and k & OFFCORE]
            offcore = _spans(off) if off else None
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
        world = info["world_size"]
        raise TraceError(path, f"rank {rank} (distributedInfo.rank, or the file's name) is not a rank of its "
                               f"{world}-rank job (distributedInfo.world_size): 0 to {world - 1}")
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
                     copies, shards, notes, _holds(rec), assumed, issued, waits, steps, rec.network,
                     compute if leaves is None else leaves, _process(rec) if backend == "gloo" else None,
                     rec.untraced, offcore, ops)


def _process(rec: Records):
    """The process id on the trace's gloo:* events (Kineto writes the process's, the main thread's id), or None
    where they name none or more than one."""
    pids = {e.pid for e in rec.comm_ops if e.name.startswith("gloo:")}
    return next(iter(pids)) if len(pids) == 1 and isinstance(next(iter(pids)), int) else None


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


MARK_US = 1e-3   # an op's start or end as a span of 1 ns: a point where its thread ran (see _leaves)


def _leaves(cpu, pick):
    """The innermost of the picked CPU ops (those with no picked op inside them on their thread), (n, 2): a
    rank blocked inside an op (FSDP2's hooks wait for their all-gather or reduce-scatter inside autograd's
    node; DDP's reducer inside backward's last one) runs none, so the time shows as a gap between them.
    With them, every picked op's start and end as a point (MARK_US long): a thread that starts or ends an op
    is running then, so a gap ends there. An op whose own work has no op inside it until its end (commlib's
    emulated accelerator sleeps, then clones its input) is then no gap from the wait before it to that last
    child: in FSDP2's backward at 40 MB/s the rank resumed 0.1-0.3 ms after each prefetched all-gather and ran
    the accelerator's 4 ms, and the gap that ran on to its clone ended too late to read as a wait, so 27 of 96
    waits were left in the compute lane (issue 49's closing note)."""
    import numpy as np

    idx = np.flatnonzero(np.array(pick, dtype=bool))
    if not len(idx):
        return np.empty((0, 2))
    start, end = np.asarray(cpu.start)[idx], np.asarray(cpu.end)[idx]
    tid = np.array([hash(cpu.tid[i]) for i in idx])
    order = np.lexsort((-end, start, tid))
    start, end, tid = start[order], end[order], tid[order]
    nxt = np.r_[start[1:], np.inf]
    leaf = ~((np.r_[tid[1:], 0] == tid) & (nxt < end) & (np.arange(len(tid)) < len(tid) - 1))
    inner = ~leaf   # the other ops: their starts and ends as points
    points = np.concatenate((start[inner], end[inner]))
    return np.concatenate((np.stack([start[leaf], end[leaf]], axis=1),
                           np.stack([points, points + MARK_US], axis=1)))


def _spans(pairs):
    import numpy as np

    return np.array(pairs, dtype=np.float64).reshape(-1, 2)


_TS, _DUR = (operator.attrgetter(a) for a in ("ts", "dur"))


def _event_spans(events: list):
    """(n, 2) spans (ts, ts + dur) of events, as _spans([(e.ts, e.ts + e.dur) ...]) gives them (the same float
    sums), built from two columns rather than n tuples."""
    import numpy as np

    ts = np.fromiter(map(_TS, events), dtype=np.float64, count=len(events))
    return np.column_stack((ts, ts + np.fromiter(map(_DUR, events), dtype=np.float64, count=len(events))))


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
