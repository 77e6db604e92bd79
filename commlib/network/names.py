"""Whose is a namespace: the names the kernel network gives its namespaces, the owner they carry, the mark every
namespace it made carries inside it, and the sweep that removes what a dead owner left.

    name = new_name(keep)        # clnet-PID.START-N (or clnet-keep.PID.START-N): a node adds -nI, a GPU -nIgJ
    mark(netns_list, state)      # written inside each namespace: MADE while its owner builds or uses it, KEPT
    read_mark(netns) -> state    # None for a namespace this course did not make (whatever its name)
    sweep()                      # remove the marked namespaces whose owner is dead and that are not KEPT
    kept_networks()              # the KEPT networks whose owner is dead (`network clean` lists them)
    run_logs()                   # a new `network run` log folder, TMP/commlib-network-run-PID.START-*
    dead_run_logs()              # those whose `network run` is gone (a SIGKILL skips its own removal)

The mark is a value the course writes into the namespace's own `net.ipv4.conf.lo.tag` (a per-namespace sysctl
nothing else uses), from a thread that entered it: a namespace someone else named clnet-* never carries it, so
neither `clean` nor the next start touches it; one whose owner still runs is never touched either, whatever its
name. A kept network (`network up`) is marked KEPT only once it is complete: a SIGKILL during its setup leaves
namespaces marked MADE by a dead owner, which the next start or `network clean` removes. Between `ip netns add`
and the mark, the names about to be made are listed in a journal (JOURNAL_DIR/NAME, written before, removed once
all are marked): a SIGKILL in that window leaves a journal of a dead owner, and its namespaces go too.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
import threading

from commlib.cluster.netns import enter

PREFIX = "clnet-"
NETNS_DIR = "/run/netns"
JOURNAL_DIR = "/run/commlib-network"
KEEP = "keep"           # the owner field of a network made by `python -m commlib network up`: kept until `down`
RUN_LOGS = "commlib-network-run-"   # a `network run`'s folder of torchrun logs, in the temp dir
MADE, KEPT = 1668050432, 1668050433   # "cln\0" + state: the course made it / it is a complete kept network
_TAG = "ipv4/conf/lo/tag"
_counter = iter(range(1, 1 << 62))
_lock = threading.Lock()


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (field 22 of /proc/pid/stat), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096).decode(errors="replace")
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def owner_tag(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{pid}.{_start_time(pid)}"


def new_name(keep: bool = False) -> str:
    """A fresh network name: PREFIX + owner (pid.starttime, or KEEP.pid.starttime) + a counter."""
    with _lock:
        n = next(_counter)
    owner = KEEP + "." + owner_tag() if keep else owner_tag()
    return f"{PREFIX}{owner}-{n}"


def _owner(name: str, prefix: str = PREFIX) -> tuple[bool, int, str] | None:
    """(kept, pid, start time) from a name, or None where the name is not one new_name() makes (or, with prefix
    RUN_LOGS, run_logs())."""
    owner = name[len(prefix):].split("-", 1)[0]
    kept = owner.startswith(KEEP + ".")
    pid, _, started = owner[len(KEEP) + 1:].partition(".") if kept else owner.partition(".")
    return (kept, int(pid), started) if name.startswith(prefix) and pid.isdigit() and started else None


def owner_alive(name: str) -> bool:
    """True where the process named in `name` still runs (same pid, same start time), or the name is not ours."""
    owner = _owner(name)
    return owner is None or _start_time(owner[1]) == owner[2]


def namespaces() -> list[str]:
    """The namespaces named like the course's (any owner, marked or not), by name."""
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(PREFIX))
    except OSError:
        return []


def in_namespaces(names: list[str], work) -> list:
    """work(name) inside each network namespace in turn, from one short-lived thread (a thread's network
    namespace is its own: the process and the host stay where they are) -> the results; OSError re-raised."""
    out, errors = [], []

    def run():
        try:
            for name in names:
                enter(os.path.join(NETNS_DIR, name))
                out.append(work(name))
        except OSError as e:
            errors.append(e)

    t = threading.Thread(target=run, name="commlib-netns")
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return out


