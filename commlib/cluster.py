"""`Cluster`: N persistent local ranks that run functions defined in a notebook.

    with Cluster(world_size=4) as c:
        c.run(fn, *args, **kwargs)   # fn on every rank, default process group ready; results by rank

What ranks print is shown labelled '[rank r]': grouped in rank order when run() returns
(output="ordered", reproducible), or as each line arrives (output="live", for long runs).

Ranks start once (a zygote imports torch, then forks them) and stay up between run() calls.
A rank that raises -> RankError; no answer in `timeout` seconds -> ClusterTimeout; either way the
ranks are killed and restarted, so the next run() works. Everything listens on 127.0.0.1 only,
on ports the OS picks.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import queue
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from multiprocessing.connection import Listener, wait
from numbers import Real

import cloudpickle

from commlib._worker import command, recv, send

BACKENDS = ("auto", "gloo", "nccl")
OUTPUT_MODES = ("ordered", "live")
MAX_WORLD_SIZE = 64
_ERROR_GRACE_S = 0.25   # after one rank fails, how long to collect the others' errors
_WAIT_SLICE_S = 0.25    # wake at least this often, so a pending Ctrl-C is handled promptly
_PG_TIMEOUT_MARGIN_S = 30.0  # torch's own collective timeout stays behind ours: we report first


class RankError(RuntimeError):
    """A function raised inside a rank. `.rank` names it; the message holds its traceback."""

    def __init__(self, rank: int, message: str, remote_traceback: str = ""):
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback


class ClusterTimeout(TimeoutError):
    """No answer from some ranks within the timeout. `.ranks` lists them."""

    def __init__(self, message: str, ranks: list[int]):
        super().__init__(message)
        self.ranks = ranks


class RankDied(RankError, ClusterTimeout):
    """A rank process ended (killed, crashed) instead of answering: both a RankError and a ClusterTimeout."""

    def __init__(self, rank: int, message: str):
        RankError.__init__(self, rank, message)
        self.ranks = [rank]


def resolve_backend(backend: str, world_size: int) -> str:
    """'auto' -> 'nccl' iff torch sees at least one GPU per rank and NCCL is built in, else 'gloo'."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    has_nccl = dist.is_nccl_available()
    if backend == "auto":
        return "nccl" if has_nccl and gpus >= world_size else "gloo"
    if backend == "nccl" and not (has_nccl and gpus >= world_size):
        raise ValueError(f"backend='nccl' needs one GPU per rank: world_size={world_size}, "
                         f"GPUs visible={gpus}, NCCL available={has_nccl}; use 'gloo' or 'auto'")
    return backend


