"""A trace file's bytes, and the one-line error that names it: regular files only, read a block at a time,
gzip decompressed through zlib (so an error can say how much decompressed before it), bounded in size and time.

    for block in blocks("rank0.json.gz", max_bytes=4 << 30):   # TraceError("rank0.json.gz: ...") if not
        ...
"""

from __future__ import annotations

import os
import stat
import time
import zlib

BLOCK = 8 << 20       # decompressed bytes handed on at a time
CHUNK = 1 << 20       # compressed bytes read at a time (a gzip file)


class TraceError(ValueError):
    """A file that cannot be read as one rank of the job: str() is one line, 'PATH: problem'."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{printable(path)}: {problem}")
        self.path, self.problem = path, problem

    def __reduce__(self):  # raised in a worker process, re-raised in the parent
        return TraceError, (self.path, self.problem)


def printable(text: str) -> str:
    """text with each character that does not print escaped as repr escapes it ('\\n', '\\x1b'): a name with a
    newline or an ANSI escape from a file stays on one line and cannot rewrite the terminal."""
    text = str(text)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")


def _open_regular(path: str):
    """The file, refused unless it is a regular file (a FIFO, socket, device or folder would hang the read or
    never end): checked before opening, and again on what was opened (without blocking), in case it changed."""
    try:
        kind = _kind(os.stat(path).st_mode)
        if kind is None:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            kind = _kind(os.fstat(fd).st_mode)
            if kind is not None:
                os.close(fd)
    except OSError as e:
        raise TraceError(path, f"cannot read it ({e.strerror or e})") from None
    if kind is not None:
        raise TraceError(path, f"{kind}, not a trace file (only regular files are read)")
    return os.fdopen(fd, "rb")


def blocks(path: str, max_bytes: int, deadline: float | None = None, block: int = BLOCK):
    """The file's decompressed bytes, `block` bytes at most at a time; TraceError past max_bytes, past deadline
    (time.monotonic()), or where a gzip stream ends early or is followed by what is not gzip (naming the byte
    offset and what decompressed before it)."""
    with _open_regular(path) as f:
        gz = f.read(2) == b"\x1f\x8b"
        f.seek(0)
        total = 0
        for piece in (_gunzip(f, path, lambda: total, block) if gz else iter(lambda: f.read(block), b"")):
            total += len(piece)
            if total > max_bytes:
                raise TraceError(path, f"more than {max_bytes} bytes{' once decompressed' if gz else ''}: the "
                                       "limit (--max-bytes to raise it)")
            if deadline is not None and time.monotonic() > deadline:
                raise TraceError(path, f"not read within the time limit ({total} bytes read)")
            yield piece


def _gunzip(f, path: str, done, block: int):
    """A gzip file's members, decompressed `block` bytes at most at a time (zlib, so that an error can say how
    much decompressed before it: done() is the count so far)."""
    d, pending = zlib.decompressobj(31), b""
    try:
        while True:
            if not pending:
                pending = f.read(CHUNK)
                if not pending:
                    if d.eof:
                        return
                    raise TraceError(path, f"truncated gzip file: it ends at byte {f.tell()} before its gzip "
                                           f"stream does ({done()} bytes decompressed)")
            if d.eof:   # one member ended: another member, zero padding, or something that is not gzip
                if pending[:2] == b"\x1f\x8b" or (len(pending) == 1 and pending == b"\x1f"):
                    d = zlib.decompressobj(31)
                elif pending.strip(b"\0"):
                    raise TraceError(path, f"damaged gzip file: {len(pending)}+ bytes at byte "
                                           f"{f.tell() - len(pending)} are not gzip, after the gzip stream ended "
                                           f"({done()} bytes decompressed)")
                else:
                    pending = b""
                    continue
            try:
                out = d.decompress(pending, block)
            except zlib.error as e:
                raise TraceError(path, f"damaged gzip file: near byte {f.tell() - len(pending)} ({done()} bytes "
                                       f"decompressed; {e})") from None
            pending = d.unused_data if d.eof else d.unconsumed_tail
            if out:
                yield out
    except OSError as e:
        raise TraceError(path, f"cannot read it ({e.strerror or e})") from None
