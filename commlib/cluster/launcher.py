"""What a Cluster keeps across rank restarts: the listener, the rendezvous store, the zygote, a temp folder.

    launcher = Launcher("127.0.0.1")        # listener + store bound on host, ports chosen by the OS
    launcher.ensure_zygote(start_timeout)   # the process that imports torch once and forks the ranks
    launcher.start(specs); hello, conn = launcher.next_connection(deadline, "ranks")
    launcher.exit_code(pid, wait_s)         # how a rank ended, from the zygote's reports
    launcher.shutdown()                     # ranks, zygote, sockets, temp folder: gone, in about a second

A thread reads the zygote's exit reports as they come, so they never pile up in the socket. The temp
folder (stack dumps of stuck ranks) is named commlib-PID-*, PID being this process: the zygote removes
it if this process dies, and a later Launcher removes any whose PID is gone (a zygote killed too).
Kept apart from Cluster so weakref.finalize can shut it down when the Cluster is collected or the
interpreter exits.
"""

from __future__ import annotations

import collections
import datetime
import os
import queue
import re
import secrets
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time

from commlib.cluster.errors import ClusterTimeout
from commlib.cluster.listener import AuthListener
from commlib.cluster.worker import PRELOAD_ENV, command, recv, send

ZYGOTE_EXIT_S = 1.0       # after "close", how long the zygote gets to kill the ranks before SIGKILL
_EXIT_CODES_KEPT = 4096   # recent exit reports remembered (a few generations of the largest world)
_POLL_S = 0.25           # while waiting for a connection, check this often that the zygote still runs
_TMPDIR = re.compile(r"commlib-(\d+)-\w+")


def sweep_stale_tmpdirs(root: str | None = None) -> list[str]:
    """Remove this user's commlib-PID-* folders whose PID no longer runs -> the paths removed.
    A folder whose owner lives (or may: another user's, a PID we cannot signal) is never touched."""
    root = root or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        m = _TMPDIR.fullmatch(name)
        if not m:
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            os.kill(int(m.group(1)), 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except (OSError, OverflowError):
            continue
    return removed


class Launcher:
    """Listener, store, zygote and temp folder of one Cluster (see the module docstring)."""

    def __init__(self, host: str):
        import torch.distributed as dist

        self.authkey = secrets.token_bytes(32)
        self.listener = self.store_socket = self.store = None
        self.zygote: subprocess.Popen | None = None
        self.zygote_conn = None
        self._reader: threading.Thread | None = None
        self._exits: collections.OrderedDict[int, int] = collections.OrderedDict()
        self._exits_changed = threading.Condition()
        sweep_stale_tmpdirs()
        self.tmpdir = tempfile.mkdtemp(prefix=f"commlib-{os.getpid()}-")
        try:
            try:
                self.listener = AuthListener(host, self.authkey)
                # The rendezvous store of torch.distributed, on a socket we bound ourselves: host only.
                self.store_socket = socket.create_server((host, 0))
            except OSError as e:
                raise ValueError(f"host={host!r}: cannot listen there ({e.strerror or e}); "
                                 f"use an address of this machine such as '127.0.0.1'") from None
            self.port = self.listener.address[1]
            self.store_port = self.store_socket.getsockname()[1]
            self.store = dist.TCPStore(host, self.store_port, None, True, datetime.timedelta(seconds=300),
                                       wait_for_workers=False, master_listen_fd=self.store_socket.fileno())
        except BaseException:
            self.shutdown()
            raise

    # ------------------------------------------------------------------------------- connections
    def next_connection(self, deadline: float, what: str):
        """The next authenticated connection and its hello message; ClusterTimeout at deadline, or as
        soon as the zygote has died (nobody else is coming then)."""
        while True:
            try:
                conn = self.listener.incoming.get(timeout=max(min(deadline - time.monotonic(), _POLL_S), 0.001))
            except queue.Empty:
                code = self.zygote.poll() if self.zygote is not None else None
                if code is not None:
                    raise ClusterTimeout(f"the rank launcher (zygote) ended ({code}) while waiting for {what}; "
                                         f"see its error above", []) from None
                if time.monotonic() >= deadline:
                    raise ClusterTimeout(f"timed out waiting for {what}", []) from None
                continue
            if conn.poll(max(deadline - time.monotonic(), 0.001)):
                try:
                    return recv(conn), conn
                except (EOFError, OSError):
                    pass
            conn.close()

    # ----------------------------------------------------------------------------------- zygote
    def zygote_alive(self) -> bool:
        return self.zygote is not None and self.zygote.poll() is None and self._reader is not None \
            and self._reader.is_alive()

    def ensure_zygote(self, start_timeout: float, preload: tuple = ()) -> None:
        """Start the zygote unless it runs; preload: modules it imports after torch (worker.PRELOAD_ENV)."""
        if self.zygote_alive():
            return
        self._stop_zygote()
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        env[PRELOAD_ENV] = ",".join(preload)
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # holds commlib/
        env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        # A session of its own: a signal to this process's group (a terminal's Ctrl-C, a kernel manager
        # killing the group) does not reach it, so it is always the zygote that cleans up the ranks.
        self.zygote = subprocess.Popen(command(self.listener.address[0], str(self.port), self.tmpdir),
                                       stdin=subprocess.PIPE, env=env, start_new_session=True)
        self.zygote.stdin.write(self.authkey.hex().encode() + b"\n")
        self.zygote.stdin.close()
        deadline = time.monotonic() + start_timeout
        while True:
            hello, conn = self.next_connection(deadline, "the rank launcher (zygote) to start")
            if hello[0] == "zygote" and hello[1] == self.zygote.pid:
                break
            conn.close()
        self.zygote_conn = conn
        self._reader = threading.Thread(target=self._read_exits, args=(conn,), name="commlib-exits", daemon=True)
        self._reader.start()

    def _read_exits(self, conn) -> None:
        """Keep the zygote's exit reports (pid -> exit code) as they arrive, until its connection ends."""
        try:
            while True:
                msg = recv(conn)
                if msg[0] == "exit":
                    with self._exits_changed:
                        self._exits[msg[1]] = msg[2]
                        while len(self._exits) > _EXIT_CODES_KEPT:
                            self._exits.popitem(last=False)
                        self._exits_changed.notify_all()
        except Exception:  # EOF: the zygote is gone (or the connection was closed at shutdown)
            pass
        with self._exits_changed:
            self._exits_changed.notify_all()

    def exit_code(self, pid: int, wait_s: float = 0.0) -> int | None:
        """How rank `pid` ended (negative: the signal), waiting up to wait_s for the report; None if unknown."""
        reader = self._reader
        with self._exits_changed:
            self._exits_changed.wait_for(lambda: pid in self._exits or reader is None or not reader.is_alive(),
                                         timeout=wait_s)
            return self._exits.get(pid)

    def start(self, specs: list[dict]) -> None:
        send(self.zygote_conn, ("start", specs))

    def kill_all(self) -> None:
        """Have the zygote SIGKILL every rank's process group."""
        try:
            send(self.zygote_conn, ("kill",))
        except (OSError, AttributeError, ValueError):
            pass

    def _stop_zygote(self) -> None:
        if self.zygote is not None:
            if self.zygote_conn is not None:
                try:
                    send(self.zygote_conn, ("close",))  # it kills every rank's group, then exits
                    self.zygote.wait(ZYGOTE_EXIT_S)
                except (OSError, ValueError, subprocess.TimeoutExpired):
                    pass
            if self.zygote.poll() is None:  # still importing torch (no ranks yet), or wedged
                self.zygote.kill()
                self.zygote.wait()
            self.zygote = None
        if self._reader is not None:
            self._reader.join(ZYGOTE_EXIT_S)  # the zygote is gone: its connection ends, so does the reader
            self._reader = None
        if self.zygote_conn is not None:
            self.zygote_conn.close()
            self.zygote_conn = None

    def shutdown(self) -> None:
        self._stop_zygote()
        if self.listener is not None:
            self.listener.close()
        if self.store_socket is not None:
            self.store_socket.close()
        self.store = None
        shutil.rmtree(self.tmpdir, ignore_errors=True)
