"""The parent's listener: the zygote and the ranks connect to it, and prove they know the authkey.

    listener = AuthListener("127.0.0.1", authkey)     # port chosen by the OS: listener.address
    conn = listener.incoming.get(timeout=...)          # authenticated multiprocessing Connections only

The accept thread only accepts: each connection's handshake (multiprocessing's HMAC challenge, both
ways) runs in a thread of its own with a socket timeout of HANDSHAKE_TIMEOUT_S. So a local client
that sends garbage, resets, stays silent or trickles bytes costs one short-lived thread, and never
stops the accept loop or delays another peer (a single-threaded accept+handshake would).
"""

from __future__ import annotations

import queue
import socket
import struct
import threading
import time
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

HANDSHAKE_TIMEOUT_S = 10.0      # a peer of ours answers in milliseconds; this only bounds strangers
MAX_HANDSHAKES = 256            # handshakes in flight; a flood beyond this is dropped, not queued


def _set_io_timeout(sock: socket.socket, seconds: float) -> None:
    """SO_RCVTIMEO/SO_SNDTIMEO: a blocking read or write on the fd fails after `seconds` (0: never).
    Connection reads the fd with os.read, so socket.settimeout (which works in Python) would not apply."""
    whole = int(seconds)
    timeval = struct.pack("ll", whole, int((seconds - whole) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)


class AuthListener:
    """Accept on (host, 0); authenticated connections arrive on `incoming` (a queue.Queue)."""

    def __init__(self, host: str, authkey: bytes):
        self.authkey = authkey
        self._sock = socket.create_server((host, 0), backlog=128)
        self.address = self._sock.getsockname()[:2]
        self.incoming: queue.Queue = queue.Queue()
        self._closed = False
        self._pending = threading.Semaphore(MAX_HANDSHAKES)
        threading.Thread(target=self._accept_loop, name="commlib-accept", daemon=True).start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._sock.accept()
            except OSError:  # closed, or a transient error (EMFILE, ECONNABORTED): never the end unless closed
                if self._closed:
                    return
                time.sleep(0.01)
                continue
            if not self._pending.acquire(blocking=False):
                sock.close()
                continue
            threading.Thread(target=self._handshake, args=(sock,), name="commlib-handshake", daemon=True).start()

    def _handshake(self, sock: socket.socket) -> None:
        conn = None
        try:
            sock.setblocking(True)
            _set_io_timeout(sock, HANDSHAKE_TIMEOUT_S)
            conn = Connection(sock.detach())
            deliver_challenge(conn, self.authkey)
            answer_challenge(conn, self.authkey)
            with socket.socket(fileno=conn.fileno()) as s:  # back to fully blocking for the peer's life
                _set_io_timeout(s, 0)
                s.detach()
        except Exception:  # garbage, reset, silence, a wrong key: this peer only
            (conn or sock).close()
            return
        finally:
            self._pending.release()
        if self._closed:
            conn.close()
        else:
            self.incoming.put(conn)

    def close(self) -> None:
        self._closed = True
        try:  # shutdown() wakes a thread blocked in accept() (close() alone does not on Linux)
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        while True:
            try:
                self.incoming.get_nowait().close()
            except queue.Empty:
                break
