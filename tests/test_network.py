"""commlib.network without building anything: arguments refused before anything is made, rails and addresses,
the fallback to the pacer when the kernel network is not available (simulated), names and owners, the CLI's
one-line errors. The kernel network itself: tests/test_network_kernel.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import commlib as cl
from commlib import network
from commlib.network import kernel, spec
from commlib.network import network as netmod

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def nothing_made(monkeypatch):
    """Any attempt to build, or to run ip/tc, fails the test."""
    def refuse(*a, **k):
        raise AssertionError("something was made")
    monkeypatch.setattr(kernel, "build", refuse)
    monkeypatch.setattr(kernel, "_run", refuse)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(nodes=0), ValueError, "nodes must be an int >= 1 and <= 64, got 0"),
    (dict(nodes=2.0), TypeError, "nodes must be an int"),
    (dict(nodes=True), TypeError, "nodes must be an int"),
    (dict(gpus_per_node=65), ValueError, "gpus_per_node must be an int >= 1 and <= 64"),
    (dict(nics_per_node=0), ValueError, "nics_per_node must be an int >= 1 and <= 16"),
    (dict(bandwidth=float("nan")), ValueError, "bandwidth must be a finite number of bytes/s"),
    (dict(bandwidth=-1), ValueError, "bandwidth must be"),
    (dict(bandwidth="20M"), TypeError, "bandwidth must be"),
    (dict(bandwidth=1e12), ValueError, "bandwidth must be"),
    (dict(latency=-1e-3), ValueError, "latency must be a finite number of seconds >= 0"),
    (dict(latency=float("inf")), ValueError, "latency must be"),
    (dict(kind="netem"), ValueError, "kind must be one of ('auto', 'kernel', 'paced'), got 'netem'"),
    (dict(kind=None), ValueError, "kind must be one of"),
    (dict(quiet="no"), TypeError, "quiet must be True or False"),
])
def test_nonsense_is_refused_before_anything_is_made(kwargs, error, words, nothing_made):
    mine = lambda: [n for n in kernel.namespaces() if n.startswith(f"{kernel.PREFIX}{os.getpid()}.")]  # noqa: E731
    before = mine()  # this process's only: pytest-xdist's other worker may build a network meanwhile
    args = dict(nodes=2, gpus_per_node=1, bandwidth=20e6, kind="paced") | kwargs
    with pytest.raises(error) as info:
        network.Network(**args)
    assert words in str(info.value)
    assert mine() == before


def test_bandwidth_is_keyword_only():
    with pytest.raises(TypeError):
        network.Network(2, 1, 1, 20e6)


def test_rails_and_addresses():
    net = network.Network(3, 4, 2, bandwidth=20e6, kind="paced")
    assert [net.node_of(r) for r in range(12)] == [0] * 4 + [1] * 4 + [2] * 4
    assert [net.nic_of(r) for r in range(8)] == [0, 1, 0, 1] * 2  # GPU i uses NIC i mod k
    plan = {**net.plan()}  # as data: a namespace per node and per GPU, one veth per NIC, addresses from 198.18/15
    addresses = [nic["address"] for node in plan["nodes"] for nic in node["nics"]]
    assert len(set(addresses)) == 6 and all(a.startswith("198.18.") for a in addresses)
    gpus = [g for node in plan["nodes"] for g in node["gpus"]]
    assert [g["address"] for g in gpus] == [net.gpu_address(r) for r in range(12)] and len({g["netns"] for g in gpus}) == 12
    assert all(g["address"].startswith("198.19.") for g in gpus) and [g["nic"] for g in gpus] == [0, 1] * 6
    assert [len(node["nics"]) for node in plan["nodes"]] == [2, 2, 2]
    assert all(len(nic["dev"]) <= 15 and len(nic["port"]) <= 15 for node in plan["nodes"] for nic in node["nics"])
    assert len({nic["mac"] for node in plan["nodes"] for nic in node["nics"]} | {g["mac"] for g in gpus}) == 18


def test_the_kernel_nic_carries_payload_at_the_rate_less_every_segments_headers():
    """HTB charges the headers of every 1500-byte segment (qdisc_pkt_len_init): 1448 of 1514 bytes are payload;
    tc's counters confirm it (tests/test_network_kernel.py). The pacer paces payload."""
    assert kernel.PAYLOAD_FRACTION == pytest.approx(1448 / 1514) == pytest.approx(0.9564, abs=1e-4)
    net = network.Network(2, 1, bandwidth=20e6, kind="paced")
    assert net.payload_bandwidth == 20e6
    net.kind = "kernel"   # the same arguments on the kernel network (nothing is built for this)
    assert net.payload_bandwidth == pytest.approx(20e6 * 1448 / 1514)


