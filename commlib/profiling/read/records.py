"""What the analyses read of one rank's trace, sorted from its decoded events (Records.add, block by block): the
kernels, copies, collective ops and stream waits as Events, the CUDA launches' and the CPU ops' times as columns.
What no analysis needs (flow events, Python frames, CUDA runtime calls other than the launches' times, ...) is
dropped here. reader.py fills one per file.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from commlib.profiling.read.events import Event, KernelArgs, decode_shapes
from commlib.profiling.read.files import TraceError, printable

TIME_LIMIT = 1e17     # |ts| and dur in us past this (3,000 years) are not a clock's: no trace writes them
COMM_PREFIXES = ("gloo:", "nccl:", "c10d::", "record_param_comms", "commlib:")
COPIES = ("gpu_memcpy", "gpu_memset")
# CpuOps.kinds bits
CPU_OP, C10D_OR_PARAM_COMMS, PROFILER_STEP = 1, 2, 4
COMM = 8   # (not stored) a name starting with COMM_PREFIXES
OPTIMIZER_STEP = 16   # torch.optim's "Optimizer.step#SGD.step": where a step ends in a trace without ProfilerStep#N
COMMLIB_STEP = 32     # "commlib:step": one training step, marked by commlib's own jobs (several in one ProfilerStep)
OFFCORE = 64          # compute that takes no core: commlib's emulated accelerator (jobs/emulated_job.py), which sleeps
OFFCORE_OPS = ("commlib::accelerator",)


@dataclass
class CpuOps:
    """Every cpu_op / user_annotation, as columns: start, end (us), thread, kinds (CPU_OP, C10D_OR_PARAM_COMMS,
    PROFILER_STEP bits). Only the Gloo path reads them all (compute and the timeline on CPU)."""
    start: array = field(default_factory=lambda: array("d"))
    end: array = field(default_factory=lambda: array("d"))
    tid: list = field(default_factory=list)
    kinds: bytearray = field(default_factory=bytearray)


class Launches:
    """The CUDA runtime calls' times by correlation id, as columns (a dict of 200k tuples was 40 MB of a 1M-event
    trace): get(correlation) -> (ts, tid) or None, by bisect in the sorted ids once the columns are complete."""

    def __init__(self):
        self.corr, self.ts, self.tid, self._index = [], array("d"), [], None

    def __len__(self) -> int:
        return len(self.corr)

    def get(self, correlation, default=None):
        if self._index is None:
            self._index = _Sorted(self.corr)
        i = self._index.find(correlation)
        return default if i is None else (self.ts[i], self.tid[i])


class _Sorted:
    """Positions of ids in a column by value: int ids in a sorted numpy array (searchsorted), any other in a dict.
    The last occurrence of an id wins (as a dict filled in file order would)."""

    def __init__(self, ids: list):
        import numpy as np

        if all(type(x) is int for x in ids):   # the common case: one conversion, no list of positions
            self.other, keys = {}, np.array(ids, dtype=np.int64) if ids else np.zeros(0, np.int64)
            pos = np.arange(len(ids), dtype=np.int64)
        else:
            ints = [i for i, x in enumerate(ids) if type(x) is int]
            self.other = {x: i for i, x in enumerate(ids) if type(x) is not int}
            keys = np.array([ids[i] for i in ints], dtype=np.int64) if ints else np.zeros(0, np.int64)
            pos = np.array(ints, dtype=np.int64)
        order = np.lexsort((pos, keys))   # by id, then position: the last of equal ids is the rightmost
        self.keys, self.pos = keys[order], pos[order]

    def find(self, x):
        if type(x) is not int:
            return self.other.get(x)
        j = int(self.keys.searchsorted(x, side="right")) - 1
        return int(self.pos[j]) if j >= 0 and self.keys[j] == x else None


@dataclass
class Records:
    """What the analyses read of one rank's trace, in file order. kernels, copies and comm_ops are Events (their
    stream, correlation, External id and collective arguments kept for later analyses); launches maps a
    cuda_runtime event's correlation to its (ts, tid)."""
    path: str
    info: dict = field(default_factory=dict)        # distributedInfo ({} when missing)
    devices: list = field(default_factory=list)     # deviceProperties
    network: Any = None                             # the emulated network it ran on (commlib.network.spec), raw
    untraced: Any = None                            # the job's untraced step (jobs/recording.record), raw
    kernels: list = field(default_factory=list)     # cat "kernel"
    kernel_spans: array = field(default_factory=lambda: array("d"))   # each kernel's ts, ts + dur, in turn
    kernel_nccl: bytearray = field(default_factory=bytearray)   # 1 where the kernel is NCCL's (its name), else 0
    copies: list = field(default_factory=list)      # cat gpu_memcpy / gpu_memset (busy, as HTA counts them)
    launches: Launches = field(default_factory=Launches)   # correlation -> (ts, tid) of the CUDA runtime call
    comm_ops: list = field(default_factory=list)    # names starting with COMM_PREFIXES, any category
    syncs: list = field(default_factory=list)       # cat cuda_sync "Stream Wait Event": waits between streams
    cpu: CpuOps = field(default_factory=CpuOps)
    events: int = 0                                 # complete events with a timestamp, all kept or not
    nbytes: int = 0                                 # decompressed size read
    seen: int = 0                                   # events decoded so far, of any kind
    _names: dict = field(default_factory=dict, repr=False)
    _kinds: dict = field(default_factory=dict, repr=False)   # cpu_op name -> _name_kinds(name, True)
    _note_kinds: dict = field(default_factory=dict, repr=False)   # user_annotation name -> _name_kinds(name, False)

    def add(self, events: list) -> None:
        """Sort one block's decoded events into the records; drop the rest. The per-event work is the reader's
        largest cost after the decode (1M events), so each kind takes as few Python steps as it can: CPU ops, the
        commonest, come first, and what a CPU op's name says (its kinds byte; a collective's?) and whether a
        kernel's name is NCCL's are worked out once per distinct name."""
        kernels, copies, syncs = self.kernels, self.copies, self.syncs
        launches = self.launches
        launch_corr, launch_ts, launch_tid = launches.corr.append, launches.ts.append, launches.tid.append
        kernel_span, kernel_nccl = self.kernel_spans.append, self.kernel_nccl.append
        names, op_kinds, note_kinds = self._names, self._kinds, self._note_kinds
        self.launches._index = None
        cpu = self.cpu
        start, end, tids, kinds = cpu.start.append, cpu.end.append, cpu.tid.append, cpu.kinds.append
        seen, n = self.seen, 0
        for i, e in enumerate(events):
            ts = e.ts
            if e.ph != "X" or ts is None:
                continue
            dur = e.dur
            if not (0.0 <= dur < TIME_LIMIT and -TIME_LIMIT < ts < TIME_LIMIT):   # NaN fails too
                self._refuse(e, seen + i)
            n += 1
            cat = e.cat
            if cat == "cpu_op" or cat == "user_annotation":
                cpu_op = cat == "cpu_op"
                cached = op_kinds if cpu_op else note_kinds
                k = cached.get(e.name)
                if k is None:
                    k = cached[e.name] = _name_kinds(e.name, cpu_op)
                if k > 0xFF:   # a collective's op: kept whole too
                    k = self._comm_op(e, seen + i, k)
                start(ts)
                end(ts + dur)
                tids(e.tid)
                kinds(k)
            elif cat == "cuda_runtime":
                a = e.args
                if a is not None and a.correlation is not None:
                    launch_corr(a.correlation)
                    launch_ts(ts)
                    launch_tid(e.tid)
            elif cat == "kernel" or cat in COPIES:
                e.index = seen + i
                name = names.get(e.name)
                if name is None:   # one string per distinct kernel name, not per kernel; and if it is NCCL's
                    name = names[e.name] = (e.name, int(e.name[:4].lower() == "nccl"))
                e.name = name[0]
                a = e.args
                if a is not None:
                    if cat == "kernel" and not name[1]:   # compute: its stream and launch only
                        e.args = KernelArgs(a.stream, a.correlation)
                    elif a.input_dims is not None or a.input_type is not None:
                        a.input_dims = a.input_type = None   # a Raw would keep the whole block alive
                if cat == "kernel":   # its span and its NCCL flag here, not in a second pass over 200k kernels
                    kernels.append(e)
                    kernel_span(ts)
                    kernel_span(ts + dur)
                    kernel_nccl(name[1])
                else:
                    copies.append(e)
            elif cat == "cuda_sync":
                if e.name == "Stream Wait Event" and e.args is not None:
                    e.index = seen + i
                    e.args.input_dims = e.args.input_type = None   # a Raw keeps the bytes it came from alive
                    syncs.append(e)
            elif e.name.startswith(COMM_PREFIXES):
                self._comm_op(e, seen + i, 0)
        self.events += n
        self.seen += len(events)

    def any_kind(self, bit: int) -> bool:
        """Whether a CPU op or annotation read so far has this CpuOps.kinds bit (asked of the distinct names, whose
        kinds add() works out once each: no pass over the ops)."""
        return any(k & bit for cached in (self._kinds, self._note_kinds) for k in cached.values())

    def _comm_op(self, e: Event, index: int, k: int) -> int:
        """Keep e, a collective's op, whole (its record_shapes decoded); -> its CpuOps.kinds byte (k without COMM)."""
        e.index = index
        decode_shapes(e)
        self.comm_ops.append(e)
        return k & 0xFF

    def _refuse(self, e: Event, index: int):
        key, what = ("dur", "a duration (>= 0)") if not 0.0 <= e.dur < TIME_LIMIT else ("ts", "a time")
        raise TraceError(self.path, f"traceEvents[{index}] ({printable(e.name[:40])}): field '{key}' is "
                                    f"{getattr(e, key)!r}, not {what} in us a profiler writes")


def _name_kinds(name: str, cpu_op: bool) -> int:
    """What a CPU op's name says: its CpuOps.kinds byte (CPU_OP where it is a cpu_op, not a user_annotation), plus
    COMM << 8 where it is a collective's (kept as an event too)."""
    return ((COMM << 8 if name.startswith(COMM_PREFIXES) else 0)
            | (CPU_OP if cpu_op else 0)
            | (C10D_OR_PARAM_COMMS if name.startswith(("c10d::", "record_param_comms")) else 0)
            | (PROFILER_STEP if name.startswith("ProfilerStep") else 0)
            | (OPTIMIZER_STEP if name.startswith("Optimizer.step#") else 0)
            | (COMMLIB_STEP if name == "commlib:step" else 0)
            | (OFFCORE if name in OFFCORE_OPS else 0))