def write_sysctls(values: dict[str, str]):
    """A work() for in_namespaces that writes /proc/sys/net entries ("ipv4.ip_forward": "1") where it runs."""
    def work(_name):
        for key, value in values.items():
            with open("/proc/sys/net/" + key.replace(".", "/"), "w") as f:
                f.write(value)
    return work


def mark(names: list[str], state: int = MADE) -> None:
    """Write the course's mark (MADE or KEPT) into each namespace."""
    in_namespaces(names, write_sysctls({_TAG.replace("/", "."): str(state)}))


def read_mark(name: str) -> int | None:
    """MADE or KEPT where the course made `name`, else None (also where it is gone or cannot be entered)."""
    def work(_name):
        with open("/proc/sys/net/" + _TAG) as f:
            return int(f.read(64).strip() or 0)
    try:
        value = in_namespaces([name], work)[0]
    except (OSError, ValueError):
        return None
    return value if value in (MADE, KEPT) else None


def journal(name: str, planned: list[str] | None) -> None:
    """Write (planned: the namespaces about to be made) or remove (None) network `name`'s journal."""
    path = os.path.join(JOURNAL_DIR, name)
    if planned is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    os.makedirs(JOURNAL_DIR, mode=0o700, exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(planned) + "\n")


def _journals() -> dict[str, list[str]]:
    """{network name: the namespaces its journal lists} for the journals of dead owners."""
    out = {}
    try:
        listed = os.listdir(JOURNAL_DIR)
    except OSError:
        return out
    for name in listed:
        if not name.startswith(PREFIX) or owner_alive(name) or _owner(name) is None:
            continue
        try:
            with open(os.path.join(JOURNAL_DIR, name)) as f:
                out[name] = [n for n in f.read(1 << 20).split() if n.startswith(name + "-")]
        except OSError:
            continue
    return out


def leftovers() -> tuple[list[str], list[str]]:
    """(to remove, left alone): the namespaces named like the course's whose owner is dead, split by whether
    they carry the course's mark (and are not a complete kept network). A live owner's are in neither."""
    remove, alone = [], []
    journals = _journals()
    journaled = {n for listed in journals.values() for n in listed}
    for name in namespaces():
        owner = _owner(name)
        if owner is None:
            continue
        if _start_time(owner[1]) == owner[2]:
            continue  # its owner runs: never touched, whatever its mark
        state = read_mark(name)
        if state == MADE or (state is None and name in journaled):
            remove.append(name)
        elif state is None and not owner[0]:
            alone.append(name)
    for name in journals:  # their namespaces are in `remove` (or gone): the journal goes with them
        journal(name, None)
    return remove, alone


def kept_networks() -> list[str]:
    """The complete `network up` networks whose owner has ended (marked KEPT): kept by design until `network down
    NAME`, so neither a start nor `clean` removes them -> their names (the part before -sw, -nI, -nIgJ)."""
    out = set()
    for name in namespaces():
        owner = _owner(name)
        if owner is None or not owner[0] or _start_time(owner[1]) == owner[2] or not name.endswith("-sw"):
            continue
        if read_mark(name) == KEPT:
            out.add(name[:-len("-sw")])
    return sorted(out)


def run_logs() -> str:
    """A new folder for a `network run`'s torchrun logs, named for its owner: TMP/RUN_LOGS + PID.START + -random."""
    return tempfile.mkdtemp(prefix=f"{RUN_LOGS}{owner_tag()}-")


def dead_run_logs() -> list[str]:
    """Remove the log folders of `network run`s that are gone -> their paths. A launcher removes its own as it
    ends; one SIGKILLed cannot. A folder not named as run_logs() names it is left alone."""
    out = []
    for path in sorted(glob.glob(os.path.join(tempfile.gettempdir(), RUN_LOGS + "*"))):
        owner = _owner(os.path.basename(path), RUN_LOGS)
        if owner is not None and _start_time(owner[1]) != owner[2] and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            out.append(path)
    return out