@pytest.mark.parametrize("args, words", [
    ((2, 1, 2), "nics_per_node must be <= gpus_per_node (1)"),
    ((2, 2, 4), "nics_per_node must be <= gpus_per_node (2)"),
    ((33, 2, 1), "nodes x gpus_per_node must be <= 64 (one rank, and one namespace, per GPU), got 33 x 2 = 66"),
    ((64, 2, 1), "nodes x gpus_per_node must be <= 64"),
])
def test_sizes_the_kernel_network_cannot_serve_are_refused_before_anything_is_made(args, words, nothing_made):
    """More NICs than GPUs carry nothing (and the kernel and the pacer would disagree); past 64 GPUs no Cluster
    runs on it (64 x 1 is the largest, built in seconds: benchmarks/network_emulation.py)."""
    for kind in ("paced", "auto"):
        with pytest.raises(ValueError) as info:
            network.Network(*args, bandwidth=20e6, kind=kind, quiet=True)
        assert words in str(info.value) and "\n" not in str(info.value)


def test_available_tries_what_up_needs_and_auto_falls_back_in_one_line(monkeypatch, capsys):
    """Rootless without a tmpfs on /run: the capabilities are there, `ip netns add` is not; available() says
    no with iproute2's reason and auto picks the pacer in one line, making nothing."""
    real = kernel._run

    def no_run_netns(tool, netns, lines, force=False):
        if any(line.startswith("netns add") for line in lines):
            raise kernel.NetworkError("`ip` failed: mkdir /run/netns failed: Permission denied")
        return real(tool, netns, lines, force)

    monkeypatch.setattr(kernel, "_run", no_run_netns)
    monkeypatch.setattr(kernel, "_capabilities", lambda: (1 << kernel.CAP_NET_ADMIN) | (1 << kernel.CAP_SYS_ADMIN))
    monkeypatch.setattr(kernel, "_probed", {})
    monkeypatch.setattr(kernel.shutil, "which", lambda tool: "/sbin/" + tool)
    monkeypatch.setattr(kernel.sys, "platform", "linux")
    ok, why = network.available()
    assert not ok and "Permission denied" in why and "\n" not in why
    net = network.Network(2, 1, bandwidth=20e6)
    line = capsys.readouterr().out.strip()
    assert net.kind == "paced" and line.startswith("network: paced") and "Permission denied" in line


def test_without_the_kernel_auto_falls_back_to_the_pacer_and_says_so(monkeypatch, capsys, nothing_made):
    monkeypatch.setattr(netmod, "available", lambda: (False, "simulated: no CAP_NET_ADMIN"))
    net = network.Network(2, 1, bandwidth=20e6)
    assert net.kind == "paced" and net.is_up() and net.placement(0) == {"environment": {spec.ENV: net.spec().to_json()}}
    said = capsys.readouterr().out.strip()
    assert said.startswith("network: paced") and "simulated: no CAP_NET_ADMIN" in " ".join(said.split())
    assert max(len(line) for line in said.splitlines()) <= 100   # the book's column, whatever the reason
    with pytest.raises(RuntimeError, match="kind='kernel' is not available here: simulated"):
        network.Network(2, 1, bandwidth=20e6, kind="kernel")


def test_one_network_serves_several_clusters_until_the_last_detaches(monkeypatch):
    """Two Clusters on one Network: the first to close must not take it down under the second (its next run()
    would time out); the last one does. What up() made is removed exactly once."""
    made, removed = [], []
    monkeypatch.setattr(kernel, "privileged", lambda: True)   # the host's path, whoever runs the suite
    monkeypatch.setattr(kernel, "sweep", lambda: [])
    monkeypatch.setattr(kernel, "build", lambda plan: made.append(plan["switch"]) or [plan["switch"]])
    monkeypatch.setattr(kernel, "remove", lambda names: removed.extend(names) or names)
    net = network.Network(2, 1, bandwidth=20e6, kind="paced")
    net.kind = "kernel"   # the kernel kind's bookkeeping, with build and remove recorded instead of run
    net.attach()
    net.attach()
    assert len(made) == 1 and net.is_up()
    net.detach()
    assert net.is_up() and removed == []
    net.detach()
    assert not net.is_up() and removed == made
    net.detach()          # one close too many changes nothing
    assert removed == made
    kept = network.Network(2, 1, bandwidth=20e6, kind="paced")
    kept.kind = "kernel"
    kept.up()             # brought up by its user, not by a Cluster: the user takes it down
    kept.attach()
    kept.detach()
    assert kept.is_up() and removed == made[:1]


def _paced_probe(bandwidth=None):
    """Inside a rank of a Cluster on the pacer: is commlib's pacer active, and do the results stay right?
    (bandwidth: a keyword of the same name as the pacer's own, which must reach the function untouched)"""
    from commlib import algorithms as alg

    t = torch.full((1000,), float(dist.get_rank()))
    alg.ring_all_reduce(t)
    return alg.network() is not None, float(t[0]), bandwidth


