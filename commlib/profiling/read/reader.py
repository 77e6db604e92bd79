"""Read one rank's torch.profiler trace into typed records: the only code in commlib that opens a trace file.

    rec = read_records("rank0.json.gz", max_bytes=4 << 30)   # -> Records; TraceError naming the file if not

Streaming and bounded: the file (gzip or plain) is decompressed BLOCK bytes at a time and a file whose
decompressed size passes max_bytes stops there (or past a deadline, time_limit()). Each block's complete
events are decoded at once by msgspec into the typed Event below (fields no analysis reads are skipped by the
decoder, never built), then sorted into Records; what no analysis needs (flow events, Python frames, CUDA
runtime calls other than the launches' times, ...) is dropped there. Splitting a block at an event boundary:
the last `}, {` in it whose prefix decodes as a list of events (a `}, {` inside a string or a nested list does
not decode, so the decoder proves the cut). Linear on any input: each byte is searched for a cut once (in C),
a failed decode is retried only once the pending bytes have doubled, and past SPLIT_LIMIT pending bytes (no
cut decoded for many blocks) the rest is decoded whole, in place. A file whose layout is not torch's
(traceEvents not a top-level key near the start) is decoded whole too: then memory holds the file, up to
max_bytes, and no copy of it.

Why msgspec (0.22.0, BSD): measured on a 100k-event synthetic trace (24 MB, benchmarks/diagnose_scale.py), the
stdlib's json.loads took 0.93 s, orjson.loads 0.55 s, msgspec decoding into these structs 0.26 s (2 loaded
cores): typed decoding skips the unused fields instead of building dicts of them.
"""

from __future__ import annotations

import contextlib
import gc
import re
import sys
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

import msgspec

from commlib import _validate
from commlib.profiling.read.files import TraceError, blocks, printable  # noqa: F401  (TraceError, printable: from here too)

MAX_BYTES = 4 << 30   # default decompressed-size limit per file (python -m commlib diagnose --max-bytes)
BLOCK = 4 << 20       # bytes decompressed and decoded at a time
HEAD = 64 << 20       # traceEvents must start within this many bytes to be streamed; else the file is decoded whole
SPLIT_LIMIT = 8 * BLOCK   # bytes pending past which no more cuts are tried (a copy of them is made per try)
TIME_LIMIT = 1e17     # |ts| and dur in us past this (3,000 years) are not a clock's: no trace writes them
COMM_PREFIXES = ("gloo:", "nccl:", "c10d::", "record_param_comms", "commlib:")
COPIES = ("gpu_memcpy", "gpu_memset")
# CpuOps.kinds bits
CPU_OP, C10D_OR_PARAM_COMMS, PROFILER_STEP = 1, 2, 4
COMM = 8   # (not stored) a name starting with COMM_PREFIXES
OPTIMIZER_STEP = 16   # torch.optim's "Optimizer.step#SGD.step": where a step ends in a trace without ProfilerStep#N
COMMLIB_STEP = 32     # "commlib:step": one training step, marked by commlib's own jobs (several in one ProfilerStep)


class Args(msgspec.Struct, gc=False):
    """The `args` fields some analysis reads (kernels, launches, collective ops); every other one is skipped.
    Collective arguments (torch >= 2.2 writes them on the NCCL kernel and on record_param_comms) are kept as
    written (Any): a later check, not the decoder, decides what an odd value means."""
    # ids are compared, never computed with: any JSON scalar is kept (ROCm traces write the stream as a string)
    external_id: int | str | None = msgspec.field(default=None, name="External id")
    correlation: int | str | None = None
    stream: int | str | None = None
    device: int | str | None = None
    # a "Stream Wait Event" (cuda_sync, with enable_cuda_sync_events): the stream it waits on and the event's record
    wait_on_stream: int | str | None = None
    record_corr: int | str | None = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    # record_shapes' lists: left undecoded (Raw) on the many ops that are not collectives, decoded on the rest
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")


class KernelArgs:
    """A compute kernel's args: only its stream and correlation are read (streams.py); every other field is
    None. A third of an Args' memory, on the commonest event kept (200k of a 1M-event trace)."""
    __slots__ = ("stream", "correlation")
    external_id = device = wait_on_stream = record_corr = collective = in_nelems = out_nelems = group_size = None
    dtype = pg_name = pg_desc = pg_ranks = input_dims = input_type = None

    def __init__(self, stream, correlation):
        self.stream, self.correlation = stream, correlation


