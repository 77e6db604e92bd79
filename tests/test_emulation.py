"""commlib.algorithms.emulation: the NIC arithmetic on an injected clock (no sleeping), and the live path for which
messages get paced and that results stay right. How exact the pacing is in time: benchmarks/topology_emulated.py."""

import collections
import contextlib
import os
import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

from test_algorithms import errors_of

import commlib as cl
from commlib import algorithms as alg
from commlib.algorithms import p2p
from commlib.algorithms import emulation as em
from commlib import topology as topo
from commlib.network import emulate

cloudpickle.register_pickle_by_value(sys.modules[__name__])

B, LAT = 100.0, 0.5  # 100 bytes/s per NIC direction: a 100-byte message takes 1 s plus latency


def net(g=2, k=1):
    return em.FluidNetwork(g, k, B, LAT)


# ------------------------------------------------------------------------- the NIC arithmetic
def test_one_message_takes_latency_plus_size_over_bandwidth():
    n = net()
    row = n.add(0, 2, 0, 100, now=3.0)
    assert n.due(row, 3.0) == pytest.approx(3.0 + 1.0 + LAT)
    assert not n.crosses(0, 1) and n.crosses(1, 2)


def test_two_flows_through_one_nic_each_get_half():
    n = net()
    a, b = n.add(0, 2, 0, 100, 0.0), n.add(1, 3, 0, 100, 0.0)  # ranks 0 and 1 share node 0's only NIC
    assert n.due(a, 0.0) == n.due(b, 0.0) == pytest.approx(2.0 + LAT)


def test_a_late_flow_slows_the_first_down_from_then_on():
    n = net()
    a = n.add(0, 2, 0, 100, 0.0)
    assert n.due(a, 0.0) == pytest.approx(1.0 + LAT)  # the earliest, if nothing else comes
    b = n.add(1, 3, 0, 100, 0.5)  # a has 50 bytes left; both now move at 50 B/s
    assert n.due(a, 0.5) == pytest.approx(1.5 + LAT)
    assert n.due(b, 0.5) == pytest.approx(2.0 + LAT)  # alone again from 1.5 for its last 50 bytes


def test_rails_give_each_gpu_its_own_nic():
    n = net(g=2, k=2)
    a, b = n.add(0, 2, 0, 100, 0.0), n.add(1, 3, 0, 100, 0.0)
    assert n.due(a, 0.0) == n.due(b, 0.0) == pytest.approx(1.0 + LAT)
    wide = em.FluidNetwork(1, 4, B, LAT)  # more NICs than GPUs: one GPU drives all four
    assert wide.due(wide.add(0, 1, 0, 400, 0.0), 0.0) == pytest.approx(1.0 + LAT)


def test_one_connection_is_first_in_first_out_and_latency_overlaps():
    n = net()
    a, b = n.add(0, 2, 0, 100, 0.0), n.add(0, 2, 1, 100, 0.0)
    assert n.due(a, 0.0) == pytest.approx(1.0 + LAT)
    assert n.due(b, 0.0) == pytest.approx(2.0 + LAT)  # bytes queue behind a; latencies do not add up


def test_receive_side_is_shared_too_and_shares_are_max_min_fair():
    n = em.FluidNetwork(2, 1, B)
    a, b = n.add(2, 0, 0, 100, 0.0), n.add(4, 0, 0, 100, 0.0)  # two nodes into node 0's NIC
    assert n.due(a, 0.0) == n.due(b, 0.0) == pytest.approx(2.0)
    n = em.FluidNetwork(2, 1, B)
    x, y, z = n.add(0, 2, 0, 100, 0.0), n.add(0, 4, 0, 50, 0.0), n.add(6, 2, 0, 100, 0.0)
    # x shares node 0's send side with y and node 1's receive side with z: 50 each until y ends at 1.0
    assert [n.due(r, 0.0) for r in (x, y, z)] == pytest.approx([2.0, 1.0, 2.0])


def test_rows_are_found_freed_and_bounded():
    n = net()
    row = n.add(0, 2, 7, 10, 0.0)
    assert n.find(0, 2, 7) == row
    n.free(row)
    assert n.find(0, 2, 7) is None
    n.table[:, em.STATE] = em.DONE  # every row delivered but not yet freed by its receiver
    with pytest.raises(RuntimeError, match=f"{em.SLOTS} messages in flight"):
        n.add(0, 2, 8, 1, 0.0)


