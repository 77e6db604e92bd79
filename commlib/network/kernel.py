"""The kernel network: each node a Linux network namespace, each NIC a veth pair to a switch (a bridge in a
namespace of its own), shaped both ways by tc HTB: the node's egress, and the switch port's egress toward
the node (what the node receives). Built and removed with iproute2 (`ip -batch`, `tc -batch`, one process per
namespace; pyroute2 was measured against it, see benchmarks/network_emulation.py).

    names = build(plan)          # plan: kernel_plan(...); -> the namespaces made, all named PREFIX<owner>-...
    remove(names)                # deleting a namespace deletes every link in it: nothing else was made
    sweep()                      # the namespaces of owners that are no longer alive

Safety: every link is created inside a namespace this module made (`ip -n NS link add ... peer ... netns SW`),
never in the host's, so the host's links, addresses and routes never change. Names carry the owner's pid and
its start time (a reused pid is not mistaken for the owner); addresses come from 198.18.0.0/15 (RFC 2544)
and exist only inside the namespaces.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading

from commlib.cluster.netns import enter

PREFIX = "clnet-"
NETNS_DIR = "/run/netns"
KEEP = "keep"           # the owner field of a network made by `python -m commlib network up`: kept until `down`
CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21
_TIMEOUT_S = 30.0       # one ip/tc batch: milliseconds; a hung one is an error, not a hang
_counter = iter(range(1, 1 << 62))
_lock = threading.Lock()


class NetworkError(RuntimeError):
    """The kernel network could not be made (one line: what failed and why); nothing of it is left."""


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
    """A fresh network name: PREFIX + owner (pid.starttime, or KEEP) + a counter; a node's namespace adds -nI."""
    with _lock:
        n = next(_counter)
    owner = KEEP + "." + owner_tag() if keep else owner_tag()
    return f"{PREFIX}{owner}-{n}"


def owner_alive(name: str) -> bool:
    """True for a kept network and for one whose owner still runs (same pid, same start time)."""
    owner = name[len(PREFIX):].split("-", 1)[0]
    if owner.startswith(KEEP + "."):
        return True
    pid, _, started = owner.partition(".")
    return pid.isdigit() and _start_time(int(pid)) == started


def namespaces() -> list[str]:
    """The namespaces this module made (any owner), by name."""
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(PREFIX))
    except OSError:
        return []


def _capabilities() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def available() -> tuple[bool, str]:
    """(True, how) where this process may build the kernel network, else (False, why), in one line."""
    if not sys.platform.startswith("linux"):
        return False, f"the kernel network needs Linux network namespaces; this is {sys.platform}"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return False, f"the kernel network needs iproute2 ({' and '.join(missing)} not found on PATH)"
    caps = _capabilities()
    if not (caps >> CAP_NET_ADMIN & 1 and caps >> CAP_SYS_ADMIN & 1):
        return False, ("the kernel network needs CAP_NET_ADMIN and CAP_SYS_ADMIN: run as root, or inside "
                       "`unshare --user --net --mount --map-root-user` (see the README)")
    if not os.path.exists("/proc/self/ns/net"):
        return False, "this kernel has no network namespaces"
    return True, "Linux network namespaces with CAP_NET_ADMIN, shaped by tc HTB"


def _run(tool: str, netns: str | None, lines: list[str]) -> None:
    """One `ip`/`tc` batch (in namespace `netns`); a failure raises NetworkError with iproute2's own line."""
    cmd = [tool] + (["-n", netns] if netns else []) + ["-batch", "-"]
    try:
        done = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise NetworkError(f"`{' '.join(cmd)}` did not finish within {_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        why = " ".join(done.stderr.split())[:300] or f"exit code {done.returncode}"
        raise NetworkError(f"`{tool}{' -n ' + netns if netns else ''}` failed: {why}")


def _rate(bandwidth: float) -> str:
    return f"{int(round(bandwidth))}bps"  # tc's "bps" is bytes per second


def _htb_class(verb: str, dev: str, bandwidth: float) -> str:
    burst = max(int(bandwidth * 1e-3), 2 * 1514)
    return (f"class {verb} dev {dev} parent 1: classid 1:1 htb rate {_rate(bandwidth)} ceil {_rate(bandwidth)} "
            f"burst {burst} cburst {burst}")


def _shape(dev: str, bandwidth: float, latency: float) -> list[str]:
    """HTB lines that hold `dev`'s egress to `bandwidth` bytes/s: one class, every packet in it. The burst
    (bytes sent back to back) is 1 ms of the rate, at least 2 full frames: HTB refills its tokens from a
    timer, and a burst below one tick's worth would cap the rate below the configured one."""
    lines = [f"qdisc add dev {dev} root handle 1: htb default 1 r2q {max(1, int(bandwidth // 200_000))}",
             _htb_class("add", dev, bandwidth)]
    if latency > 0:
        lines.append(f"qdisc add dev {dev} parent 1:1 handle 10: netem delay {latency * 1e6:.0f}us limit 100000")
    return lines


def reshape(plan: dict, bandwidth: float) -> None:
    """Change every NIC's rate of a built network to `bandwidth` bytes/s in place (tc class change): the ranks,
    their connections and the namespaces stay."""
    for node in plan["nodes"]:
        _run("tc", node["netns"], [_htb_class("change", nic["dev"], bandwidth) for nic in node["nics"]])
        _run("tc", plan["switch"], [_htb_class("change", nic["port"], bandwidth) for nic in node["nics"]])


def _set_sysctls(netns: str, values: dict[str, str]) -> None:
    """Write /proc/sys/net entries inside `netns` from a short-lived thread that entered it (a thread's
    network namespace is its own; the process and the host stay where they are)."""
    errors = []

    def work():
        try:
            enter(os.path.join(NETNS_DIR, netns))
            for key, value in values.items():
                with open("/proc/sys/net/" + key.replace(".", "/"), "w") as f:
                    f.write(value)
        except OSError as e:
            errors.append(e)

    t = threading.Thread(target=work, name="commlib-netns-sysctl")
    t.start()
    t.join()
    if errors:
        raise NetworkError(f"could not set {', '.join(values)} in {netns}: {errors[0]}")


def build(plan: dict) -> list[str]:
    """Make the namespaces, links, addresses, routes and shapers of `plan` (kernel_plan's dict) -> the names
    made. Any failure (a name in use, a missing permission, Ctrl-C) removes what was made, then re-raises."""
    ns = [plan["switch"]] + [node["netns"] for node in plan["nodes"]]
    taken = sorted(set(ns) & set(namespaces()))
    if taken:
        raise NetworkError(f"network namespace {taken[0]} already exists: not made again, and not touched")
    made: list[str] = []
    try:
        for name in ns:  # one at a time, so that `made` is exactly what exists
            _run("ip", None, [f"netns add {name}"])
            made.append(name)
        sw = plan["switch"]
        _run("ip", sw, ["link set lo up", "link add br0 type bridge", "link set br0 up"])
        for node in plan["nodes"]:
            lines, ports = ["link set lo up"], []
            for nic in node["nics"]:
                dev, port, addr = nic["dev"], nic["port"], nic["address"]
                # rails: NIC j holds rail j's /24, so what is sent to a peer's NIC j leaves by this node's NIC j,
                # whichever side of the connection sends it (no rule by source: Gloo's connecting side has none)
                lines += [f"link add {dev} type veth peer name {port} netns {sw}",
                          f"addr add {addr}/24 dev {dev}", f"link set {dev} up"]
                ports += [f"link set {port} master br0", f"link set {port} up"]
            _run("ip", node["netns"], lines)
            # several NICs on one subnet: each answers ARP only for its own address (no "ARP flux")
            _set_sysctls(node["netns"], {"ipv4.conf.all.arp_ignore": "1", "ipv4.conf.all.arp_announce": "2",
                                         "ipv4.conf.all.rp_filter": "0", "ipv4.conf.default.rp_filter": "0"})
            _run("ip", sw, ports)
            _run("tc", node["netns"], [x for nic in node["nics"]
                                       for x in _shape(nic["dev"], plan["bandwidth"], plan["latency"])])
            _run("tc", sw, [x for nic in node["nics"] for x in _shape(nic["port"], plan["bandwidth"], 0.0)])
    except BaseException:
        remove(made)
        raise
    return made


def remove(names: list[str]) -> list[str]:
    """Delete these namespaces (and so every link in them) -> those deleted. Only PREFIX names are touched."""
    gone = []
    for name in names:
        if not name.startswith(PREFIX) or "/" in name:
            continue
        try:
            _run("ip", None, [f"netns delete {name}"])
        except NetworkError:
            if os.path.exists(os.path.join(NETNS_DIR, name)):
                continue
        gone.append(name)
    return gone


def sweep() -> list[str]:
    """Remove the namespaces whose owner is no longer alive (a SIGKILLed owner's leftovers) -> their names."""
    return remove([n for n in namespaces() if not owner_alive(n)])


def netem_available() -> bool:
    """Whether this kernel has netem (tried on a throwaway namespace's loopback; nothing of it stays)."""
    name = new_name() + "-probe"
    try:
        _run("ip", None, [f"netns add {name}"])
    except NetworkError:
        return False
    try:
        _run("tc", name, ["qdisc add dev lo root netem delay 1ms"])
        return True
    except NetworkError:
        return False
    finally:
        remove([name])