class _LazyArgs(Args):
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=None, name="Input type")


class Event(msgspec.Struct, gc=False):
    """One Chrome-trace event: complete events (ph "X") are the ones read; ts and dur in microseconds. gc=False:
    no cycles through it, so the garbage collector need not track a million of them."""
    ph: str | None = None
    cat: str | None = None
    name: str = ""
    ts: float | None = None
    dur: float = 0.0
    pid: int | str | None = None
    tid: int | str | None = None
    args: _LazyArgs | None = None
    index: int = msgspec.field(default=-1, name="__commlib_event_index__")   # its place in traceEvents (set by Records.add)


class _Head(msgspec.Struct):
    distributedInfo: Any = None
    deviceProperties: Any = None
    network: Any = msgspec.field(default=None, name="commlib_network")   # commlib.network.spec.TRACE_KEY
    traceEvents: list[Event] = []


class _Whole(msgspec.Struct):
    traceEvents: list[Event]
    distributedInfo: Any = None
    deviceProperties: Any = None
    network: Any = msgspec.field(default=None, name="commlib_network")


_EVENTS = msgspec.json.Decoder(list[Event])
_HEAD = msgspec.json.Decoder(_Head)
_WHOLE = msgspec.json.Decoder(_Whole)
_ANY = msgspec.json.Decoder()
_ARRAY = re.compile(rb'"traceEvents"\s*:\s*\[')


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
    kernels: list = field(default_factory=list)     # cat "kernel"
    copies: list = field(default_factory=list)      # cat gpu_memcpy / gpu_memset (busy, as HTA counts them)
    launches: Launches = field(default_factory=Launches)   # correlation -> (ts, tid) of the CUDA runtime call
    comm_ops: list = field(default_factory=list)    # names starting with COMM_PREFIXES, any category
    syncs: list = field(default_factory=list)       # cat cuda_sync "Stream Wait Event": waits between streams
    cpu: CpuOps = field(default_factory=CpuOps)
    events: int = 0                                 # complete events with a timestamp, all kept or not
    nbytes: int = 0                                 # decompressed size read
    seen: int = 0                                   # events decoded so far, of any kind
    _names: dict = field(default_factory=dict, repr=False)
    _kinds: dict = field(default_factory=dict, repr=False)   # CPU op name -> _name_kinds(name)

    def add(self, events: list) -> None:
        """Sort one block's decoded events into the records; drop the rest. The per-event work is the reader's
        largest cost after the decode (1M events): CPU ops, the commonest, come first, and what their name
        says (a collective? c10d? a step marker?) is worked out once per distinct name."""
        kernels, copies, comm_ops, syncs = self.kernels, self.copies, self.comm_ops, self.syncs
        launch_corr, launch_ts, launch_tid = self.launches.corr.append, self.launches.ts.append, self.launches.tid.append
        names, kinds_of = self._names, self._kinds
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
                name = e.name
                k = kinds_of.get(name)
                if k is None:
                    k = kinds_of[name] = _name_kinds(name)
                if k & COMM:
                    e.index = seen + i
                    _decode_shapes(e)
                    comm_ops.append(e)
                start(ts)
                end(ts + dur)
                tids(e.tid)
                kinds((cat == "cpu_op") | (k & (C10D_OR_PARAM_COMMS | PROFILER_STEP | OPTIMIZER_STEP | COMMLIB_STEP)))
            elif cat == "kernel" or cat in COPIES:
                e.index = seen + i
                e.name = names.setdefault(e.name, e.name)   # one string per distinct kernel name, not per kernel
                a = e.args
                if a is not None:
                    if cat == "kernel" and e.name[:4].lower() != "nccl":   # compute: its stream and launch only
                        e.args = KernelArgs(a.stream, a.correlation)
                    elif a.input_dims is not None or a.input_type is not None:
                        a.input_dims = a.input_type = None   # a Raw would keep the whole block alive
                (kernels if cat == "kernel" else copies).append(e)
            elif cat == "cuda_runtime":
                if e.args is not None and e.args.correlation is not None:
                    launch_corr(e.args.correlation)
                    launch_ts(ts)
                    launch_tid(e.tid)
            elif cat == "cuda_sync":
                if e.name == "Stream Wait Event" and e.args is not None:
                    e.index = seen + i
                    e.args.input_dims = e.args.input_type = None   # a Raw keeps the bytes it came from alive
                    syncs.append(e)
            elif e.name.startswith(COMM_PREFIXES):
                e.index = seen + i
                _decode_shapes(e)
                comm_ops.append(e)
        self.events += n
        self.seen += len(events)

    def _refuse(self, e: Event, index: int):
        key, what = ("dur", "a duration (>= 0)") if not 0.0 <= e.dur < TIME_LIMIT else ("ts", "a time")
        raise TraceError(self.path, f"traceEvents[{index}] ({printable(e.name[:40])}): field '{key}' is "
                                    f"{getattr(e, key)!r}, not {what} in us a profiler writes")


def _name_kinds(name: str) -> int:
    """What a CPU op's name says, as CpuOps.kinds bits (and COMM: a collective's, kept as an event)."""
    return ((COMM if name.startswith(COMM_PREFIXES) else 0)
            | (C10D_OR_PARAM_COMMS if name.startswith(("c10d::", "record_param_comms")) else 0)
            | (PROFILER_STEP if name.startswith("ProfilerStep") else 0)
            | (OPTIMIZER_STEP if name.startswith("Optimizer.step#") else 0)
            | (COMMLIB_STEP if name == "commlib:step" else 0))


def _decode_shapes(e: Event) -> None:
    a = e.args
    if a is not None:
        a.input_dims = None if a.input_dims is None else _ANY.decode(a.input_dims)
        a.input_type = None if a.input_type is None else _ANY.decode(a.input_type)


_CUT = re.compile(rb"\{\s*,\s*\}")   # '}, {' as it reads backwards
_SPACE = re.compile(rb"\S")


def _cuts(buf, start: int, end: int):
    """The index of the '}' of each '}, {' (whitespace allowed) in buf[start:end], last first. One C search
    over a reversed copy of that window: linear however many '{' or '}' it holds."""
    if end <= start:
        return
    rev = buf[end - 1:start - 1 if start else None:-1]
    for m in _CUT.finditer(rev):
        yield end - 1 - (m.end() - 1)


def _problem(e: Exception, offset: int, total: int, prefix: int = 0, first: int = 0) -> str:
    """A decoder error as one line: where it is in the file (decompressed bytes, or the event's index in
    traceEvents when `first` events came before) and what is wrong."""
    msg = str(e)
    if isinstance(e, msgspec.ValidationError):
        msg = re.sub(r"`\$(?:\.traceEvents)?\[(\d+)\]", lambda m: f"`traceEvents[{first + int(m.group(1))}]", msg)
        return f"not a torch.profiler trace ({msg})"
    if "truncated" in msg.lower():
        return f"truncated JSON: it ends at byte {total} before the trace is complete"
    m = re.search(r"\(byte (\d+)\)", msg)
    where = f" at byte {offset + int(m.group(1)) - prefix}" if m else ""
    return f"not a torch.profiler trace (not JSON{where}: {msg.split(' (byte')[0]})"


def parse_max_bytes(text: str) -> int:
    """'4G' -> 4 << 30, '512M', '1000' (binary multiples, as `bench --max-bytes`); ValueError otherwise."""
    try:
        n = _validate.parse_size(str(text))
    except ValueError:
        n = 0
    if n <= 0:
        raise ValueError(f"--max-bytes must be a size > 0 like 512M, 4G or 1000000, got {text!r}")
    return n


@contextlib.contextmanager
def no_gc():
    """Python's cyclic garbage collector off (then as it was): it would walk every record kept so far each time
    a few hundred more are made, which was 45% of reading a 1M-event trace. Records hold no cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_TIME_LIMIT_S = [None]   # set by time_limit(): the serial path's per-file deadline (a worker process has its own)


@contextlib.contextmanager
def time_limit(timeout_s: float | None):
    """Within it, read_records refuses a file it has not read within timeout_s of its start."""
    was, _TIME_LIMIT_S[0] = _TIME_LIMIT_S[0], timeout_s
    try:
        yield
    finally:
        _TIME_LIMIT_S[0] = was


def read_records(path: str, max_bytes: int = MAX_BYTES, timeout_s: float | None = None) -> Records:
    """One rank's trace -> Records (TraceError naming the file when it cannot be read as a trace, or is not
    read within timeout_s, default time_limit()'s)."""
    max_bytes = _validate.integer("max_bytes", max_bytes, low=1)
    timeout_s = _TIME_LIMIT_S[0] if timeout_s is None else timeout_s
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        with no_gc():
            return _read_records(path, max_bytes, deadline)
    except RecursionError:   # msgspec's own depth limit (Python's recursion limit): no trace nests so deep
        raise TraceError(path, f"not a torch.profiler trace (JSON nested more than {sys.getrecursionlimit()} "
                               "levels deep)") from None
    except UnicodeDecodeError as e:
        raise TraceError(path, f"not a torch.profiler trace (not UTF-8 text: byte {e.object[e.start:e.end]!r} "
                               "in a string)") from None


