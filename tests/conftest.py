import contextlib
import socket
import time

import psutil
import pytest

import commlib as cl


def alive(pid: int) -> bool:
    """True while pid runs (a zombie awaiting its reaper counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids, within_s: float = 5.0) -> list[int]:
    """The pids still alive after within_s seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


@pytest.fixture(scope="module")
def cluster4():
    """One 4-rank cluster shared by a test module (tests that break it rely on its restart)."""
    with cl.Cluster(world_size=4, timeout=30) as c:
        yield c


@contextlib.contextmanager
def timeout_of(cluster, seconds: float):
    """Run a block with a shorter cluster timeout (for tests that expect a ClusterTimeout)."""
    saved = cluster.timeout
    cluster.timeout = seconds
    try:
        yield cluster
    finally:
        cluster.timeout = saved


def free_port() -> int:
    """A port the OS picks, released just before the caller's server binds it (never hard-coded)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
