"""Read one rank's torch.profiler trace into typed records: the only code in commlib that opens a trace file.

    rec = read_records("rank0.json.gz", max_bytes=4 << 30)   # -> Records; TraceError naming the file if not

Streaming and bounded: the file (gzip or plain) is decompressed BLOCK bytes at a time and a file whose decompressed
size passes max_bytes stops there (or past a deadline, time_limit()). Each block's complete events are decoded at
once, in place (no copy of the block), by msgspec into the typed Event (events.py: fields no analysis reads are
skipped by the decoder, never built), then sorted into Records (records.py); what no analysis needs (flow events,
Python frames, CUDA runtime calls other than the launches' times, ...) is dropped there. Splitting a block at an
event boundary: the last `}, {` in it whose prefix decodes as a list of events (a `}, {` inside a string or a nested
list does not decode, so the decoder proves the cut). Linear on any input: each byte is searched for a cut at most
twice (in C), a failed decode is retried only once the pending bytes have doubled, and past SPLIT_LIMIT pending
bytes (no cut decoded for many blocks) the rest is decoded whole, in place. A file whose layout is not torch's
(traceEvents not a top-level key near the start) is decoded whole too: then memory holds the file, up to max_bytes,
and no copy of it.

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
from typing import Any

import msgspec

from commlib import _validate
from commlib.profiling.read.events import Event
from commlib.profiling.read.files import TraceError, blocks, printable  # noqa: F401  (also imported from here)
from commlib.profiling.read.records import Records

MAX_BYTES = 4 << 30   # default decompressed-size limit per file (python -m commlib diagnose --max-bytes)
BLOCK = 4 << 20       # bytes decompressed and decoded at a time
HEAD = 64 << 20       # traceEvents must start within this many bytes to be streamed; else the file is decoded whole
SPLIT_LIMIT = 8 * BLOCK   # bytes pending past which no more cuts are tried (a copy of them is made per try)


class _Head(msgspec.Struct):
    distributedInfo: Any = None
    deviceProperties: Any = None
    network: Any = msgspec.field(default=None, name="commlib_network")   # commlib.network.spec.TRACE_KEY
    untraced: Any = msgspec.field(default=None, name="commlib_untraced")   # jobs/recording.UNTRACED_KEY
    traceEvents: list[Event] = []


class _Whole(msgspec.Struct):
    traceEvents: list[Event]
    distributedInfo: Any = None
    deviceProperties: Any = None
    network: Any = msgspec.field(default=None, name="commlib_network")
    untraced: Any = msgspec.field(default=None, name="commlib_untraced")


_EVENTS = msgspec.json.Decoder(list[Event])
_HEAD = msgspec.json.Decoder(_Head)
_WHOLE = msgspec.json.Decoder(_Whole)
_ARRAY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")   # '}, {'
_BACK = re.compile(rb"\{\s*,\s*\}")   # '}, {' as it reads backwards
CUT_WINDOW = 64 << 10   # bytes searched for cuts at a time, from the end back
_SPACE = re.compile(rb"\S")


def _cuts(buf, start: int, end: int):
    """The index of the '}' of each '}, {' (whitespace allowed) in buf[start:end], last first. The last
    CUT_WINDOW bytes are searched first, in C and with no copy: the cut that decodes is nearly always there.
    Matches cannot overlap (a '}' or '{' ends one), so the rest lie before the first one found there; they are
    searched (or all of buf[start:end], where the tail held none) as one C search over a reversed copy: linear
    however many '{' or '}' the bytes hold."""
    found = [m.start() for m in _CUT.finditer(buf, max(start, end - CUT_WINDOW), end)]
    yield from reversed(found)
    end = found[0] if found else end
    if end <= start:
        return
    rev = buf[end - 1:start - 1 if start else None:-1]
    for m in _BACK.finditer(rev):
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
# In a reader worker, a list: each Records kept past read_records' caller until its answer is sent (parallel.py);
# freeing a 1M-event rank's records takes ~0.1 s, which then falls after the answer, not before it. None (keep
# nothing) everywhere else.
HELD: list | None = None


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
            rec = _read_records(path, max_bytes, deadline)
            if HELD is not None:
                HELD.append(rec)
            return rec
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
                    "network": h.network, "untraced": h.untraced}
            del buf[:m.end() - 1]   # buf[0]: the list's '[' (offset: its place in the file)
            offset, streaming = m.end() - 1, True
        if streaming:
            offset += _take_events(rec, buf, path, offset, done, split)
    prefix = b'{"traceEvents":' if streaming else b""   # buf starts with a '['
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
    rec.untraced = whole.untraced if whole.untraced is not None else head.get("untraced")
    rec.nbytes = done
    return rec


def _take_events(rec: Records, buf: bytearray, path: str, offset: int, done: int, split: dict) -> int:
    """Decode the complete events at the front of buf (after its first byte, '[') into rec, in place, and remove
    them, leaving the ',' after them as the next '['; returns the bytes removed. split: where the search for a
    cut stopped and the size at the last failed decode, so that no byte is searched twice and a failed decode is
    retried only once buf has doubled: linear work on any input (an event bigger than a block, a string full of
    '}, {')."""
    if (split["tried"] and len(buf) < 2 * split["tried"]) or len(buf) > SPLIT_LIMIT:
        return 0   # past SPLIT_LIMIT no cut has decoded for many blocks: the rest is decoded whole, in place
    tries = 0
    for cut in _cuts(buf, max(0, split["scanned"] - 64), len(buf)):
        if tries == 8:   # a cut inside a string or a nested list does not decode: try a few before it
            break
        tries += 1
        after, buf[cut + 1] = buf[cut + 1], 0x5D   # buf[0] is '[': buf[:cut + 2] is the list, decoded in place
        view = memoryview(buf)
        piece = view[:cut + 2]
        try:
            events = _EVENTS.decode(piece)
        except msgspec.ValidationError as e:   # a real event with a field of the wrong type
            raise TraceError(path, _problem(e, offset, done, 0, rec.seen)) from None
        except msgspec.DecodeError:
            piece.release()
            view.release()
            buf[cut + 1] = after
            continue
        rec.add(events)   # which keeps no msgspec.Raw (a view of piece) of them; on a TraceError buf is dropped
        del events
        piece.release()   # no view left to block del buf[...]
        view.release()
        buf[cut + 1] = after
        j = cut + 1
        while buf[j] != 0x2C:   # to the ',' before the next event: it becomes the next list's '['
            j += 1
        del buf[:j]
        buf[0] = 0x5B
        split["scanned"] = split["tried"] = 0
        return j
    split["scanned"] = len(buf)
    if tries:
        split["tried"] = len(buf)
    return 0   # no provable cut in these bytes: wait for more
