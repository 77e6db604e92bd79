"""The kernel network for a learner who is not root (commlib.network.userns): a keeper in a user namespace of
its own builds it, the ranks join it, the notebook's process stays on the host's network, and nothing outlives
the keeper. As root (CI) the same path runs with COMMLIB_KERNEL_NETWORK=userns, and once for real as an ordinary
user (setpriv to nobody, with an ordinary user's PATH: no /usr/sbin). Where this kernel allows no user namespace
for an ordinary user these are skipped, unless COMMLIB_REQUIRE_NETNS=1 (CI), which makes that a failure."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import commlib as cl
from commlib import network
from commlib.network import kernel, userns

ROOT = Path(__file__).resolve().parents[1]
RATE = 20e6
USER_PATH = "/usr/local/bin:/usr/bin:/bin"   # Debian's PATH for an ordinary user


def _keeper_why() -> str | None:
    if not sys.platform.startswith("linux"):
        return "not Linux"
    return userns.probe()


WHY = _keeper_why()
if WHY and os.environ.get("COMMLIB_REQUIRE_NETNS") == "1":
    raise RuntimeError(f"COMMLIB_REQUIRE_NETNS=1 but no user-namespace keeper can be made here: {WHY}")
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no user-namespace keeper here: {WHY}")


def where_am_i(rate):
    """Inside a rank: its address, its all-reduce's value, and the namespaces it is in."""
    import socket

    import torch
    import torch.distributed as dist

    t = torch.full((1 << 18,), float(dist.get_rank() + 1))
    dist.all_reduce(t)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:   # the address a packet out of here leaves from
        s.connect(("198.18.0.1", 9))
        address = s.getsockname()[0]
    return {"sum": float(t[0]), "address": address, "netns": os.readlink("/proc/self/ns/net"),
            "userns": os.readlink("/proc/self/ns/user"), "host": socket.gethostname(), "rate": rate}


def test_the_ranks_run_in_the_keepers_namespaces_and_nothing_outlives_it(monkeypatch):
    monkeypatch.setenv(kernel.SWITCH, "userns")
    monkeypatch.setattr(kernel, "_probed", {})
    ok, why = network.available()
    assert ok and "user namespace" in why
    host_netns = os.readlink("/proc/self/ns/net")
    net = network.Network(2, 1, bandwidth=RATE, kind="kernel", quiet=True)
    with cl.Cluster(world_size=2, network=net, timeout=60) as c:
        keeper = net.keeper
        assert keeper is not None and net.placement(1)["userns"] == f"/proc/{keeper.pid}/ns/user"
        # nothing on the host's /run/netns from this process or its keeper, while it runs or after (the suite's
        # other workers make their own there all the while: the list as a whole is not this test's to compare)
        owners = (f"{kernel.PREFIX}{os.getpid()}.", f"{kernel.PREFIX}{keeper.pid}.")
        ours = lambda: [n for n in kernel.namespaces() if n.startswith(owners)]  # noqa: E731
        assert ours() == []
        out = c.run(where_am_i, RATE)
        sent = net.nic_bytes()
        net.set_bandwidth(2 * RATE)   # the keeper changes the shapers in place
        again = c.run(where_am_i, 2 * RATE)
    assert [o["sum"] for o in out + again] == [3.0] * 4
    assert [o["address"] for o in out] == [net.gpu_address(0), net.gpu_address(1)]
    assert len({o["netns"] for o in out} | {host_netns}) == 3   # each rank its GPU's; this process the host's
    assert os.readlink("/proc/self/ns/net") == host_netns
    # a 1 MiB tensor's ring all-reduce: each rank sends half of it twice over its NIC, plus headers
    for (node, nic), (tx, rx) in sent.items():
        assert tx >= (1 << 20) * 1.0 and rx >= (1 << 20) * 1.0, (node, nic, tx, rx)
    assert net.keeper is None and keeper.proc.poll() is not None       # closed with the cluster
    assert ours() == []


