"""`Cluster`: N persistent local ranks that run functions defined in a notebook.

    with Cluster(world_size=4) as c:
        c.run(fn, *args, **kwargs)   # fn on every rank, default process group ready; results by rank

What ranks print is shown labelled '[rank r]': grouped in rank order when run() returns
(output="ordered", reproducible), or as each line arrives (output="live", for long runs).

Ranks start once (a zygote imports torch, then forks them) and stay up between run() calls.
A rank that raises -> RankError; no answer in `timeout` seconds -> ClusterTimeout; either way the
ranks are killed and restarted, so the next run() works. Everything listens on 127.0.0.1 only,
on ports the OS picks, unless `host` says otherwise (with a warning).
The processes, the listener and the temp folder live in _launcher.py; rank output in _output.py.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
import pickle
import signal
import socket
import sys
import threading
import time
import warnings
import weakref
from multiprocessing.connection import wait
from numbers import Real

import cloudpickle

from commlib.cluster import diagnosis as _diagnosis, flight_recorder
from commlib.cluster import flight_recorder as _fr
from commlib.cluster.errors import ClusterTimeout, RankDied, RankError
from commlib.cluster.launcher import Launcher
from commlib.cluster.output import RankOutput

BACKENDS = ("auto", "gloo", "nccl")
OUTPUT_MODES = ("ordered", "live")
MAX_WORLD_SIZE = 64
MAX_TIMEOUT_S = 1e6     # ~11.6 days; poll() overflows past ~24.8 days and torch's store clocks before that
_ERROR_GRACE_S = 0.25   # after one rank fails, how long to collect the others' errors
_WAIT_SLICE_S = 0.25    # wake at least this often, so a pending Ctrl-C is handled promptly
_EXIT_REPORT_S = 5.0    # at most this long for the zygote's report of how a dead rank ended (it comes in
                        # milliseconds; a loaded machine can take a second, and then the error says less)
_STILL_PRINTING_S = 1.0  # output this recent at a timeout: forwarding it may be what took the time
_PG_TIMEOUT_MARGIN_S = 30.0  # torch's own collective timeout stays behind ours: we report first


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
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        raise ValueError(f"{name} must be a number of seconds in (0, {MAX_TIMEOUT_S:.0f}], got {value!r}")
    return float(value)


def _check_preload(preload) -> tuple:
    """Cluster(preload=...): module names the rank launcher imports once, so every rank, restarts included,
    starts with them (a lesson that restarts FSDP2 ranks often). Each must be importable here."""
    import importlib.util

    if isinstance(preload, str) or not isinstance(preload, (tuple, list)):
        raise TypeError(f"preload must be a tuple of module names such as ('torch.distributed.fsdp',), "
                        f"got {type(preload).__name__}")
    for name in preload:
        try:
            found = isinstance(name, str) and "," not in name and importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ValueError(f"preload must name importable modules, got {name!r}")
    return tuple(preload)


def check_host(host) -> bool:
    """-> True for a loopback host. Bad values: TypeError/ValueError naming `host`. Any other host
    (0.0.0.0, a LAN address) is the user's explicit choice: allowed, with a warning about the exposure."""
    if not isinstance(host, str) or not host:
        raise TypeError(f"host must be an address string such as '127.0.0.1', got {host!r}")
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)}
    except (OSError, UnicodeError, ValueError) as e:
        raise ValueError(f"host must be an IPv4 address or a name of this machine, such as '127.0.0.1' "
                         f"(the default), got {host!r} ({e})") from None
    if all(ipaddress.ip_address(a).is_loopback for a in addresses):
        return True
    warnings.warn(f"Cluster(host={host!r}) listens on {', '.join(sorted(addresses))}, not only on this machine's "
                  f"loopback: anyone who can reach it can connect to the rendezvous store, which has no "
                  f"authentication. Leave host='127.0.0.1' unless you mean it.", UserWarning, stacklevel=3)
    return False


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
    """N local ranks (torch.distributed over Gloo, or NCCL with one GPU each) kept alive for run().

    One function at a time: run() or restart() called from a second thread while another thread's
    run() is in progress raises RuntimeError at once (it does not queue behind it). close() works
    from any thread; the run() in progress then ends with RankDied.
    """

    def __init__(self, world_size: int = 4, backend: str = "auto", timeout: float = 60.0,
                 start_timeout: float = 120.0, host: str = "127.0.0.1", output: str = "ordered",
                 debug: bool = False, flight_recorder: int | None = flight_recorder.DEFAULT_BUFFER,
                 preload: tuple = ()):
        if isinstance(world_size, bool) or not isinstance(world_size, int):
            raise TypeError(f"world_size must be an int in [1, {MAX_WORLD_SIZE}], got {type(world_size).__name__}")
        if not 1 <= world_size <= MAX_WORLD_SIZE:
            raise ValueError(f"world_size must be an int in [1, {MAX_WORLD_SIZE}], got {world_size}")
        self.timeout = timeout
        self.start_timeout = _check_seconds("start_timeout", start_timeout)
        self.output = output
        if not isinstance(debug, bool):
            raise TypeError(f"debug must be True or False, got {debug!r}")
        self.debug, self.flight_recorder = debug, _fr.check_buffer(flight_recorder)
        self.preload = _check_preload(preload)
        self._loopback = check_host(host)
        self.world_size = world_size
        self.backend = resolve_backend(backend, world_size)
        self.host = host
        self._closed = False
        self._busy = threading.Lock()
        self._generation = 0
        self._task = 0
        self._ranks: list | None = None     # per rank: (conn, pid) of the current generation
        self._state: Launcher | None = None
        self._finalizer = None
        try:
            with _interrupts_held():  # once the launcher exists, its finalizer must exist too
                self._state = Launcher(host)
                self._finalizer = weakref.finalize(self, self._state.shutdown)
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
        with self._one_at_a_time("run"):
            if self._ranks is None:
                self._start_ranks()
            self._task += 1
            ranks = self._ranks
            try:
                message = pickle.dumps(("run", self._task, payload), protocol=pickle.HIGHEST_PROTOCOL)
                for conn, _ in ranks:
                    try:
                        conn.send_bytes(message)
                    except OSError:
                        pass  # a dead rank shows up as EOF in _collect
                return self._collect(ranks, self._task, getattr(fn, "__name__", "fn"))
            except BaseException:  # RankError, ClusterTimeout, KeyboardInterrupt: start over next time
                self._kill_ranks()
                raise

    def restart(self) -> None:
        """Kill every rank and start a fresh set (a new default process group)."""
        if self._closed:
            raise RuntimeError("this Cluster is closed; create a new one")
        with self._one_at_a_time("restart"):
            self._kill_ranks()
            self._start_ranks()

    @property
    def pids(self) -> list[int]:
        """Process id of each rank (empty while the ranks are being restarted)."""
        ranks = self._ranks
        return [pid for _, pid in ranks] if ranks else []

    def close(self) -> None:
        """Stop every rank, what they started, and the zygote; remove the temp folder. Safe to call twice.
        A Ctrl-C meanwhile waits until this is done (about a second at most)."""
        if self._closed:
            return
        self._closed = True
        with _interrupts_held():
            self._kill_ranks()
            if self._finalizer is not None:
                self._finalizer()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._ranks else "restarting")
        return f"Cluster(world_size={self.world_size}, backend={self.backend!r}, timeout={self.timeout}, {state})"

    # ---------------------------------------------------------------------------------- private
    @contextlib.contextmanager
    def _one_at_a_time(self, what: str):
        if not self._busy.acquire(blocking=False):
            raise RuntimeError(f"Cluster.{what}() called while another thread's run() is in progress: "
                               f"a Cluster runs one function at a time (wait for it, or use a second Cluster)")
        try:
            yield
        finally:
            self._busy.release()

    def _start_ranks(self) -> None:
        launcher = self._state
        launcher.ensure_zygote(self.start_timeout, self.preload)
        self._generation += 1
        specs = [dict(rank=r, world_size=self.world_size, backend=self.backend, host=self.host,
                      loopback=self._loopback, port=launcher.port, store_port=launcher.store_port,
                      generation=self._generation, start_timeout=self.start_timeout,
                      pg_timeout=self.timeout + _PG_TIMEOUT_MARGIN_S, stack_dir=launcher.tmpdir,
                      debug=self.debug, fr_buffer=self.flight_recorder,
                      sys_path=list(sys.path))
                 for r in range(self.world_size)]
        launcher.start(specs)
        deadline = time.monotonic() + self.start_timeout
        ranks: list = [None] * self.world_size
        try:
            while any(x is None for x in ranks):
                hello, conn = launcher.next_connection(deadline, f"{self.world_size} ranks to start")
                if hello[0] == "rank" and hello[1] == self._generation:
                    ranks[hello[2]] = (conn, hello[3])
                else:
                    conn.close()  # a straggler from a generation we already gave up on
            self._ranks = ranks
            for rank, (conn, pid) in enumerate(ranks):
                if not conn.poll(max(deadline - time.monotonic(), 0)):
                    raise ClusterTimeout(f"rank {rank} did not initialise torch.distributed within "
                                         f"start_timeout={self.start_timeout} s", [rank])
                try:
                    msg = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    raise self._died(rank, pid, "while starting", deadline) from None
                if msg[0] == "err":
                    raise RankError(rank, f"rank {rank} failed to start:\n{msg[2]}", msg[2])
        except BaseException:
            self._ranks = [x for x in ranks if x is not None]
            self._kill_ranks()
            raise

    def _collect(self, ranks: list, task: int, name: str) -> list:
        conns = {conn: rank for rank, (conn, _) in enumerate(ranks)}
        results: dict[int, object] = {}
        errors: dict[int, RankError] = {}
        lines = RankOutput(live=self.output == "live")
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
                        data = conn.recv_bytes()
                    except (EOFError, OSError):
                        errors[rank] = self._died(rank, ranks[rank][1], f"while running {name}()", deadline)
                    else:
                        try:
                            msg = pickle.loads(data)
                        except Exception as e:  # e.g. a class only the rank could import, a __reduce__ that fails here
                            why = f"{type(e).__name__}: {e}"
                            errors[rank] = RankError(rank, f"rank {rank} returned a value from {name}() that cannot "
                                                     f"be unpickled in this process: {why}", why)
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
            dead = {r: e.args[0].split(": ", 1)[-1].splitlines()[0] for r, e in errors.items() if isinstance(e, RankDied)}
            alive = {r: ranks[r][1] for r in range(self.world_size) if r not in dead}
            snaps = flight_recorder.request_snapshots(alive, self._state.tmpdir, time.monotonic() + 2.0)
            running = [r for r in range(self.world_size) if r not in results and r not in errors]
            diagnosis = _diagnosis.diagnose(snaps, self.world_size, {r: e.remote_traceback for r, e in errors.items()},
                                            stuck=running, dead=dead)
            named = [r for r in diagnosis["ranks"] if r in errors]  # the culprit's own error, if it raised one
            first = min(named or list(dead) or list(errors))
            if diagnosis["kind"] == "unknown" and not diagnosis["ranks"]:  # then the error itself is the best clue
                lines = (errors[first].remote_traceback or errors[first].args[0]).strip().splitlines()
                diagnosis = _diagnosis.diagnose(snaps, self.world_size, headline=(
                    f"rank {first} raised {lines[-1]}" if not isinstance(errors[first], RankDied) else
                    errors[first].args[0].splitlines()[0]) if lines else "")
            others = sorted(set(errors) - {first})
            err = errors[first]
            err.args = (diagnosis["detail"] + "\n" + err.args[0] + (f"\n(ranks {others} failed too)" if others else ""),)
            err.diagnosis, err.snapshots = diagnosis, snaps
            raise err
        if len(results) < self.world_size:
            stuck = [r for r in range(self.world_size) if r not in results]
            now = time.monotonic()
            printing = [r for r in stuck if now - lines.last_at.get(r, -math.inf) < _STILL_PRINTING_S
                        or ranks[r][0].poll(0)]
            message = self._timeout_message(ranks, name, stuck, printing)  # the stacks first: one signal at a time
            snaps = flight_recorder.request_snapshots({r: pid for r, (_, pid) in enumerate(ranks)},
                                                      self._state.tmpdir, time.monotonic() + 2.0)
            diagnosis = _diagnosis.diagnose(snaps, self.world_size, stuck=stuck, headline=message.split(" (a ")[0])
            err = ClusterTimeout(diagnosis["detail"] + "\n" + message, stuck)
            err.diagnosis, err.snapshots = diagnosis, snaps
            raise err
        return [results[r] for r in range(self.world_size)]

    def _died(self, rank: int, pid: int, when: str, deadline: float) -> RankDied:
        code = self._state.exit_code(pid, max(0.0, min(_EXIT_REPORT_S, deadline - time.monotonic())))
        how = _describe_exit(code)
        if code is None and not self._state.zygote_alive():
            how += " (the rank launcher, the zygote, died: the next run() starts a new one)"
        return RankDied(rank, f"rank {rank} (pid {pid}) died {when}: {how}")

    def _timeout_message(self, ranks: list, name: str, stuck: list[int], printing: list[int]) -> str:
        """Say which ranks hung and where: each stuck rank dumps its Python stack before it is killed."""
        msg = f"{name}() got no answer from rank(s) {stuck} within timeout={self.timeout} s "
        if printing:
            msg += (f"while rank(s) {printing} were still printing: forwarding their output took the time "
                    f"(print less, or raise the timeout).")
        else:
            msg += "(a collective some rank never joined? a send without a matching recv?)."
        msg += " The ranks are restarted on the next run()."
        if not hasattr(signal, "SIGUSR1"):
            return msg
        paths = {}
        for rank in stuck:
            path = os.path.join(self._state.tmpdir, f"rank{rank}.txt")
            paths[rank] = (path, os.path.getsize(path) if os.path.exists(path) else 0)
            try:
                os.kill(ranks[rank][1], signal.SIGUSR1)
            except ProcessLookupError:
                pass
        flight_recorder.await_stack_dumps(paths, deadline=time.monotonic() + 2.0)
        for rank, (path, offset) in paths.items():
            try:
                with open(path) as f:
                    f.seek(offset)
                    stack = f.read().strip()
            except OSError:
                stack = ""
            if stack:
                frames = [ln.strip() for ln in stack.splitlines()
                          if ln.strip().startswith("File") and "commlib/cluster/worker.py" not in ln
                          and "commlib/cluster/output.py" not in ln and '"<string>"' not in ln]
                msg += f"\n  rank {rank} was waiting in (innermost first):\n    " + "\n    ".join(frames[:6])
        return msg

    def _kill_ranks(self) -> None:
        """SIGKILL every rank's process group (the rank and all it started), and have the zygote do the
        same for any rank we never heard from (a start cut short)."""
        with _interrupts_held():  # a second Ctrl-C must not leave some ranks alive and forgotten
            ranks, self._ranks = self._ranks, None
            if ranks is None:  # none running (an empty list: a start was cut short, the zygote may have some)
                return
            for conn, pid in ranks:
                if self._state.exit_code(pid, 0) is None:  # not reaped yet, so the group id is still its
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                conn.close()
            self._state.kill_all()


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
