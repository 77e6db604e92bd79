"""Flight Recorder dump files: written for torch's analyser, read back as data.

A dump is a pickle, and unpickling runs whatever code the file names (pickle's GLOBAL/REDUCE opcodes import
and call any function). A dump someone sent you is exactly the kind of file a debugging session opens, so
`load()` admits only what a dump holds: torch 2.13 writes it (`_dump_fr_trace`) with dicts, lists, tuples,
strings, numbers, booleans and None, none of which needs an import. Any import a file asks for is refused, with
one line naming the file. Reads are bounded (MAX_BYTES) and only regular files are opened (a FIFO would hang).
What loads is bounded too: a pickle's memo lets a few hundred bytes name one list many times over, a structure
that expands to 2**60 nodes when walked (printed, compared); check_shape() counts what a walk would visit, in time
linear in the file, and refuses more than MAX_NODES or deeper than MAX_DEPTH. read() then checks each entry holds
what table(), arrivals() and the diagnosis read, so none of them meets an int where a dict belongs.
"""

from __future__ import annotations

import io
import os
import pickle
import stat

MAX_BYTES = 256 * 2**20   # a 2000-entry dump with stack traces is a few MB; this is far past any real one
MAX_NODES = 5_000_000     # values a walk visits: a 2000-entry dump with 64-frame stacks is about 10**6
MAX_DEPTH = 16            # dump -> entries -> entry -> frames -> frame -> value is 6 deep
# What each entry must hold for table(), arrivals() and the diagnosis (torch 2.13 writes all four in every entry).
ENTRY_KEYS = {"process_group": (list, tuple), "collective_seq_id": int, "profiling_name": str, "time_created_ns": int}


class DumpRefused(ValueError):
    """A file that is not a Flight Recorder dump, or asks for more than a dump may hold."""


class _DataOnly(pickle.Unpickler):
    def find_class(self, module, name):  # every import: refused (a dump needs none)
        raise pickle.UnpicklingError(f"it asks to import {module}.{name}, which no Flight Recorder dump holds")


def loads(data: bytes, name: str = "<bytes>"):
    """Unpickle plain data only (dict, list, tuple, str, bytes, numbers, bool, None); anything else: DumpRefused."""
    try:
        return _DataOnly(io.BytesIO(data)).load()
    except Exception as e:
        raise DumpRefused(f"{name}: refused, not a Flight Recorder dump ({e})") from None


def check_shape(obj, name: str = "<bytes>") -> None:
    """DumpRefused unless walking obj visits at most MAX_NODES values, at most MAX_DEPTH deep, with no cycle.
    Each distinct container is sized once (a shared one is counted as often as it is referenced), so a DAG that
    expands to 2**60 nodes is measured in microseconds, never walked."""
    size: dict = {}    # id(container) -> (values a walk of it visits, its depth)
    stack = [(obj, False)]
    open_: set = set()
    keep = []           # the containers sized, so that no id is reused while we work
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, (dict, list, tuple)):
            continue
        key = id(node)
        items = list(node.keys()) + list(node.values()) if isinstance(node, dict) else node
        if children_done:
            open_.discard(key)
            subs = [size.get(id(c), (1, 0)) if isinstance(c, (dict, list, tuple)) else (1, 0) for c in items]
            count = 1 + sum(n for n, _ in subs)
            depth = 1 + max((d for _, d in subs), default=0)
            if count > MAX_NODES or depth > MAX_DEPTH:
                why = f"{count} values" if count > MAX_NODES else f"nested {depth} deep"
                raise DumpRefused(f"{name}: refused, not a Flight Recorder dump (walking it visits {why}; a dump "
                                  f"has at most {MAX_NODES} values, {MAX_DEPTH} deep)")
            size[key] = (count, depth)
            keep.append(node)
            continue
        if key in size:
            continue
        if key in open_ or len(open_) >= MAX_DEPTH:
            why = "it contains itself" if key in open_ else f"nested more than {MAX_DEPTH} deep"
            raise DumpRefused(f"{name}: refused, not a Flight Recorder dump ({why})")
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in items if isinstance(c, (dict, list, tuple)) and id(c) not in size)


