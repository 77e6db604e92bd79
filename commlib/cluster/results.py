"""How Cluster.run() gathers what the ranks answer: results in rank order, or the one error that names
the culprit (a dead rank first), with a diagnosis from the Flight Recorder; a timeout says where each stuck rank
waited. A mixin: Cluster keeps the rank lifecycle (start, restart, close) in core.py."""

from __future__ import annotations

import math
import os
import pickle
import signal
import time
from multiprocessing.connection import wait

from commlib.cluster import diagnosis as _diagnosis, flight_recorder
from commlib.cluster.errors import ClusterTimeout, RankDied, RankError
from commlib.cluster.output import RankOutput

_ERROR_GRACE_S = 0.25   # after one rank fails, how long to collect the others' errors
_WAIT_SLICE_S = 0.25    # wake at least this often, so a pending Ctrl-C is handled promptly
_EXIT_REPORT_S = 5.0    # at most this long for the zygote's report of how a dead rank ended (it comes in
                        # milliseconds; a loaded machine can take a second, and then the error says less)
_STILL_PRINTING_S = 1.0  # output this recent at a timeout: forwarding it may be what took the time


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "its connection closed"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class RunResults:
    """Cluster's result handling; needs world_size, timeout, output and _state (the Launcher)."""

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
