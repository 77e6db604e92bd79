"""Read many ranks' traces at once: one process per core (this one and workers), each reading whole files (read_all).

A rank's trace is parsed in a worker and only its RankTrace (calls, compute spans as an array) comes back, so
the parent never holds a parsed trace and each worker holds one at a time: memory grows with the largest
rank's trace, not with the number of ranks. The workers are plain `python -c "...; _serve()"` processes fed
file names on stdin, not multiprocessing's: its spawn and forkserver start methods re-run the caller's
__main__ in every worker (a script without an `if __name__ == "__main__"` guard would start readers forever),
and fork is unsafe in a process with threads (a Jupyter kernel). Every file has a
deadline; on an error, a dead worker, a timeout or Ctrl-C every worker is killed and waited for.

How many: one per core the process may run on (os.sched_getaffinity), not fewer where the machine is loaded.
Measured (2 cores, 2 x 1M events, benchmarks/diagnose_scale.py's files, 3 busy loops making a load of 3):
diagnose / json.load = 0.43 with two processes, 0.58 with one, against 0.32 and 0.40 quiet: the scheduler
shares a core among the runnable processes, so a reader that takes fewer processes on a loaded machine gets a
smaller share of it, not a faster one.
"""

from __future__ import annotations

import os
import pickle
import selectors
import signal
import struct
import subprocess
import sys
import time

SERIAL_BYTES = 16 << 20   # below this much trace in all, starting workers (~0.3 s) costs more than it saves
_HEADER = struct.Struct("<Q")
_WORKER = "from commlib.profiling.read.parallel import _serve; _serve()"


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0   # read() says what is wrong with it


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # macOS, Windows
        return os.cpu_count() or 1


def read_all(files: list[str], read, *args, workers: int | None = None, timeout_s: float = 600.0) -> list:
    """[read(f, *args) for f in files] (read: a module-level function, as traces.read), in worker processes when
    there are several files, cores, and at least SERIAL_BYTES of them (or workers > 1 is given), else here.
    Each file must be read within timeout_s of its start (TraceError naming it otherwise)."""
    small = workers is None and sum(_size(f) for f in files) < SERIAL_BYTES
    workers = min(len(files), workers or _cores())
    if workers <= 1 or small or os.name == "nt":   # Windows' select() takes sockets only, not pipes
        from commlib.profiling.read import reader

        with reader.time_limit(timeout_s):   # here the deadline is the reader's own, checked block by block
            return [read(f, *args) for f in files]
    return _Pool(workers).map(files, read, args, timeout_s)


class _Pool:
    def __init__(self, n: int):
        self.n = n

    def map(self, files: list[str], read, args: tuple, timeout_s: float) -> list:
        """n - 1 worker processes and this one read the files: the parent reads a file whenever every worker is
        busy (one process start and one transfer fewer, and no core left to a parent that only waits)."""
        from commlib.profiling.read import reader
        from commlib.profiling.read.reader import TraceError

        here = os.path.abspath(__file__)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(here))))   # the clone
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        procs, sel = [], selectors.DefaultSelector()
        out, todo, busy = [None] * len(files), list(range(len(files)))[::-1], {}   # busy: proc -> (i, deadline)
        try:
            for _ in range(self.n - 1):
                p = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
                procs.append(p)
                sel.register(p.stdout, selectors.EVENT_READ, p)
                self._give(p, todo, busy, files, (read, args), timeout_s)
            while busy or todo:
                if todo:   # every worker has a file: this process reads the next one itself
                    i = todo.pop()
                    with reader.time_limit(timeout_s):
                        out[i] = read(files[i], *args)
                wait = 0.0 if todo else min(d for _, d in busy.values()) - time.monotonic()
                ready = sel.select(timeout=max(0.0, wait))
                if not ready and not todo:
                    i = min(busy.values(), key=lambda v: v[1])[0]
                    raise TraceError(files[i], f"not read within {timeout_s:g} s")
                for key, _ in ready:
                    p = key.data
                    i, _ = busy.pop(p)
                    kind, value = self._answer(p)
                    if kind == "died":
                        raise TraceError(files[i], f"the reader process died (exit code {p.wait()})")
                    if kind == "error":
                        raise TraceError(*value)
                    if kind == "crash":   # a bug, still one line naming the file (the CLI's promise)
                        raise TraceError(files[i], f"the reader failed ({value})")
                    out[i] = value
                    self._give(p, todo, busy, files, (read, args), timeout_s)
            return out
        finally:
            sel.close()
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
                p.stdin.close()
                p.stdout.close()

    @staticmethod
    def _give(p, todo, busy, files, task, timeout_s):
        if todo:
            i = todo.pop()
            read, args = task   # a function pickles by name: the worker imports it
            p.stdin.write(pickle.dumps((read, files[i], args)).hex().encode() + b"\n")
            p.stdin.flush()
            busy[p] = (i, time.monotonic() + timeout_s)

    @staticmethod
    def _answer(p):
        head = p.stdout.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return "died", None
        body = p.stdout.read(_HEADER.unpack(head)[0])
        return pickle.loads(body)   # our own worker's answer (below), over a pipe no one else writes to


def _serve() -> None:
    """Worker: for each line on stdin (a hex pickle of (read, path, args), written by _Pool) answer one
    length-prefixed pickle on stdout: ("ok", RankTrace) | ("error", (path, problem)) | ("crash", text)."""
    from commlib.profiling.read import reader
    from commlib.profiling.read.reader import TraceError

    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle: it kills the workers
    reader.HELD = []   # each file's records are freed once its answer is on its way
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        read, path, args = pickle.loads(bytes.fromhex(line.decode()))   # from our parent, over its own pipe
        try:
            answer = ("ok", read(path, *args))
        except TraceError as e:
            answer = ("error", (e.path, e.problem))
        except Exception as e:  # noqa: BLE001  (reported by the parent, with the file)
            answer = ("crash", f"{type(e).__name__}: {e}")
        body = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(_HEADER.pack(len(body)) + body)
        out.flush()
        del answer, body
        reader.HELD.clear()

