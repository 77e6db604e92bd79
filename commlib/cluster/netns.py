"""Enter a Linux network namespace from the calling thread: how a rank joins its emulated node (commlib.network).
An ordinary user's emulated nodes live in a keeper's user namespace (commlib.network.userns): a rank joins that
first (enter_user, while the process has one thread), and has then the right to enter its node."""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000


def _setns(path: str, kind: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, kind) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def enter(path: str) -> None:
    """setns(2) the calling thread into the network namespace at `path` (e.g. /run/netns/NAME); threads it
    starts later are in it too, sockets it opened before stay where they were."""
    _setns(path, CLONE_NEWNET)


def enter_user(path: str) -> None:
    """setns(2) this process into the user namespace at `path` (/proc/PID/ns/user of a keeper); the process must
    have one thread. Nothing happens where it is a member already (a child of a process that joined it)."""
    if os.stat(path).st_ino == os.stat("/proc/self/ns/user").st_ino:
        return
    _setns(path, CLONE_NEWUSER)