def test_a_keeper_ends_with_its_parent_even_on_sigkill():
    script = textwrap.dedent("""
        import os, sys, time
        from commlib import network
        os.environ["COMMLIB_KERNEL_NETWORK"] = "userns"
        net = network.Network(2, 1, bandwidth=20e6, kind="kernel", quiet=True).up()
        print(net.keeper.pid, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env=os.environ | {"PYTHONPATH": str(ROOT)})
    try:
        keeper = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        deadline = time.monotonic() + 30
        while _state(keeper) not in ("gone", "Z"):   # its stdin, which only the parent held, closed
            assert time.monotonic() < deadline, "the keeper outlived its parent"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return "gone"


def test_an_ordinary_user_gets_the_kernel_network_with_no_sbin_on_path(tmp_path):
    """The learner's case for real: not root, PATH without /usr/sbin, JupyterLab's process on the host."""
    script = textwrap.dedent("""
        import json, os, sys
        import commlib as cl
        from commlib import network
        sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))
        from test_network_userns import where_am_i
        ok, why = network.available()
        net = network.Network(2, 1, bandwidth=20e6, kind="auto", quiet=True)
        with cl.Cluster(world_size=2, network=net, timeout=60) as c:
            out = c.run(where_am_i, 20e6)
        print(json.dumps({"uid": os.getuid(), "ok": ok, "why": why, "kind": net.kind, "out": out}))
    """)
    cmd = [sys.executable, "-c", script, __file__]
    env = {"PATH": USER_PATH, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    if os.geteuid() == 0:   # CI and the developers' machines: become nobody for this run
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv (util-linux) is needed to run this test as an ordinary user"
        os.chmod(tmp_path, 0o777)
        cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["uid"] != 0 and got["ok"] and "user namespace" in got["why"] and got["kind"] == "kernel"
    assert [o["sum"] for o in got["out"]] == [3.0, 3.0]
    assert [o["address"] for o in got["out"]] == ["198.19.0.1", "198.19.1.1"]


def test_tc_and_ip_are_found_in_sbin_whatever_path_says(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    for name in ("ip", "tc"):
        found = kernel.tool(name)
        assert found in [f"{d}/{name}" for d in kernel.SBIN] and os.access(found, os.X_OK)
    assert kernel.tool("no-such-tool-commlib") is None


def test_the_switch_turns_the_kernel_network_off_in_one_line(monkeypatch):
    monkeypatch.setenv(kernel.SWITCH, "off")
    ok, why = network.available()
    assert not ok and why == "the kernel network is turned off here (COMMLIB_KERNEL_NETWORK=off)"
    net = network.Network(2, 1, bandwidth=RATE, quiet=True)
    assert net.kind == "paced" and max(map(len, net.summary().splitlines())) <= 100
    assert "COMMLIB_KERNEL_NETWORK=off" in net.summary()


@pytest.mark.parametrize("key, value, fix", [
    ("kernel.apparmor_restrict_unprivileged_userns", "1",
     "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
    ("kernel.unprivileged_userns_clone", "0", "sudo sysctl -w kernel.unprivileged_userns_clone=1"),
    ("user.max_user_namespaces", "0", "sudo sysctl -w user.max_user_namespaces=15000"),
])
def test_where_a_sysctl_forbids_user_namespaces_the_advice_names_it(tmp_path, key, value, fix):
    path = tmp_path / key.replace(".", "/")
    path.parent.mkdir(parents=True)
    path.write_text(value + "\n")
    said = userns.advice(str(tmp_path))
    assert f"{key}={value}" in said and fix in said and "root" in said and "\n" not in said
    assert userns.switched_off(str(tmp_path / "none")) is None


def test_a_keeper_that_cannot_start_says_why_in_one_line(monkeypatch):
    monkeypatch.setattr(sys, "executable", shutil.which("false") or "/bin/false")   # it ends at once, silent
    with pytest.raises(userns.KeeperError) as e:
        userns.Keeper()
    assert str(e.value) == "the user-namespace keeper ended (exit code 1)"
    assert isinstance(e.value, kernel.NetworkError)


def test_a_kept_network_needs_root(monkeypatch):
    monkeypatch.setenv(kernel.SWITCH, "userns")
    net = network.Network(2, 1, bandwidth=RATE, kind="kernel", quiet=True)
    with pytest.raises(kernel.NetworkError, match="needs root"):
        net.up(keep=True)
    assert net.keeper is None and not net.made


def test_a_keeper_answers_whether_the_kernel_has_netem_as_the_host_would(monkeypatch):
    monkeypatch.setenv(kernel.SWITCH, "userns")
    asked_here = kernel.netem_available() if os.geteuid() == 0 else None
    said = userns.netem_available()
    assert isinstance(said, bool) and (asked_here is None or said == asked_here)


def test_a_keeper_made_from_a_thread_that_ends_lives_on():
    """A Network may be brought up from a short-lived thread: the keeper must outlive the thread, not the
    process (why it does not use PR_SET_PDEATHSIG, which follows the creating thread)."""
    import threading

    made = []
    t = threading.Thread(target=lambda: made.append(userns.Keeper()))
    t.start()
    t.join()
    keeper = made[0]
    try:
        assert keeper.call("probe") is None   # it answers: a PDEATHSIG would have killed it as the thread ended
    finally:
        keeper.close()
    assert keeper.proc.poll() is not None