def _read_records(path: str, max_bytes: int, deadline: float | None) -> Records:
    rec = Records(path)
    buf, offset, streaming, done = bytearray(), 0, None, 0   # offset: file position of buf[0]
    head, split = {}, {"scanned": 0, "tried": 0}
    for block in blocks(path, max_bytes, deadline, BLOCK):
        buf += block
        done += len(block)
        if streaming is None:
            first = _SPACE.search(buf)   # no copy of buf (a file of spaces would be copied block after block)
            if first and buf[first.start()] != 0x7B:   # refused now, not after reading up to max_bytes of it
                raise TraceError(path, f"not a torch.profiler trace (no 'traceEvents' list: it starts with "
                                       f"{bytes(buf[first.start():first.start() + 1])!r} at byte {first.start()}, "
                                       "not a JSON object)")
            m = _ARRAY.search(buf, max(0, len(buf) - len(block) - 64))   # the new bytes only (and a key cut in two)
            if m is None:
                if len(buf) > HEAD:
                    streaming = False   # an unusual layout: decode it whole
                continue
            try:
                h = _HEAD.decode(bytes(buf[:m.end()]) + b"]}")
            except msgspec.DecodeError:
                streaming = False
                continue
            head = {"distributedInfo": h.distributedInfo, "deviceProperties": h.deviceProperties,
                    "network": h.network}
            del buf[:m.end()]
            offset, streaming = m.end(), True
        if streaming:
            offset += _take_events(rec, buf, path, offset, done, split)
    prefix = b'{"traceEvents":[' if streaming else b""
    buf[:0] = prefix   # decoded in place: a copy of what is left would double the peak (a file of spaces)
    try:
        whole = (_HEAD if streaming else _WHOLE).decode(buf)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        if isinstance(e, msgspec.ValidationError) and not streaming:
            raise TraceError(path, "not a torch.profiler trace (no 'traceEvents' list)") from None
        raise TraceError(path, _problem(e, offset, done, len(prefix), rec.seen)) from None
    del buf
    rec.add(whole.traceEvents)
    info = whole.distributedInfo if whole.distributedInfo is not None else head.get("distributedInfo")
    devices = whole.deviceProperties if whole.deviceProperties is not None else head.get("deviceProperties")
    rec.info = info if isinstance(info, dict) else {}
    rec.devices = devices if isinstance(devices, list) else []
    rec.network = whole.network if whole.network is not None else head.get("network")
    rec.nbytes = done
    return rec


def _take_events(rec: Records, buf: bytearray, path: str, offset: int, done: int, split: dict) -> int:
    """Decode the complete events at the front of buf into rec and remove them; returns the bytes removed.
    split: where the search for a cut stopped and the size at the last failed decode, so that no byte is
    searched twice and a failed decode is retried only once buf has doubled: linear work on any input (an
    event bigger than a block, a string full of '}, {')."""
    if (split["tried"] and len(buf) < 2 * split["tried"]) or len(buf) > SPLIT_LIMIT:
        return 0   # past SPLIT_LIMIT no cut has decoded for many blocks: the rest is decoded whole, in place
    tries = 0
    for cut in _cuts(buf, max(0, split["scanned"] - 64), len(buf)):
        if tries == 8:   # a cut inside a string or a nested list does not decode: try a few before it
            break
        tries += 1
        try:
            with memoryview(buf) as view:   # one copy of the block, and no view left to block del buf[...]
                piece = b"".join((b"[", view[:cut + 1], b"]"))
            events = _EVENTS.decode(piece)
        except msgspec.ValidationError as e:   # a real event with a field of the wrong type
            raise TraceError(path, _problem(e, offset, done, 1, rec.seen)) from None
        except msgspec.DecodeError:
            continue
        rec.add(events)
        j = cut + 1
        while buf[j] != 0x2C:   # past the ',' to the next event
            j += 1
        del buf[:j + 1]
        split["scanned"] = split["tried"] = 0
        return j + 1
    split["scanned"] = len(buf)
    if tries:
        split["tried"] = len(buf)
    return 0   # no provable cut in these bytes: wait for more