def check_entries(fr: dict, name: str) -> None:
    """DumpRefused unless every entry is a dict holding ENTRY_KEYS with their types, and sizes/dtypes (where
    present) are lists of int lists / of strings: what table(), arrivals() and the diagnosis read."""
    for i, e in enumerate(fr.get("entries", [])):
        if not isinstance(e, dict):
            raise DumpRefused(f"{name}: refused, entry {i} is a {type(e).__name__}, not a record (a dict)")
        for key, kind in ENTRY_KEYS.items():
            if not isinstance(e.get(key), kind) or isinstance(e.get(key), bool):
                raise DumpRefused(f"{name}: refused, entry {i} has no {key} of type "
                                  f"{getattr(kind, '__name__', 'list')} (got {type(e.get(key)).__name__})")
        pg = e["process_group"]
        if len(pg) != 2 or not all(isinstance(x, str) for x in pg):
            raise DumpRefused(f"{name}: refused, entry {i}'s process_group is not (name, description)")
        for key in ("input_sizes", "output_sizes"):
            v = e.get(key, [])
            if not (isinstance(v, list) and all(isinstance(s, list) and all(isinstance(n, int) for n in s)
                                                for s in v)):
                raise DumpRefused(f"{name}: refused, entry {i}'s {key} is not a list of shapes (lists of ints)")
        for key in ("input_dtypes", "output_dtypes"):
            v = e.get(key, [])
            if not (isinstance(v, list) and all(isinstance(d, str) for d in v)):
                raise DumpRefused(f"{name}: refused, entry {i}'s {key} is not a list of dtype names")
        if not isinstance(e.get("record_id", 0), int):
            raise DumpRefused(f"{name}: refused, entry {i}'s record_id is not an int")


def load(path: str):
    """The data in one dump file, read with loads() and bounded by check_shape(); a non-regular or too large
    file, or one that cannot be read: DumpRefused."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # O_NONBLOCK: a FIFO cannot hang the open
    except OSError as e:
        raise DumpRefused(f"{path}: cannot open it ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)  # before fdopen, which raises IsADirectoryError on a folder
        if not stat.S_ISREG(st.st_mode):
            raise DumpRefused(f"{path}: refused, not a regular file")
        if st.st_size > MAX_BYTES:
            raise DumpRefused(f"{path}: refused, {st.st_size} bytes is more than a dump's {MAX_BYTES}")
        with os.fdopen(fd, "rb") as f:
            fd = None
            data = f.read(MAX_BYTES + 1)  # a /proc file says 0 bytes and may hold more: the read is bounded too
    except OSError as e:  # /proc/self/mem: EIO
        raise DumpRefused(f"{path}: cannot read it ({e.strerror or e})") from None
    finally:
        if fd is not None:
            os.close(fd)
    if len(data) > MAX_BYTES:
        raise DumpRefused(f"{path}: refused, more than a dump's {MAX_BYTES} bytes")
    obj = loads(data, path)
    check_shape(obj, path)
    return obj


def write(snapshots: dict, folder: str, prefix: str = "rank_") -> list[str]:
    """Each rank's records as the file torch writes on a GPU job's timeout (TORCH_NCCL_DUMP_ON_TIMEOUT):
    folder/{prefix}{rank}, a pickle torch's analyser reads: `torchfrtrace folder -p {prefix}`."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for rank, snap in sorted(snapshots.items()):
        if snap and snap.get("fr"):
            path = os.path.join(folder, f"{prefix}{rank}")
            with open(path, "wb") as f:
                pickle.dump(snap["fr"], f)
            paths.append(path)
    return paths


def read(folder: str, prefix: str = "rank_") -> dict:
    """The dumps in folder named {prefix}{rank} (this course's, or a GPU job's written on a watchdog timeout)
    -> {rank: snapshot}. Each is read with load() and check_entries(): a file that is not plain data, or not
    shaped like a dump, is refused (DumpRefused, naming it). A name whose rank is not an ASCII number is refused
    too ('rank_²': str.isdigit() says yes, int() says no)."""
    out = {}
    for name in sorted(os.listdir(folder)):
        tail = name[len(prefix):] if name.startswith(prefix) else ""
        if not tail.isdigit():
            continue  # another file in the folder
        path = os.path.join(folder, name)
        if not (tail.isascii() and len(tail) <= 9):
            raise DumpRefused(f"{path}: refused, {tail!r} is not a rank number (ASCII digits 0-9)")
        fr = load(path)
        if not isinstance(fr, dict) or not isinstance(fr.get("entries", []), list):
            raise DumpRefused(f"{path}: refused, not a Flight Recorder dump (no list of entries)")
        check_entries(fr, path)
        out[int(tail)] = {"fr": fr, "waiting": None, "failed": None, "groups": {}}
    return out
