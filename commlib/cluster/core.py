"""`Cluster`: N persistent local ranks that run functions defined in a notebook.

    with Cluster(world_size=4) as c:
        c.run(fn, *args, **kwargs)   # fn on every rank, default process group ready; results by rank

What ranks print is shown labelled '[rank r]': grouped in rank order when run() returns
(output="ordered", reproducible), or as each line arrives (output="live", for long runs).

Ranks start once (a zygote imports torch, then forks them) and stay up between run() calls.
A rank that raises -> RankError; no answer in `timeout` seconds -> ClusterTimeout; either way the
ranks are killed and restarted, so the next run() works. Everything listens on 127.0.0.1 only,
on ports the OS picks, unless `host` says otherwise (with a warning).
This file is the rank lifecycle (start, restart, close); run()'s result handling is results.py, the checks of
the arguments options.py, the processes, the listener and the temp folder launcher.py, rank output output.py.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING

from commlib.cluster import flight_recorder
from commlib.cluster import flight_recorder as _fr
from commlib.cluster.errors import ClusterTimeout, RankError
from commlib.cluster.options import (  # noqa: F401  (re-exported: the package face and tests read them here)
    BACKENDS, MAX_TIMEOUT_S, MAX_WORLD_SIZE, OUTPUT_MODES, _check_preload, _check_seconds, check_host, check_network,
    resolve_backend)
from commlib.cluster.results import RunResults

if TYPE_CHECKING:   # imported where a Cluster starts: `import commlib` (a trace reader's worker) never needs them
    from commlib.cluster.launcher import Launcher

_PG_TIMEOUT_MARGIN_S = 30.0  # torch's own collective timeout stays behind ours: we report first


class Cluster(RunResults):
    """N local ranks (torch.distributed over Gloo, or NCCL with one GPU each) kept alive for run().

    One function at a time: run() or restart() called from a second thread while another thread's
    run() is in progress raises RuntimeError at once (it does not queue behind it). close() works
    from any thread; the run() in progress then ends with RankDied.
    """

    def __init__(self, world_size: int = 4, backend: str = "auto", timeout: float = 60.0,
                 start_timeout: float = 120.0, host: str = "127.0.0.1", output: str = "ordered",
                 debug: bool = False, flight_recorder: int | None = flight_recorder.DEFAULT_BUFFER,
                 preload: tuple = (), network=None):
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
        self._network = check_network(network, world_size, self.backend)
        self._owns_network = False
        self._closed = False
        self._busy = threading.Lock()
        self._generation = 0
        self._task = 0
        self._ranks: list | None = None     # per rank: (conn, pid) of the current generation
        self._state: Launcher | None = None
        self._finalizer = None
        try:
            if self._network is not None:  # up until its last Cluster closes; nothing is left if this fails
                self._network.attach()
                self._owns_network = True
            from commlib.cluster.launcher import Launcher

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
        import cloudpickle

        try:
            payload = cloudpickle.dumps((fn if self._network is None else self._network.wrap(fn), args, kwargs))
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
    def network(self):
        """The commlib.network.Network the ranks run on (its .kind, .summary(), .calibrate(cluster)), or None."""
        return self._network

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
            if self._owns_network:
                self._owns_network = False
                self._network.detach()

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
                      sys_path=list(sys.path), **(self._network.placement(r) if self._network else {}))
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