def _check_seconds(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number of seconds (int or float), got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "its connection closed"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Cluster:
    """N local ranks (torch.distributed over Gloo, or NCCL with one GPU each) kept alive for run()."""

    def __init__(self, world_size: int = 4, backend: str = "auto", timeout: float = 60.0,
                 start_timeout: float = 120.0, host: str = "127.0.0.1", output: str = "ordered"):
        if isinstance(world_size, bool) or not isinstance(world_size, int):
            raise TypeError(f"world_size must be an int in [1, {MAX_WORLD_SIZE}], got {type(world_size).__name__}")
        if not 1 <= world_size <= MAX_WORLD_SIZE:
            raise ValueError(f"world_size must be an int in [1, {MAX_WORLD_SIZE}], got {world_size}")
        self.timeout = timeout
        self.start_timeout = _check_seconds("start_timeout", start_timeout)
        self.output = output
        if not isinstance(host, str) or not host:
            raise TypeError(f"host must be an address string such as '127.0.0.1', got {host!r}")
        self.world_size = world_size
        self.backend = resolve_backend(backend, world_size)
        self.host = host
        self._closed = False
        self._generation = 0
        self._task = 0
        self._ranks: list | None = None     # per rank: (conn, pid) of the current generation
        self._exit_codes: dict[int, int] = {}
        self._state = _State(host)
        self._finalizer = weakref.finalize(self, self._state.shutdown)
        try:
            self._start_ranks()
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------------------------- public
    @property
    def timeout(self) -> float:
        """Seconds run() waits for every rank before ClusterTimeout (settable between runs)."""
        return self._timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self._timeout = _check_seconds("timeout", value)

    @property
    def output(self) -> str:
        """'ordered': rank output grouped by rank when run() ends; 'live': each line as it arrives."""
        return self._output

    @output.setter
    def output(self, value: str) -> None:
        if value not in OUTPUT_MODES:
            raise ValueError(f"output must be one of {OUTPUT_MODES}, got {value!r}")
        self._output = value

    def run(self, fn, *args, **kwargs) -> list:
        """fn(*args, **kwargs) on every rank; the results as a list in rank order."""
        if self._closed:
            raise RuntimeError("this Cluster is closed; create a new one")
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        try:
            payload = cloudpickle.dumps((fn, args, kwargs))
        except Exception as e:
            raise TypeError(f"cannot send fn and its arguments to the ranks (pickling failed): {e!r}") from e
        if self._ranks is None:
            self._start_ranks()
        self._task += 1
        try:
            for rank, (conn, _) in enumerate(self._ranks):
                try:
                    send(conn, ("run", self._task, payload))
                except OSError:
                    pass  # a dead rank shows up as EOF in _collect
            return self._collect(self._task, getattr(fn, "__name__", "fn"))
        except BaseException:  # RankError, ClusterTimeout, KeyboardInterrupt: start over next time
            self._kill_ranks()
            raise

    def restart(self) -> None:
        """Kill every rank and start a fresh set (a new default process group)."""
        self._kill_ranks()
        self._start_ranks()

    @property
    def pids(self) -> list[int]:
        """Process id of each rank (empty while the ranks are being restarted)."""
        return [pid for _, pid in self._ranks] if self._ranks else []

    def close(self) -> None:
        """Stop every rank and the zygote. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._kill_ranks()
        self._finalizer()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._ranks else "restarting")
        return f"Cluster(world_size={self.world_size}, backend={self.backend!r}, timeout={self.timeout}, {state})"

    # ---------------------------------------------------------------------------------- private
    def _start_ranks(self) -> None:
        st = self._state
        st.ensure_zygote(self.start_timeout)
        self._generation += 1
        specs = [dict(rank=r, world_size=self.world_size, backend=self.backend, host=self.host,
                      port=st.port, store_port=st.store_port, generation=self._generation,
                      start_timeout=self.start_timeout, pg_timeout=self.timeout + _PG_TIMEOUT_MARGIN_S,
                      stack_dir=st.tmpdir, sys_path=list(sys.path))
                 for r in range(self.world_size)]
        send(st.zygote_conn, ("start", specs))
        deadline = time.monotonic() + self.start_timeout
        ranks: list = [None] * self.world_size
        try:
            while any(x is None for x in ranks):
                hello, conn = st.next_connection(deadline, f"{self.world_size} ranks to start")
                if hello[0] == "rank" and hello[1] == self._generation:
                    ranks[hello[2]] = (conn, hello[3])
                else:
                    conn.close()  # a straggler from a generation we already gave up on
            self._ranks = ranks
            for rank, (conn, pid) in enumerate(ranks):
                remaining = deadline - time.monotonic()
                if not conn.poll(max(remaining, 0)):
                    raise ClusterTimeout(f"rank {rank} did not initialise torch.distributed within "
                                         f"start_timeout={self.start_timeout} s", [rank])
                try:
                    msg = recv(conn)
                except (EOFError, OSError):
                    raise RankDied(rank, f"rank {rank} (pid {pid}) died while starting: "
                                   f"{_describe_exit(self._wait_exit_code(pid))}") from None
                if msg[0] == "err":
                    raise RankError(rank, f"rank {rank} failed to start:\n{msg[2]}", msg[2])
        except BaseException:
            self._ranks = [x for x in ranks if x is not None]
            self._kill_ranks()
            raise

    def _collect(self, task: int, name: str) -> list:
        conns = {conn: rank for rank, (conn, _) in enumerate(self._ranks)}
        results: dict[int, object] = {}
        errors: dict[int, RankError] = {}
        lines = _RankOutput(live=self.output == "live")
        deadline = time.monotonic() + self.timeout
        first_error_at = None
        try:
            while len(results) + len(errors) < self.world_size:
                now = time.monotonic()
                limit = deadline if first_error_at is None else min(deadline, first_error_at + _ERROR_GRACE_S)
                if now >= limit:
                    break
                pending = [c for c, r in conns.items() if r not in results and r not in errors]
                for conn in wait(pending, timeout=min(limit - now, _WAIT_SLICE_S)):
                    rank = conns[conn]
                    try:
                        msg = recv(conn)
                    except (EOFError, OSError):
                        pid = self._ranks[rank][1]
                        errors[rank] = RankDied(rank, f"rank {rank} (pid {pid}) died while running "
                                                f"{name}(): {_describe_exit(self._wait_exit_code(pid))}")
                    else:
                        if msg[0] == "out":
                            lines.write(rank, msg[1], msg[2])
                            continue
                        if msg[1] != task:
                            continue
                        if msg[0] == "ok":
                            results[rank] = msg[2]
                        else:
                            errors[rank] = RankError(rank, f"rank {rank} raised in {name}():\n{msg[2]}", msg[2])
                    if rank in errors and first_error_at is None:
                        first_error_at = time.monotonic()
        finally:
            lines.flush()
        if errors:  # a dead rank is the cause of its peers' "connection reset" errors: name it first
            dead = [r for r, e in errors.items() if isinstance(e, RankDied)]
            first = min(dead or errors)
            others = sorted(set(errors) - {first})
            err = errors[first]
            if others:
                err.args = (err.args[0] + f"\n(ranks {others} failed too)",)
            raise err
        if len(results) < self.world_size:
            stuck = [r for r in range(self.world_size) if r not in results]
            raise ClusterTimeout(self._timeout_message(name, stuck), stuck)
        return [results[r] for r in range(self.world_size)]

    def _timeout_message(self, name: str, stuck: list[int]) -> str:
        """Say which ranks hung and where: each stuck rank dumps its Python stack before it is killed."""
        msg = (f"{name}() got no answer from rank(s) {stuck} within timeout={self.timeout} s "
               f"(a collective some rank never joined? a send without a matching recv?). "
               f"The ranks are restarted on the next run().")
        if not hasattr(signal, "SIGUSR1"):
            return msg
        paths = {}
        for rank in stuck:
            path = os.path.join(self._state.tmpdir, f"rank{rank}.txt")
            paths[rank] = (path, os.path.getsize(path) if os.path.exists(path) else 0)
            try:
                os.kill(self._ranks[rank][1], signal.SIGUSR1)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
        for rank, (path, offset) in paths.items():
            try:
                with open(path) as f:
                    f.seek(offset)
                    stack = f.read().strip()
            except OSError:
                stack = ""
            if stack:
                frames = [ln.strip() for ln in stack.splitlines()
                          if ln.strip().startswith("File") and "commlib/_worker.py" not in ln
                          and '"<string>"' not in ln]
                msg += f"\n  rank {rank} was waiting in (innermost first):\n    " + "\n    ".join(frames[:6])
        return msg

    def _wait_exit_code(self, pid: int, wait_s: float = 1.0) -> int | None:
        deadline = time.monotonic() + wait_s
        while pid not in self._exit_codes and time.monotonic() < deadline:
            self._state.poll_zygote(self._exit_codes, 0.05)
        return self._exit_codes.get(pid)

    def _kill_ranks(self) -> None:
        if not self._ranks:
            self._ranks = None
            return
        with _interrupts_held():  # a second Ctrl-C must not leave some ranks alive and forgotten
            for conn, pid in self._ranks:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                conn.close()
            self._ranks = None


@contextlib.contextmanager
def _interrupts_held():
    """Hold Ctrl-C (a kernel interrupt is SIGINT too) until the block is done, then deliver it. Only the main
    thread handles signals, and only a handler set from Python can be put back: elsewhere, just run."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    held = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            if callable(previous):
                previous(signal.SIGINT, held[0])  # Python's default handler raises KeyboardInterrupt here
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)