def test_a_cluster_on_the_pacer_runs_every_function_inside_emulate(monkeypatch):
    monkeypatch.setattr(netmod, "available", lambda: (False, "simulated"))
    net = network.Network(2, 1, bandwidth=1e9, quiet=True)
    with cl.Cluster(2, network=net, timeout=60) as c:
        assert c.network is net and net.kind == "paced" and net._users == 1
        assert c.run(_paced_probe, bandwidth=5) == [(True, 1.0, 5), (True, 1.0, 5)]
    assert net._users == 0


@pytest.mark.parametrize("world_size, backend, words", [
    (3, "gloo", "needs world_size = nodes x gpus_per_node = 2 x 1 = 2, got 3"),
])
def test_a_cluster_that_does_not_fit_the_network_is_refused_before_it_starts(world_size, backend, words, monkeypatch):
    from commlib.cluster import launcher

    monkeypatch.setattr(launcher, "Launcher", None)
    net = network.Network(2, 1, bandwidth=20e6, kind="paced")
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        cl.Cluster(world_size, backend=backend, network=net)
    with pytest.raises(TypeError, match="network must be a commlib.network.Network or None, got str"):
        cl.Cluster(2, network="kernel")


def test_names_carry_the_owner_and_a_dead_owner_is_recognised():
    """By name alone a kept network's builder is its owner: once it is dead, only the mark (names.KEPT) keeps it."""
    name = kernel.new_name()
    assert name.startswith(kernel.PREFIX + f"{os.getpid()}.") and kernel.owner_alive(name + "-n0")
    assert kernel.owner_alive(kernel.new_name(keep=True) + "-sw")
    assert kernel.owner_alive("clnet-somebody-else")  # not a name of ours: never taken for a dead owner's
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = f"{kernel.PREFIX}{proc.stdout.strip()}.12345-1-n0"
    assert not kernel.owner_alive(dead)
    reused = f"{kernel.PREFIX}{os.getpid()}.1-1-n0"  # this pid, another start time: a reused pid, not us
    assert not kernel.owner_alive(reused)


def test_a_gone_network_runs_logs_are_removed_and_no_one_elses():
    """A SIGKILLed `network run` cannot remove its torchrun logs: the next run's start or `network clean` does
    (names.dead_run_logs), by the owner in the folder's name; a live owner's and a folder named otherwise stay."""
    import shutil
    import tempfile

    from commlib.network import names

    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tempfile.mkdtemp(prefix=f"{names.RUN_LOGS}{proc.stdout.strip()}.12345-")
    Path(dead, "node0").mkdir()
    Path(dead, "node0", "stderr.log").write_text("a rank's last words")
    live, other = names.run_logs(), tempfile.mkdtemp(prefix=names.RUN_LOGS + "someone-")
    try:
        names.dead_run_logs()   # another test's run may have removed it first: the end state is the claim
        assert not os.path.exists(dead) and os.path.isdir(live) and os.path.isdir(other)
    finally:
        for path in (dead, live, other):
            shutil.rmtree(path, ignore_errors=True)


def test_without_capabilities_a_keeper_is_tried_and_its_failure_said_in_one_line(monkeypatch):
    from commlib.network import userns

    monkeypatch.setattr(kernel, "_capabilities", lambda: 0)
    monkeypatch.setattr(kernel, "_probed", {})
    monkeypatch.setattr(userns, "probe", lambda: "cannot make a user namespace here (Operation not permitted); "
                                                 "run as root")
    ok, why = network.available()
    if kernel.prerequisites() is None:
        assert not ok and "\n" not in why
        assert why == ("the kernel network cannot be built here: cannot make a user namespace here (Operation "
                       "not permitted); run as root")


@pytest.mark.parametrize("args, words", [
    (["network", "down"], "network down needs NAME"),
    (["network", "down", "eth0"], "network down: NAME must be a network made by `network up` (clnet-...), got 'eth0'"),
    (["network", "down", "clnet-no-such"], "network down: no network named 'clnet-no-such'"),
    (["network", "clean", "x"], "network clean takes no NAME"),
    (["network", "up", "--nodes", "0"], "argument --nodes: must be an integer > 0, got '0'"),
    (["network", "up", "--nodes", "65"], "--nodes must be an int >= 1 and <= 64, got 65"),
    (["network", "up", "--bandwidth", "5"], "--bandwidth must be a finite number of bytes/s >= 10000"),
    (["network", "sideways"], "argument action: invalid choice: 'sideways'"),
    (["network", "run", "examples/ddp_train.py"], "the following arguments are required: --bandwidth"),
    (["network", "run", "--bandwidth", "2e7", "--nodes", "33", "--gpus-per-node", "2", "examples/ddp_train.py"],
     "network run: --nodes x --gpus-per-node must be <= 64"),
    (["network", "run", "--bandwidth", "2e7", "--nics-per-node", "2", "examples/ddp_train.py"],
     "network run: --nics-per-node must be <= gpus_per_node (1)"),
])
def test_the_cli_refuses_nonsense_in_one_line_with_exit_2(args, words):
    proc = subprocess.run([sys.executable, "-m", "commlib", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr
