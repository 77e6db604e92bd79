"""The kernel network: each GPU a Linux network namespace with its own address; each node a namespace that
routes (its GPUs on a bridge, NVLink's stand-in, unshaped or shaped to `intra_bandwidth`) and holds the node's
NICs, each a veth pair to a switch (a bridge in a namespace of its own), shaped both ways by tc HTB: the NIC's
egress, and the switch port's egress toward the node (what the node receives). Built and removed with
iproute2 batches (`ip -batch`, `tc -batch`, one process per namespace; pyroute2 was measured against it, see
benchmarks/network_emulation.py).

    names = build(plan)          # plan: Network.plan(); -> the namespaces made, all named PREFIX<owner>-...
    remove(names)                # deleting a namespace deletes every link in it: nothing else was made
    sweep()                      # the marked namespaces of owners that are no longer alive (commlib.network.names)
    nic_bytes(plan)              # tc's own byte counters of every NIC, both ways

Rails: GPU i of a node leaves it by NIC i mod k and enters it by NIC i mod k, whatever GPU it talks to: the
node's namespace picks the NIC by the packet's source (`ip rule from GPU lookup RAIL`) and the next hop by its
destination (the peer GPU's node, on the peer GPU's rail), so each direction of a connection rides its sender's
rail out and its receiver's rail in, as on a rail-optimised cluster.
Neighbours are static (`nud permanent`, exempt from the kernel's neighbour-table limit, gc_thresh3, which all
namespaces share: N nodes would need N(N-1) learnt entries), so no ARP crosses the NICs either.

Safety: every link is created inside a namespace this module made (`ip -n NS link add ... peer ... netns X`),
never in the host's, so the host's links, addresses and routes never change. Addresses come from 198.18.0.0/15
(RFC 2544: NICs 198.18.J.(N+1)/16, GPUs 198.19.N.(I+1)/24) and exist only inside the namespaces.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys

from commlib.network import names as nm
from commlib.network.names import NETNS_DIR, PREFIX, namespaces, new_name, owner_alive  # noqa: F401

_TIMEOUT_S = 30.0       # one ip/tc batch: milliseconds; a hung one is an error, not a hang
CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21
MTU = 1500
PAYLOAD_FRACTION = (MTU - 52) / (MTU + 14)   # TCP payload (timestamps on) per frame HTB charges: 1448 / 1514
_probed: dict = {}


class NetworkError(RuntimeError):
    """The kernel network could not be made (one line: what failed and why); nothing of it is left."""


def _capabilities() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


SWITCH = "COMMLIB_KERNEL_NETWORK"   # "off": never the kernel network (the pacer); "userns": a keeper even as root
SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")   # an ordinary user's PATH often has no /usr/sbin


def tool(name: str) -> str | None:
    """The path of iproute2's `ip` or `tc`: on PATH, else in the system's sbin and bin folders, else None."""
    found = shutil.which(name)
    if found:
        return found
    for folder in SBIN:
        path = f"{folder}/{name}"
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def privileged() -> bool:
    """True where this process may build the network on the host itself (CAP_NET_ADMIN and CAP_SYS_ADMIN: root),
    unless COMMLIB_KERNEL_NETWORK=userns asks for a user namespace anyway; False: a keeper (commlib.network.userns)."""
    caps = _capabilities()
    return bool(caps >> CAP_NET_ADMIN & 1 and caps >> CAP_SYS_ADMIN & 1) and os.environ.get(SWITCH) != "userns"


def prerequisites() -> str | None:
    """Why the kernel network cannot be built here whoever asks (not Linux, turned off, no iproute2), or None."""
    if not sys.platform.startswith("linux"):
        return f"the kernel network needs Linux network namespaces; this is {sys.platform}"
    if os.environ.get(SWITCH) == "off":
        return f"the kernel network is turned off here ({SWITCH}=off)"
    missing = [name for name in ("ip", "tc") if tool(name) is None]
    if missing:
        return f"the kernel network needs iproute2 ({' and '.join(missing)} not found)"
    return None


def available() -> tuple[bool, str]:
    """(True, how) where this process may build the kernel network on the host (root), else (False, why), in one
    line. Tries, once per process, what build() needs: a namespace, its mark, a veth pair, an HTB qdisc; nothing
    of it stays. An ordinary user's: commlib.network.userns.available (network.available picks)."""
    why = prerequisites()
    if why:
        return False, why
    if not privileged():
        return False, "the kernel network on the host needs CAP_NET_ADMIN and CAP_SYS_ADMIN (root)"
    if "host" not in _probed:
        _probed["host"] = _probe()
    if _probed["host"]:
        return False, f"the kernel network cannot be built here: {_probed['host']}"
    return True, "Linux network namespaces with CAP_NET_ADMIN, shaped by tc HTB"


def _probe() -> str | None:
    """None where a marked namespace with a shaped veth pair can be made here, else iproute2's reason."""
    name = new_name() + "-probe"
    try:
        _run("ip", None, [f"netns add {name}"])
    except NetworkError as e:
        return str(e)
    try:
        nm.mark([name])
        _run("ip", name, ["link add name pa type veth peer name pb", "link set pa up"])
        _run("tc", name, _shape("pa", 1e6, 0.0))
        return None
    except (NetworkError, OSError) as e:
        return str(e)
    finally:
        remove([name])


def _run(name: str, netns: str | None, lines: list[str], force: bool = False) -> str:
    """One `ip`/`tc` batch (in namespace `netns`) -> its output; a failure raises NetworkError with iproute2's
    own line (force: go on past failing lines, raise nothing)."""
    cmd = [tool(name) or name] + (["-n", netns] if netns else []) + (["-force"] if force else []) + ["-batch", "-"]
    try:
        done = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise NetworkError(f"`{' '.join(cmd)}` did not finish within {_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0 and not force:
        why = " ".join(done.stderr.split())[:300] or f"exit code {done.returncode}"
        raise NetworkError(f"`{name}{' -n ' + netns if netns else ''}` failed: {why}")
    return done.stdout


GSO_MAX = 65536   # bytes: the largest packet TCP hands a veth (GSO), the kernel's usual limit


def _rate(bandwidth: float) -> str:
    return f"{int(round(bandwidth))}bps"  # tc's "bps" is bytes per second


def _burst(bandwidth: float) -> int:
    """The shaper's burst, bytes: 1 ms of the rate, at least 2 full frames (see _shape)."""
    return max(int(bandwidth * 1e-3), 2 * (MTU + 14))


def gso_cap(bandwidth: float) -> int:
    """The largest packet a GPU's TCP may hand down (gso_max_size of its eth0) on a Network(small_packets=True),
    bytes: the shaper's burst, at most the kernel's usual 64 KiB. A veth takes TCP's segments whole (GSO: up to
    64 KiB, cut into frames only on a real NIC); HTB passes such a packet whole and then holds the class for its
    length in tokens, and the switch port's shaper does the same. So on a 10 MB/s NIC a 64 KiB packet takes
    6.5 ms of the link, where a real NIC's frame takes microseconds. Measured (issue 49; benchmarks/ring_steps.py,
    three runs): commlib's ring of 4 ranks on 10 MB/s NICs held 109-112 of its 288 steps 3 ms or more past their
    bytes' time, so a 512 KiB all-reduce took 19-31% over its bytes at the payload rate; with 10 KB packets, 1-3
    of 288 and 1.0-1.4% (2 ranks: 0.4% or less either way). What waits is Gloo's notices, not TCP's ACKs
    (ring_steps.py --quick, 4 nodes, each NIC and switch port given a first HTB class by a u32 filter on the IP
    length): packets under 512 bytes first, 0-4 of 120 steps held and 0.3-2.7% over the bytes (one queue:
    38-51 of 120, 19-41%); pure ACKs first, 38-51 held and 19-26%. A step's send waits for its receiver's
    NOTIFY_RECV_READY, and that notice leaves the receiver's NIC behind the 64 KiB packets the receiver sends
    on. Not adopted: with small packets first, torch DDP on 2 x 2 GPUs ran 500-600 ms a step against 366 (and
    500-514 with TCP told to tolerate reordering, tcp_recovery 0, tcp_reordering 127). At or above 65.5 MB/s
    nothing changes. The cost is packets: the link inside a node (unshaped)
    carried 0.65-0.75 GB/s with 20 KB packets against 1.6-2.3 GB/s with 64 KiB. TCP reads the limit when it
    connects, so Network.set_bandwidth changes the rate, not the packets of connections already open.
    A transfer's time on 64 KiB packets also depends on how it is cut into messages (issue 49's closing note:
    197376 B point to point at 10 MB/s, 20.0 ms as 1 message, 16.7 as 2 or 6, 19.3 as 24; on 10 KB packets
    19.3-19.6 ms for every cut). Off by default: the what-if's links (network.links) and its committed accuracy
    were fitted on 64 KiB packets; its kernel benchmark on small packets (benchmarks/
    whatif_accuracy_kernel_small_packets.json: median 5.1%, p90 9.9%) puts 8 of the 9 pairs that grow 2 ranks
    into 4 within 8% (torch DDP on 2 x 2 with 1 NIC: -11.9%, its noise 7.8%), but replays torch DDP's 2 x 2
    recording 8.9% above its untraced runs, and the links are not yet re-fitted for it."""
    return min(GSO_MAX, _burst(bandwidth))


def _htb_class(verb: str, dev: str, bandwidth: float) -> str:
    burst = _burst(bandwidth)
    return (f"class {verb} dev {dev} parent 1: classid 1:1 htb rate {_rate(bandwidth)} ceil {_rate(bandwidth)} "
            f"burst {burst} cburst {burst}")


def _shape(dev: str, bandwidth: float, latency: float) -> list[str]:
    """HTB lines that hold `dev`'s egress to `bandwidth` bytes/s: one class, every packet in it. HTB charges a
    packet when it dequeues it, with tokens computed from the time elapsed since the last charge
    (htb_accnt_tokens, net/sched/sch_htb.c), in bytes as the qdisc layer counts them: a GSO packet counts the
    headers of every segment it will become (qdisc_pkt_len_init, net/core/dev.c), so payload is PAYLOAD_FRACTION
    of the rate. The burst (bytes sent back to back) is 1 ms of the rate, at least 2 full frames, so the
    shaper's own timer (its watchdog, of a tick's resolution) does not hold the rate below the configured one."""
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


def _router(plan: dict, n: int) -> list[str]:
    """Node n's namespace: its GPUs' bridge, its NICs, static neighbours, and the rails (rule by source)."""
    node, k = plan["nodes"][n], len(plan["nodes"][n]["nics"])
    lines = ["link set lo up", f"link add br0 address {node['mac']} type bridge",
             f"addr add {node['lan']}/24 dev br0", "link set br0 up"]
    for g in node["gpus"]:
        lines += [f"link add {g['port']} mtu {MTU} type veth peer name eth0 address {g['mac']} netns {g['netns']}",
                  f"link set {g['port']} master br0", f"link set {g['port']} up",
                  f"neigh replace {g['address']} lladdr {g['mac']} dev br0 nud permanent"]
    for nic in node["nics"]:
        lines += [f"link add {nic['dev']} address {nic['mac']} mtu {MTU} type veth peer name {nic['port']} "
                  f"netns {plan['switch']}", f"addr add {nic['address']}/16 dev {nic['dev']}",
                  f"link set {nic['dev']} up"]
    for g in node["gpus"]:
        lines.append(f"rule add from {g['address']} lookup {100 + g['nic']} pref {1000 + g['nic']}")
    for m, peer in enumerate(plan["nodes"]):
        if m == n:
            continue
        for nic in node["nics"]:
            table = 100 + nic["rail"]
            for far in peer["nics"]:
                lines.append(f"neigh replace {far['address']} lladdr {far['mac']} dev {nic['dev']} nud permanent")
            if k == 1:
                lines.append(f"route add {peer['lan'].rsplit('.', 1)[0]}.0/24 via {peer['nics'][0]['address']} dev {nic['dev']} "
                             f"table {table} onlink")
                continue
            for g in peer["gpus"]:
                lines.append(f"route add {g['address']}/32 via {peer['nics'][g['nic']]['address']} "
                             f"dev {nic['dev']} table {table} onlink")
    return lines


def _gpu(node: dict, g: dict, gso_max_size: int | None = None) -> list[str]:
    """A GPU's namespace: its address on the node's bridge, the node as its gateway to the cluster's addresses
    (198.18.0.0/15) and to nothing else, its neighbours static; where the plan asks for small packets, none larger
    than gso_max_size (gso_cap). No default route: a name lookup in a rank (c10d looks up the name of each peer's
    address, and the host's resolver is out of reach) fails at once instead of waiting out the resolver's timeout,
    5 s of every `network run` here (issue 65: chapter 9's loop)."""
    small = [f"link set eth0 gso_max_size {gso_max_size}"] if gso_max_size else []
    lines = ["link set lo up", f"addr add {g['address']}/24 dev eth0", *small, "link set eth0 up",
             f"route add {CLUSTER_ADDRESSES} via {node['lan']} dev eth0",
             f"neigh replace {node['lan']} lladdr {node['mac']} dev eth0 nud permanent"]
    return lines + [f"neigh replace {o['address']} lladdr {o['mac']} dev eth0 nud permanent"
                    for o in node["gpus"] if o is not g]


CLUSTER_ADDRESSES = "198.18.0.0/15"   # RFC 2544: every NIC and GPU address (Network.nic_address, gpu_address)

_QUIET = {"ipv6.conf.all.disable_ipv6": "1", "ipv6.conf.default.disable_ipv6": "1",
          "ipv4.conf.all.rp_filter": "0", "ipv4.conf.default.rp_filter": "0"}


def build(plan: dict) -> list[str]:
    """Make the namespaces, links, addresses, routes and shapers of `plan` (Network.plan()) -> the names made.
    Any failure (a name in use, a missing permission, Ctrl-C) removes what was made, then re-raises."""
    gpus = [g["netns"] for node in plan["nodes"] for g in node["gpus"]]
    routers = [node["netns"] for node in plan["nodes"]]
    planned = [plan["switch"]] + routers + gpus
    taken = sorted(set(planned) & set(namespaces()))
    if taken:
        raise NetworkError(f"network namespace {taken[0]} already exists: not made again, and not touched")
    name = plan["switch"][:-len("-sw")]
    nm.journal(name, planned)  # until every namespace carries the mark (see commlib.network.names)
    try:
        try:
            _run("ip", None, [f"netns add {n}" for n in planned])
        finally:  # marked at once: a SIGKILL from here on leaves only what the next sweep removes
            exists = set(namespaces())
            nm.mark([n for n in planned if n in exists])
            nm.journal(name, None)
        nm.in_namespaces(planned, nm.write_sysctls(_QUIET))
        nm.in_namespaces(routers, nm.write_sysctls({"ipv4.ip_forward": "1"}))
        sw, bw, intra = plan["switch"], plan["bandwidth"], plan.get("intra_bandwidth")
        _run("ip", sw, ["link set lo up", "link add br0 type bridge", "link set br0 up"])
        for n, node in enumerate(plan["nodes"]):
            _run("ip", node["netns"], _router(plan, n))
            shapes = [x for nic in node["nics"] for x in _shape(nic["dev"], bw, plan["latency"])]
            if intra:
                shapes += [x for g in node["gpus"] for x in _shape(g["port"], intra, 0.0)]
            _run("tc", node["netns"], shapes)
            for g in node["gpus"]:
                _run("ip", g["netns"], _gpu(node, g, plan.get("gso_max_size")))
                if intra:
                    _run("tc", g["netns"], _shape("eth0", intra, 0.0))
        ports = [nic["port"] for node in plan["nodes"] for nic in node["nics"]]
        _run("ip", sw, [f"link set {p} master br0" for p in ports] + [f"link set {p} up" for p in ports])
        _run("tc", sw, [x for p in ports for x in _shape(p, bw, 0.0)])
    except BaseException:
        exists = set(namespaces())
        remove([n for n in planned if n in exists])
        raise
    return planned


def remove(names: list[str]) -> list[str]:
    """Delete these namespaces (and so every link in them) -> those deleted. Only PREFIX names are touched."""
    names = [n for n in names if n.startswith(PREFIX) and "/" not in n]
    if names:
        _run("ip", None, [f"netns delete {n}" for n in names], force=True)
    left = set(namespaces())
    return [n for n in names if n not in left]


def sweep() -> list[str]:
    """Remove the namespaces the course made whose owner is no longer alive -> their names (names.leftovers)."""
    return remove(nm.leftovers()[0])


def netem_available() -> bool:
    """Whether this kernel has netem (tried on a throwaway namespace's loopback; nothing of it stays)."""
    name = new_name() + "-probe"
    try:
        _run("ip", None, [f"netns add {name}"])
    except NetworkError:
        return False
    try:
        nm.mark([name])
        _run("tc", name, ["qdisc add dev lo root netem delay 1ms"])
        return True
    except (NetworkError, OSError):
        return False
    finally:
        remove([name])


def nic_bytes(plan: dict) -> dict:
    """tc's own byte counters (the HTB class of each shaped device) -> {(node, nic): (sent, received)} bytes:
    sent through the NIC's egress, received through its switch port's egress toward the node."""
    out = {}
    for n, node in enumerate(plan["nodes"]):
        for nic in node["nics"]:
            out[(n, nic["rail"])] = (_class_bytes(node["netns"], nic["dev"]), _class_bytes(plan["switch"], nic["port"]))
    return out


def _class_bytes(netns: str, dev: str) -> int:
    """The bytes HTB's class 1:1 on `dev` sent ("Sent N bytes": this tc prints no JSON for HTB classes)."""
    cmd = [tool("tc") or "tc", "-n", netns, "-s", "class", "show", "dev", dev]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT_S)
    text = done.stdout if done.returncode == 0 else ""
    found = re.search(r"class htb 1:1 .*?Sent (\d+) bytes", text, re.S)
    if not found:
        raise NetworkError(f"tc -n {netns}: no HTB class 1:1 on {dev}")
    return int(found.group(1))


def free_port(netns: str) -> int:
    """A port nothing listens on inside `netns` (asked of the kernel, not guessed)."""
    def work(_name):
        with socket.socket() as s:
            s.bind(("", 0))
            return s.getsockname()[1]
    return nm.in_namespaces([netns], work)[0]


def netns_path(name: str) -> str:
    """The file a rank opens to enter namespace `name` (a keeper's are under its own /run: Keeper.netns_path)."""
    return f"{NETNS_DIR}/{name}"
