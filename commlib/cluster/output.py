"""What ranks print, shown in the notebook labelled '[rank r]'.

In a rank (RankStreams), sys.stdout and sys.stderr are line-buffered UTF-8 text streams over pipes of
their own: real files, so fileno() works and a subprocess can write to them too. One thread forwards
whatever the pipes hold, many lines per message ("out", stream, bytes). Before a task's result is
sent the rank drains the pipes, so a task's output always comes before its result; what threads print
later is forwarded the same way, labelled, and shown with the next run().

In the parent, RankOutput cuts those bytes into lines and prints them labelled: grouped in rank
order when run() ends (ordered), or as they arrive (live).
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import re
import select
import sys
import tempfile
import threading
import time

STREAMS = ("stdout", "stderr")
# What torch's C++ profiler (Kineto) writes straight to file descriptor 2, with times and pids: its stages
# ('profiler_start/stop', USDT, STAGE, INFO, WARNING lines) and, in torch's CUDA build on a machine without a
# GPU driver, its probe of the GPUs ("ERROR:... DeviceProperties.cpp:50] gpuGetDeviceCount failed with code
# 35", cudaErrorInsufficientDriver). Nothing a learner can act on: dropped where the course runs a profiler.
PROFILER_CHATTER = re.compile(r"^(USDT|STAGE|INFO|WARNING):\d{4}-\d\d-\d\d [\d:]+ \d+:\d+ \S+\] "
                              r"|^ERROR:\d{4}-\d\d-\d\d [\d:]+ \d+:\d+ DeviceProperties\.cpp:\d+\] "
                              r"gpuGetDeviceCount failed")
_CHUNK = 1 << 16
_CHUNKS_PER_MESSAGE = 16


class RankStreams:
    """A rank's stdout and stderr: text streams over pipes, forwarded over `conn` (sends under `lock`)."""

    def __init__(self, conn, lock: threading.Lock, send_fn):
        self.conn, self.lock, self.send = conn, lock, send_fn
        self.files, self._readers, self._writers = {}, {}, {}
        for name in STREAMS:
            r, w = os.pipe()
            os.set_blocking(r, False)
            self._readers[name], self._writers[name] = r, w  # w stays open: the pipe outlives a closed stream
            self.files[name] = self._open(name)
        threading.Thread(target=self._pump, name="commlib-output", daemon=True).start()

    def _open(self, name: str):
        return io.open(os.dup(self._writers[name]), "w", buffering=1, encoding="utf-8", errors="backslashreplace")

    def install(self) -> None:
        """Make them sys.stdout/sys.stderr again (a task may have replaced or closed them)."""
        for name in STREAMS:
            if self.files[name].closed:
                self.files[name] = self._open(name)
        sys.stdout, sys.stderr = self.files["stdout"], self.files["stderr"]

    def _pump(self) -> None:
        fds = list(self._readers.values())
        while True:
            ready, _, _ = select.select(fds, [], [])
            with self.lock:
                self._drain(ready)

    def _drain(self, fds=None) -> None:
        """Forward what the pipes hold now, one message per stream (call with the lock held)."""
        for name, fd in self._readers.items():
            if fds is not None and fd not in fds:
                continue
            chunks = []
            for _ in range(_CHUNKS_PER_MESSAGE):  # bounded: a subprocess printing forever must not hold us here
                try:
                    chunks.append(os.read(fd, _CHUNK))  # never b"": we hold a write end ourselves
                except BlockingIOError:
                    break
            if chunks:
                self.send(self.conn, ("out", name, b"".join(chunks)))

    def send_after_output(self, reply: bytes) -> None:
        """Send a task's reply once everything printed so far has gone out before it."""
        for f in self.files.values():
            try:
                f.flush()  # outside the lock: a full pipe waits for the pump, which needs the lock
            except ValueError:  # closed by the task
                pass
        with self.lock:
            self._drain()
            self.conn.send_bytes(reply)


class RankOutput:
    """Print rank output as whole lines labelled '[rank r]': as they come (live) or by rank at flush."""

    def __init__(self, live: bool):
        self.live = live
        self.decoders: dict[tuple[int, str], codecs.IncrementalDecoder] = {}
        self.partial: dict[tuple[int, str], str] = {}
        self.held: dict[tuple[int, str], list[str]] = {}
        self.last_at: dict[int, float] = {}   # rank -> when its output last arrived (monotonic)

    def write(self, rank: int, stream: str, data: bytes) -> None:
        self.last_at[rank] = time.monotonic()
        key = (rank, stream)
        if key not in self.decoders:  # a character may be split between two messages
            self.decoders[key] = codecs.getincrementaldecoder("utf-8")("replace")
        *full, self.partial[key] = (self.partial.get(key, "") + self.decoders[key].decode(data)).split("\n")
        if full:
            self._emit(rank, stream, full)

    def _emit(self, rank: int, stream: str, lines: list[str]) -> None:
        if self.live:
            _stream(stream).write("".join(f"[rank {rank}] {line}\n" for line in lines))
        else:
            self.held.setdefault((rank, stream), []).extend(lines)

    def flush(self) -> None:
        for key, decoder in self.decoders.items():
            self.partial[key] = self.partial.get(key, "") + decoder.decode(b"", final=True)
        for (rank, stream), rest in self.partial.items():
            if rest:
                self._emit(rank, stream, [rest])
        self.partial.clear()
        for rank, stream in sorted(self.held):
            _stream(stream).write("".join(f"[rank {rank}] {line}\n" for line in self.held[rank, stream]))
        self.held.clear()


def _stream(name: str):
    return sys.stdout if name == "stdout" else sys.stderr


@contextlib.contextmanager
def dropping_stderr_lines(pattern):
    """Inside a rank: while the block runs, lines that C++ code writes straight to file descriptor 2 (past
    sys.stderr) and that match `pattern` (a compiled regex) are dropped; any other line is passed on to stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as catch:
        os.dup2(catch.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            catch.seek(0)
            kept = [ln for ln in catch.read().decode(errors="replace").splitlines() if not pattern.match(ln)]
            if kept:
                print("\n".join(kept), file=sys.stderr)