@pytest.mark.parametrize("kwargs, words", [({"bandwidth": 0.0}, "bandwidth must be a finite number of bytes/s >= 1"),
                                           ({"bandwidth": float("nan")}, "bandwidth"),
                                           ({"bandwidth": 1e-300}, "bandwidth"),
                                           ({"bandwidth": 10**400}, r"bandwidth .* <= 1e\+15"),
                                           ({"latency": -1.0}, "latency must be a finite number of seconds >= 0"),
                                           ({"latency": 1e300}, "latency .* <= 3600"),
                                           ({"latency": 10**400}, "latency"),
                                           ({"gpus_per_node": 0}, "gpus_per_node"),
                                           ({"gpus_per_node": 10**400}, "gpus_per_node"),
                                           ({"nics_per_node": 1.5}, "nics_per_node")])
def test_bad_networks_are_named(kwargs, words):
    """Values the pacing arithmetic cannot carry (1e300 s, 1e-300 B/s, 10**400) are refused up front."""
    with pytest.raises((ValueError, TypeError), match=words):
        em.FluidNetwork(**{"gpus_per_node": 2, "nics_per_node": 1, "bandwidth": B, **kwargs})


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, dt):
        assert dt > 0
        self.t += dt


class Shared:
    def __init__(self, network):
        self.net = network

    @contextlib.contextmanager
    def locked(self):
        yield self.net


def test_senders_wait_until_sent_and_receivers_until_delivered():
    clock, shared = FakeClock(), Shared(net())
    ranks = [em.Emulator(shared, r, 2, 1, B, LAT, clock=clock, sleep=clock.sleep) for r in range(4)]
    to_2, to_3 = ranks[0].on_send(2, 100), ranks[1].on_send(3, 100)
    assert ranks[0].on_send(1, 100) is None and ranks[1].expect(0, 100) is None  # inside the node: not paced
    ranks[0].complete(to_2)
    assert clock.t == pytest.approx(2.0)  # its last byte left at half the NIC: 100 bytes at 50 B/s
    ranks[2].complete(ranks[2].expect(0, 100))
    ranks[3].complete(ranks[3].expect(1, 100))
    ranks[1].complete(to_3)  # its receiver has delivered (and freed) it already: nothing to wait for
    logged = [ranks[2].log[0], ranks[3].log[0]]
    assert [(m.src, m.dst, m.nbytes) for m in logged] == [(0, 2, 100), (1, 3, 100)]
    assert [m.due for m in logged] == pytest.approx([2.0 + LAT] * 2)  # they shared node 0's NIC
    assert [m.late_s for m in logged] == pytest.approx([0.0, 0.0]) and clock.t == pytest.approx(2.0 + LAT)
    assert (shared.net.table[:, em.STATE] == em.FREE).all()
    with pytest.raises(RuntimeError, match="message 1 from rank 0 to rank 2 is not in the emulated network"):
        ranks[2].complete(ranks[2].expect(0, 100))


# --------------------------------------------------------------------------------- live ranks
def paced_everything(bandwidth, latency, nics):
    """Every algorithm once under emulate(2 GPUs per node); -> (failures, inter-node sends, paced receives)."""
    p, r = dist.get_world_size(), dist.get_rank()
    x = torch.arange(1003, dtype=torch.float32) * (r + 1)
    want = x.clone()
    dist.all_reduce(want)
    a2a_in = torch.arange(8.0 * p) + 100 * r
    a2a_want = torch.empty_like(a2a_in)
    dist.all_to_all_single(a2a_want, a2a_in)
    failures, sent = [], []
    with emulate(2, bandwidth, latency, nics) as net:
        runs = {"flat_ring": lambda t, tr: alg.ring_all_reduce(t, trace=tr),
                "multi_ring": lambda t, tr: alg.multi_ring_all_reduce(t, 2, trace=tr),
                "hierarchical": lambda t, tr: alg.hierarchical_all_reduce(t, 2, trace=tr),
                "recursive_doubling": lambda t, tr: alg.recursive_doubling_all_reduce(t, trace=tr),
                "tree": lambda t, tr: alg.tree_all_reduce(t, trace=tr)}
        for grouped in (None, True):
            p2p.GROUP_P2P = grouped
            for name, fn in runs.items():
                tr = alg.Trace()
                got = fn(x.clone(), tr)
                if not torch.equal(got, want):
                    failures.append(f"{name} grouped={grouped}")
                sent += [(e.src, e.dst, e.nbytes) for e in tr.events if e.inter_node]
                if any(e.inter_node is None for e in tr.events):
                    failures.append(f"{name}: trace does not mark inter-node messages")
            p2p.GROUP_P2P = None
        tr = alg.Trace()
        if not torch.equal(alg.pairwise_all_to_all(a2a_in, trace=tr), a2a_want):
            failures.append("pairwise_all_to_all")
        sent += [(e.src, e.dst, e.nbytes) for e in tr.events if e.inter_node]
        before = len(net.log)
        builtin = x.clone()
        dist.all_reduce(builtin)  # torch's own collectives are not paced
        if len(net.log) != before:
            failures.append("dist.all_reduce was paced")
        paced = [(m.src, m.dst, m.nbytes) for m in net.log]
        if any(m.released < m.due for m in net.log):
            failures.append("released before due")
        if net.shared.path is not None:
            failures.append(f"the shared table {net.shared.path} outlives the ranks' start")
    if alg.network() is not None:
        failures.append("NETWORK left set")
    return failures, sent, paced


@pytest.fixture(scope="module")
def cluster4_paced():
    """A 4-rank cluster for the tests whose ranks end well (each checks its ranks leave no emulation set); the
    test that kills a rank starts its own."""
    with cl.Cluster(world_size=4, timeout=120) as c:
        yield c


def test_every_inter_node_message_and_only_those_are_paced(cluster4_paced):
    c = cluster4_paced
    out = c.run(paced_everything, 2e9, 2e-4, 1)
    for rank, (failures, _, _) in enumerate(out):
        assert failures == [], f"rank {rank}: {failures}"
    sent = collections.Counter(m for _, s, _ in out for m in s)
    paced = collections.Counter(m for _, _, pc in out for m in pc)
    assert paced == sent and len(sent) > 0
    assert all(src // 2 != dst // 2 for src, dst, _ in paced)

    errors = c.run(emulate_errors)
    for e in errors:
        assert "world size (4) must be a multiple of gpus_per_node (3)" in e["multiple"]
        assert "every rank must pass the same emulate() arguments" in e["differ"]
        assert "already active" in e["nested"]
        assert "bandwidth must be a finite number of bytes/s >= 1" in e["nan"]
        assert e["left set"] is False


def nested():
    with emulate(2, 1e9), emulate(2, 1e9):
        pass


def emulate_errors():
    errors = errors_of({"multiple": lambda: emulate(3, 1e9).__enter__(),
                        "differ": lambda: emulate(2, 1e9 * (1 + dist.get_rank())).__enter__(),
                        "nested": nested,
                        "nan": lambda: emulate(2, float("nan")).__enter__()}, (ValueError, RuntimeError))
    errors["left set"] = alg.network() is not None
    return errors


# ------------------------------------------------------------------------ state left behind (issue 24)
def die_during_setup(folder):
    """Rank 1 dies while emulate() sets up (after rank 0 made the shared table, before everyone opened it)."""
    em._shm_dir = lambda: folder  # where a named table would go
    if dist.get_rank() == 1:
        dist.broadcast_object_list = lambda *a, **k: os._exit(3)  # rank 0 has made the table by then
    with emulate(2, 1e9):
        pass


def test_a_rank_dying_during_setup_leaves_no_shared_table(tmp_path):
    with cl.Cluster(world_size=4, timeout=20) as c:
        with pytest.raises((cl.RankError, cl.ClusterTimeout)):
            c.run(die_during_setup, str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_the_table_is_never_a_file_on_linux(tmp_path, monkeypatch):
    if not hasattr(os, "memfd_create"):
        pytest.skip("the named-file fallback (macOS) is swept instead")
    monkeypatch.setattr(em, "_shm_dir", lambda: str(tmp_path))
    fd, path = em._create_table()
    try:
        assert os.listdir(tmp_path) == [] and path.startswith("/proc/")
        assert os.fstat(fd).st_size == em.SIZE
    finally:
        os.close(fd)


def test_tables_of_dead_creators_are_swept(tmp_path):
    dead = tmp_path / f"{em.PREFIX}999999999-x"  # beyond pid_max: no such process
    alive = tmp_path / f"{em.PREFIX}{os.getpid()}-y"
    dead.write_bytes(b"")
    alive.write_bytes(b"")
    em._sweep(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [alive.name]


def enter_and_abandon():
    cm = emulate(2, 1e6)
    cm.__enter__()
    keep = sys.modules.setdefault("_abandoned_emulate", type(sys)("_abandoned_emulate"))
    keep.cm = cm  # kept alive past the run: its finally never runs
    return alg.network() is not None


def after_abandoned():
    t = torch.ones(1000)
    alg.ring_all_reduce(t)  # at 1 MB/s this would take milliseconds per message if still paced
    was_active = alg.network() is not None
    with emulate(2, 1e9) as net:
        alg.ring_all_reduce(torch.ones(8))
        paced = len(net.log)
    return was_active, paced, alg.network() is None


def test_an_abandoned_emulate_ends_with_its_run(cluster4_paced):
    assert cluster4_paced.run(enter_and_abandon) == [True] * 4
    out = cluster4_paced.run(after_abandoned)
    assert [(was_active, cleared) for was_active, _, cleared in out] == [(False, True)] * 4
    assert sum(paced for _, paced, _ in out) > 0  # the next emulate() works