class _RankOutput:
    """Print what ranks print, whole lines labelled '[rank r]': as they come (live) or by rank at flush."""

    def __init__(self, live: bool):
        self.live = live
        self.partial: dict[tuple[int, str], str] = {}
        self.held: dict[tuple[int, str], list[str]] = {}

    def write(self, rank: int, stream: str, text: str) -> None:
        *full, rest = (self.partial.get((rank, stream), "") + text).split("\n")
        self.partial[(rank, stream)] = rest
        for line in full:
            self._emit(rank, stream, line)

    def _emit(self, rank: int, stream: str, line: str) -> None:
        if self.live:
            print(f"[rank {rank}] {line}", file=sys.stdout if stream == "stdout" else sys.stderr)
        else:
            self.held.setdefault((rank, stream), []).append(line)

    def flush(self) -> None:
        for (rank, stream), rest in self.partial.items():
            if rest:
                self._emit(rank, stream, rest)
        self.partial.clear()
        for rank, stream in sorted(self.held):
            out = sys.stdout if stream == "stdout" else sys.stderr
            print("".join(f"[rank {rank}] {line}\n" for line in self.held[rank, stream]), end="", file=out)
        self.held.clear()


class _State:
    """What outlives rank restarts: the listener, the rendezvous store, the zygote, a temp dir.

    Kept apart from Cluster so weakref.finalize can shut it down when the Cluster is collected
    or the interpreter exits.
    """

    def __init__(self, host: str):
        import torch.distributed as dist

        self.authkey = secrets.token_bytes(32)
        self.tmpdir = tempfile.mkdtemp(prefix="commlib-")
        self.listener = Listener((host, 0), authkey=self.authkey)
        self.port = self.listener.address[1]
        self.incoming: queue.Queue = queue.Queue()
        threading.Thread(target=self._accept, name="commlib-accept", daemon=True).start()
        # The rendezvous store of torch.distributed, on a socket we bound ourselves: host only.
        self.store_socket = socket.create_server((host, 0))
        self.store_port = self.store_socket.getsockname()[1]
        self.store = dist.TCPStore(host, self.store_port, None, True, datetime.timedelta(seconds=300),
                                   wait_for_workers=False, master_listen_fd=self.store_socket.fileno())
        self.zygote: subprocess.Popen | None = None
        self.zygote_conn = None

    def _accept(self) -> None:
        while True:
            try:
                conn = self.listener.accept()
            except OSError:  # listener closed
                return
            except Exception:  # a peer that failed authentication
                continue
            self.incoming.put(conn)

    def next_connection(self, deadline: float, what: str):
        """The next authenticated connection and its hello message, or ClusterTimeout at deadline."""
        while True:
            try:
                conn = self.incoming.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                raise ClusterTimeout(f"timed out waiting for {what}", []) from None
            if conn.poll(max(deadline - time.monotonic(), 0.001)):
                try:
                    return recv(conn), conn
                except (EOFError, OSError):
                    pass
            conn.close()

    def ensure_zygote(self, start_timeout: float) -> None:
        if self.zygote is not None and self.zygote.poll() is None:
            return
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.zygote = subprocess.Popen(command(self.listener.address[0], str(self.port)),
                                       stdin=subprocess.PIPE, env=env)
        self.zygote.stdin.write(self.authkey.hex().encode() + b"\n")
        self.zygote.stdin.close()
        deadline = time.monotonic() + start_timeout
        while True:
            hello, conn = self.next_connection(deadline, "the rank launcher (zygote) to start")
            if hello[0] == "zygote" and hello[1] == self.zygote.pid:
                self.zygote_conn = conn
                return
            conn.close()

    def poll_zygote(self, exit_codes: dict, timeout: float) -> None:
        """Read the zygote's reports of rank exits into exit_codes (pid -> code)."""
        conn = self.zygote_conn
        try:
            while conn is not None and conn.poll(timeout):
                msg = recv(conn)
                if msg[0] == "exit":
                    exit_codes[msg[1]] = msg[2]
                timeout = 0
        except (EOFError, OSError):
            self.zygote_conn = None

    def shutdown(self) -> None:
        if self.zygote is not None:
            try:
                send(self.zygote_conn, ("close",))
            except (OSError, AttributeError, ValueError):
                pass
            try:
                self.zygote.wait(5)
            except subprocess.TimeoutExpired:
                self.zygote.kill()
                self.zygote.wait(5)
            self.zygote = None
        if self.zygote_conn is not None:
            self.zygote_conn.close()
            self.zygote_conn = None
        self.listener.close()
        self.store_socket.close()
        self.store = None
        shutil.rmtree(self.tmpdir, ignore_errors=True)
