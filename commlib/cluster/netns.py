"""Enter a Linux network namespace from the calling thread: how a rank joins its emulated node (commlib.network)."""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNET = 0x40000000


def enter(path: str) -> None:
    """setns(2) the calling thread into the network namespace at `path` (e.g. /run/netns/NAME); threads it
    starts later are in it too, sockets it opened before stay where they were."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)
