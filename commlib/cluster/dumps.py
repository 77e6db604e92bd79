"""Flight Recorder dump files: written for torch's analyser, read back as data.

A dump is a pickle, and unpickling runs whatever code the file names (pickle's GLOBAL/REDUCE opcodes import
and call any function). A dump someone sent you is exactly the kind of file a debugging session opens, so
`load()` admits only what a dump holds: torch 2.13 writes it (`_dump_fr_trace`) with dicts, lists, tuples,
strings, numbers, booleans and None, none of which needs an import. Any import a file asks for is refused, with
one line naming the file. Reads are bounded (MAX_BYTES) and only regular files are opened (a FIFO would hang).
"""

from __future__ import annotations

import io
import os
import pickle
import stat

MAX_BYTES = 256 * 2**20   # a 2000-entry dump with stack traces is a few MB; this is far past any real one


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


def load(path: str):
    """The data in one dump file, read with loads(); a non-regular or too large file: DumpRefused."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # O_NONBLOCK: a FIFO cannot hang the open
    except OSError as e:
        raise DumpRefused(f"{path}: cannot open it ({e.strerror or e})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise DumpRefused(f"{path}: refused, not a regular file")
        if st.st_size > MAX_BYTES:
            raise DumpRefused(f"{path}: refused, {st.st_size} bytes is more than a dump's {MAX_BYTES}")
        data = f.read(MAX_BYTES + 1)
    return loads(data, path)


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
    -> {rank: snapshot}. Each is read with load(): a file that is not plain data is refused (DumpRefused)."""
    out = {}
    for name in sorted(os.listdir(folder)):
        tail = name[len(prefix):] if name.startswith(prefix) else ""
        if tail.isdigit():
            fr = load(os.path.join(folder, name))
            if not isinstance(fr, dict) or not isinstance(fr.get("entries", []), list):
                raise DumpRefused(f"{os.path.join(folder, name)}: refused, not a Flight Recorder dump "
                                  f"(no list of entries)")
            out[int(tail)] = {"fr": fr, "waiting": None, "failed": None, "groups": {}}
    return out
