"""The what-if's prices: a collective's time on a topology by the course's models, and a traced call moved to new
hardware (whatif.py asks; Pricer answers for one scenario).

    price("all_reduce", 1 << 30, 16, topology.preset("dgx_h100", 2), "multi_ring")   # -> seconds
    reprice(measured_s, old_model_s, new_model_s)    # the measured time above the model is kept (a call alone)
    Pricer(...).parts(call)                           # (fixed, byte phase) as measured and in the scenario
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from dataclasses import replace

from commlib import cost
from commlib import topology as topo
from commlib.profiling.stragglers import P2P
from commlib.ui.language import tr

# "ring": one flat ring (topology's flat_ring); "tree": NCCL's double binary tree, within a node or one GPU per node
ALGORITHMS = ("ring", "multi_ring", "hierarchical", "in_network", "tree")
COMMLIB_ALGORITHMS = {"ring": "flat_ring", "hierarchical": "hierarchical"}   # a commlib:* call's stated algorithm
TRADEOFF = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                        "benchmarks", "compression_tradeoff.json")
# the kernel network's what-if accuracy (benchmarks/whatif_accuracy.py): its FSDP2 job, a Gloo job, on 2 nodes of
# 2 GPUs with 1 NIC per node and with 2 (a NIC per GPU): the rows that show Gloo's own schedules using both NICs
KERNEL_ACCURACY = os.path.join(os.path.dirname(TRADEOFF), "whatif_accuracy_kernel.json")
GLOO_NICS_JOB = "fsdp2"
GLOO_NICS_ROW = re.compile(r"(\d+) GPUs/node, (\d+) NIC\(s\)")


def group_topology(t: topo.Topology, size: int, stride: int = 1) -> topo.Topology:
    """A group of `size` ranks `stride` apart on t: its nodes and members per node. A group that fills its nodes
    has their NICs; one that does not shares them with the node's other groups, each member with its GPU's share
    (k/g NICs: plan.hardware's nic_share, as the planner prices groups)."""
    per_node = max(1, min(size, t.gpus_per_node // stride)) if stride < t.gpus_per_node else 1
    nodes = -(-size // per_node)
    if per_node == t.gpus_per_node or nodes == 1:
        return topo.Topology(nodes, per_node, t.intra, t.inter, t.nics_per_node)
    share = replace(t.inter, name=f"{t.inter.name} share", bandwidth=t.inter.bandwidth * t.nics_per_node / t.gpus_per_node)
    return topo.Topology(nodes, per_node, t.intra, share, per_node)


def price(op: str, nbytes, size, t: topo.Topology, algorithm: str, stride: int = 1, gamma: float = 0.0):
    """Seconds for one call on t (None where no model applies: no bytes, a group of one, an op without one)."""
    if not nbytes or not size or size < 2 or t is None:
        return None
    g = group_topology(t, size, stride)
    if algorithm == "tree" and op == "all_reduce":
        return _tree(nbytes, size, g, gamma)
    if op in topo.PAIRS:
        alg = algorithm if algorithm in topo.PAIRS[op] else ("bulk" if op == "all_to_all" else "multi_ring")
        return topo.collective_time(op, nbytes, g, alg, gamma if op in ("all_reduce", "reduce_scatter") else 0.0)
    link = t.intra if g.nodes == 1 else t.inter
    if op in ("broadcast", "reduce"):
        return cost.collective_time(op, nbytes, size, link, "ring")
    if op in P2P:
        return cost.collective_time("sendrecv", nbytes, 2, link, "ring")
    return None


def _tree(nbytes, size: int, g: topo.Topology, gamma: float) -> float:
    """NCCL's double binary tree all-reduce (cost: c + 2h a + 2n b + n g) on the one link its group crosses: the
    node's, or the rail between nodes of one GPU each. Across nodes of several GPUs NCCL chains the GPUs of a node
    under a tree of nodes (src/graph/trees.cc), a shape the course's models do not price: refused."""
    if g.nodes == 1:
        link = g.intra
    elif g.gpus_per_node == 1:
        link = replace(g.inter, name=f"{g.inter.name} rail", bandwidth=g.rail_bandwidth)
    else:
        raise ValueError(f"algorithm 'tree' is priced within one node or across nodes of one GPU each; this group "
                         f"spans {g.nodes} nodes of {g.gpus_per_node} (try multi_ring or hierarchical)")
    return cost.collective_time("all_reduce", nbytes, size, link, "double_binary_tree", gamma)


# what each backend sends for a call, and where that is written (torch 2.13.0's headers as installed, NCCL 2.30.7);
# (backend, op) -> (what it runs, the ring-equivalent op it is priced as, the source)
SENT = {
    ("gloo", "all_reduce"): ("gloo::allreduce, a ring", "all_reduce",
                             "torch/csrc/distributed/c10d/ProcessGroupGlooDetail.hpp:292-310"),
    ("gloo", "reduce_scatter"): ("an all-reduce of a copy of the whole input", "all_reduce",
                                 "ProcessGroupGloo.cpp reduce_scatter; its trace: gloo:all_reduce per call"),
    ("gloo", "all_gather"): ("gloo::allgather, a ring", "all_gather", "ProcessGroupGlooDetail.hpp:573"),
    ("nccl", "all_reduce"): ("ring or double binary tree (as its kernel says)", "all_reduce",
                             "src/device/all_reduce.h"),
    ("nccl", "reduce_scatter"): ("a ring reduce-scatter", "reduce_scatter", "src/device/reduce_scatter.h"),
    ("nccl", "all_gather"): ("a ring all-gather", "all_gather", "src/device/all_gather.h"),
}
# a call whose recorded time holds a handshake that the same op on a larger group does not pay: (backend, op) ->
# (what it pays, on how many ranks, the source: gloo read at github.com/pytorch/gloo 70dc360, April 2026, the
# share of the call's bytes' time the later member ends after the other: its peer's second half of its data)
HANDSHAKE = {
    ("gloo", "all_gather"): (
        "each send is posted before its recv, and a send goes only once the peer's receive notice has come; on 2 "
        "ranks the peer is both neighbours, so the later rank's notice waits behind its own data on the same "
        "connection and the earlier rank's second half goes after it", 2,
        "gloo/allgather.cc:77-79; gloo/transport/tcp/pair.cc:913-945 (send), 947-975 (recv), 831-853 (queue)", 0.5),
}
# a ring's steps, each a send and a receive that wait on each other (the unit of Pricer.measured_ratio and waited)
CHUNKED = ("all_reduce", "all_gather", "reduce_scatter")   # a ring op's step moves bytes/p; the others' their bytes
STEPS = {"all_reduce": lambda p: 2 * (p - 1), "all_gather": lambda p: p - 1, "reduce_scatter": lambda p: p - 1,
         "broadcast": lambda p: 1, "reduce": lambda p: 1, **{op: (lambda p: 1) for op in P2P}}
CONCURRENCY = {"gloo": ("2 worker threads per process group, one FIFO queue",
                        "ProcessGroupGloo.hpp:264 (Options::threads{2})"),
               "nccl": ("one stream per process group: its calls in order", "ProcessGroupNCCL's ncclStreams")}


def backend_table(nbytes: int, size: int) -> list[dict]:
    """Per (backend, op): what it runs, the bytes each NIC carries each way for an nbytes call of `size` ranks
    (one per node), as priced, and the source."""
    per_nic = {"all_reduce": 2 * (size - 1) / size, "reduce_scatter": (size - 1) / size,
               "all_gather": (size - 1) / size}
    return [{"backend": b, "op": op, "runs": tr(runs), "priced_as": as_, "nic_bytes": per_nic[as_] * nbytes,
             "source": src} for (b, op), (runs, as_, src) in SENT.items()]  # runs: in the notebook's language


def gloo_nics_measured(path: str = KERNEL_ACCURACY) -> dict | None:
    """What the course's kernel network measured of a Gloo job (FSDP2) on nodes of several GPUs with one NIC per
    node and with more, and what the what-if predicted for each, from the committed accuracy benchmark ->
    {"job", "gpus_per_node", "nics": (fewest, most), "measured_s": (..), "predicted_s": (..), "source"}; None
    where the file or its rows are not there (the note then gives no numbers)."""
    try:
        with open(path, "rb") as f:
            rows = json.loads(f.read(1 << 22))["rows"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    found = {}
    for r in rows if isinstance(rows, list) else ():
        m = GLOO_NICS_ROW.fullmatch(str(r.get("scenario"))) if isinstance(r, dict) else None
        if m and r.get("job") == GLOO_NICS_JOB and all(isinstance(r.get(k), (int, float)) and r[k] > 0
                                                       for k in ("measured_s", "predicted_s")):
            found[int(m[2])] = (int(m[1]), r["measured_s"], r["predicted_s"])
    if len(found) < 2:
        return None
    lo, hi = min(found), max(found)
    return {"job": GLOO_NICS_JOB.upper(), "gpus_per_node": found[lo][0], "nics": (lo, hi),
            "measured_s": (found[lo][1], found[hi][1]), "predicted_s": (found[lo][2], found[hi][2]),
            "source": os.path.join("benchmarks", os.path.basename(path))}


def notice_behind_data(t: topo.Topology, size: int, stride: int = 1) -> bool:
    """Whether a flat ring of `size` ranks `stride` apart on t sends some receive notice out of a NIC that also
    sends the ring's data: the receiver of a hop across nodes answers through its GPU's NIC (the kernel network
    routes each GPU by its source address onto its rail, NIC (GPU mod k) of its node), and some hop across nodes
    leaves by that NIC. On one NIC per node, or one GPU per node, every such NIC does; with a NIC per GPU of 2
    GPUs a node, the ring's hops across nodes leave by the other GPU's NIC."""
    gpn, k = t.gpus_per_node, t.nics_per_node
    ranks = [i * stride for i in range(size)]
    nic = lambda r: (r // gpn, (r % gpn) % k)   # noqa: E731
    across = [(a, b) for a, b in zip(ranks, ranks[1:] + ranks[:1]) if a // gpn != b // gpn]
    sending = {nic(a) for a, _ in across}
    return any(nic(b) in sending for _, b in across)


def streamed_latency(op: str, nbytes, size: int, t: topo.Topology, algorithm: str = "flat_ring",
                     stride: int = 1) -> float:
    """Seconds of the model's latency a ring call on t does not pay where its steps do not wait for one another
    (Pricer.streams): all its steps' latency but one step's."""
    latency = price(op, nbytes, size, fixed_part(t), algorithm, stride, 0.0) or 0.0
    return latency * (1 - 1 / STEPS[op](size))


def fixed_part(t: topo.Topology | None) -> topo.Topology | None:
    """t with links 10^9 times faster: a price on it is the price's fixed part (latency, reduction), the rest
    is the byte phase (the time the bytes take on idle links)."""
    if t is None:
        return None
    return replace(t, intra=replace(t.intra, bandwidth=t.intra.bandwidth * 1e9),
                   inter=replace(t.inter, bandwidth=t.inter.bandwidth * 1e9))


@functools.lru_cache(maxsize=4096)
def _links(t: topo.Topology, ranks: tuple, size: int, stride: int) -> tuple:
    return links(t, ranks, size, stride)


def cached_links(t: topo.Topology, ranks, size: int, stride: int = 1) -> tuple:
    """links(), remembered per (topology, ranks, size, stride): a job's sets repeat a few groups."""
    return _links(t, tuple(ranks), size, stride)


def links(t: topo.Topology, ranks, size: int, stride: int = 1) -> tuple:
    """The links a call of these (traced, global) ranks' group loads on t: each member node's NICs, both ways
    (a group that fills its nodes uses all k; one that does not, its GPU's rail, NIC i mod k), or, for a group
    inside one node, that node's own fabric."""
    g = group_topology(t, size, stride)
    gpn, k = t.gpus_per_node, t.nics_per_node
    nodes = {r // gpn for r in ranks}
    if g.nodes == 1 and len(nodes) <= 1:
        return tuple((n, "in-node") for n in nodes)
    out = []
    for r in ranks:
        nics = range(k) if g.gpus_per_node == gpn else ((r % gpn) % k,)
        out += [(r // gpn, j, d) for j in nics for d in ("out", "in")]
    return tuple(sorted(set(out)))


def reprice(measured_s: float, old_s, new_s) -> float:
    """The measured transfer moved to new hardware: the model's new time plus what the measurement spent above
    the model's old time; a transfer faster than its model scales with it (continuous where they are equal)."""
    if old_s is None or new_s is None or old_s <= 0:
        return measured_s
    return new_s + (measured_s - old_s) if measured_s >= old_s else measured_s * new_s / old_s


def codec_s_per_byte(ratio: float, path: str = TRADEOFF) -> tuple[float, str]:
    """Encode + decode seconds per gradient byte for a compression ratio: the committed compression benchmark's
    hook time above its all-reduce time, for the method whose bytes ratio is nearest -> (s/byte, where from)."""
    with open(path, "rb") as f:
        data = json.loads(f.read(1 << 22))
    rows = [r for r in data["rows"] if r.get("bytes_per_step") and r.get("overhead_s") is not None]
    base = next(r["bytes_per_step"] for r in rows if r["method"] == "none")
    best = min((r for r in rows if r["method"] != "none"), key=lambda r: abs(math.log(base / r["bytes_per_step"] / ratio)))
    return best["overhead_s"] / base, (f"{best['variant']} ({base / best['bytes_per_step']:.0f}x) in "
                                       "benchmarks/compression_tradeoff.json")


def _kind(c) -> tuple:
    """What a call's prices depend on: the key Pricer remembers them by."""
    return c.op, c.bytes, c.group, c.group_size, c.kernel is None, c.algorithm


class Pricer:
    """One scenario's price of a call, in us, codec time included."""

    def __init__(self, m_topo, t, factor, dp, strides, gamma, compress, per_byte, algorithm, new_world,
                 gloo: bool = False, small=None, notice=None, credit=None):
        self.m, self.t, self.factor, self.dp, self.strides = m_topo, t, factor, dp, strides
        self.gamma, self.compress, self.per_byte, self.algorithm, self.world = gamma, compress, per_byte, algorithm, new_world
        self.gloo = gloo              # the traces' backend is Gloo: its own calls priced as Gloo runs them
        self.small = small            # (nbytes, payload bytes/s) -> s of a 2-rank call there, or None (measured_ratio)
        self.measured = 0             # calls (sets) priced by it (measured_ratio)
        self.notice = notice          # (bytes a step, payload bytes/s) -> s a step of commlib's ring waits (waited)
        self.noticed = 0              # kinds of call that pay it in the scenario (waited)
        self.credit = credit          # (bytes a step, payload bytes/s) -> s a streaming call ends early (head_start)
        self.streamed = 0             # kinds of Gloo's call that stream in the scenario (streams)
        self.m_fixed, self.t_fixed = fixed_part(m_topo), fixed_part(t)
        self.priced = self.kept = 0   # calls (sets) with a model in the scenario, and without one
        self._parts = {}              # parts() per kind of call: a job repeats a few kinds many times
        self._ratios = {}             # measured_ratio() per kind of call
        self._heads = {}              # head_start() per kind of call

    def _models(self, c, fixed: bool = False):
        """-> (seconds on the measured hardware, seconds in the scenario, codec us); fixed: their fixed parts."""
        m, t = (self.m_fixed, self.t_fixed) if fixed else (self.m, self.t)
        p = c.group_size
        p_new = p * self.factor if c.group in self.dp and p else p
        if p_new is not None and abs(p_new - round(p_new)) > 1e-9:
            raise ValueError(f"{self.world} ranks do not divide into data-parallel groups of {p} x {self.factor:g}")
        stride = self.strides.get(c.group, 1)
        old_alg, new_alg = self.algorithms(c)
        grad = c.group in self.dp and c.op in ("all_reduce", "reduce_scatter", "all_gather") and self.compress
        nbytes = c.bytes / self.compress if grad and c.bytes else c.bytes
        op = self.sent_as(c)
        try:
            old = price(op, c.bytes, p, m, old_alg, stride, self.gamma)
        except ValueError:   # a traced tree across nodes of several GPUs: no model, the call keeps its time
            old = None
        new = price(op, nbytes, round(p_new) if p_new else p_new, t, new_alg, stride, self.gamma)
        if self.credit is not None:   # Gloo's ring where no notice waits behind its data: one latency
            old = old if old is None else old - self.streamed_latency(c, c.bytes, p, m, old_alg, stride)
            new = new if new is None else new - self.streamed_latency(c, nbytes, round(p_new) if p_new else p_new,
                                                                      t, new_alg, stride)
        if not fixed and self.notice is not None:   # a byte-like wait: in the byte phase (the fixed part has none)
            old = old if old is None else old + self.waited(c, c.bytes, p, m, old_alg, stride)
            new = new if new is None else new + self.waited(c, nbytes, round(p_new) if p_new else p_new, t,
                                                            new_alg, stride)
        return old, new, (self.per_byte * (c.bytes or 0) * 1e6 if grad else 0.0)

    def algorithms(self, c) -> tuple[str, str]:
        """The model a call is priced by -> (on the measured hardware, in the scenario)."""
        if c.kernel:   # NCCL: its rings span nodes through every NIC (multi-ring), or the tree its kernel names
            old = "tree" if c.algorithm == "tree" else "multi_ring"
        else:          # Gloo's ring, or the algorithm a commlib:* call states
            old = COMMLIB_ALGORITHMS.get(c.algorithm or "", "flat_ring")
        new = {"ring": "flat_ring"}.get(self.algorithm, self.algorithm) if self.algorithm else old
        if new == "tree" and c.op != "all_reduce":   # a tree only for all-reduces: the others keep theirs
            new = old
        return old, new

    def flat_across_nodes(self, c, measured: bool = False) -> bool:
        """One of Gloo's own calls that the scenario (measured: the measured hardware) prices as one flat ring over
        more than one node: its time does not depend on the NICs per node (topology's flat_ring crosses each node
        boundary once each way), where Gloo's own schedules (a connection per peer) can spread over them."""
        if not self._gloos(c) or self.sent_as(c) not in topo.PAIRS or self.credit is not None:
            return False   # with `credit` (the kernel network) the NICs are priced: streams
        old, new = self.algorithms(c)
        t, size, alg = (self.m, c.group_size, old) if measured else (self.t, self.parts(c)[3], new)
        return alg == "flat_ring" and t is not None and bool(size and size > 1) and \
            group_topology(t, size, self.strides.get(c.group, 1)).nodes > 1

    def sent_as(self, c) -> str:
        """The collective whose bytes the call sends: Gloo's reduce_scatter is an all-reduce of the whole input
        (ProcessGroupGloo.cpp; its trace shows a gloo:all_reduce for each), twice a ring reduce-scatter's."""
        if self._gloos(c) and ("gloo", c.op) in SENT:
            return SENT["gloo", c.op][1]
        return c.op

    def _gloos(self, c) -> bool:
        """The call is one of Gloo's own (traced on Gloo, no kernel, no algorithm a commlib:* call states)."""
        return self.gloo and not c.kernel and c.algorithm is None

    def unknown(self, c) -> bool:
        """A Gloo call whose algorithm this module has not read (broadcast, all_to_all, ...): priced as the
        course's model of its op, and said so."""
        return self._gloos(c) and ("gloo", c.op) not in SENT and \
            c.op not in ("barrier",)

    def handshake_dropped(self, c) -> bool:
        """A call traced on the group size whose handshake HANDSHAKE names (a Gloo all-gather on 2 ranks) that
        the scenario runs on a larger group: its recorded time above the model and its later member's tail are
        that handshake's, and the larger ring does not pay them (the notice goes to the other neighbour, on a
        connection that carries none of the call's data). A call traced on a larger group and asked on 2 ranks
        is not given one: the replay cannot say how far apart its members would arrive."""
        paid = self.handshake(c)
        if paid is None:
            return False
        size = self.parts(c)[3]
        return size is not None and size > paid[1]

    def waited(self, c, nbytes, size, t, algorithm, stride) -> float:
        """Seconds a call of commlib's own ring (a commlib:* call, not Gloo's) waits beyond its bytes on t: on 3 or
        more ranks across nodes each step's send waits for the receiver's notice, which leaves the receiver's NIC
        behind the packet the receiver is sending on (`notice`: network.links.notice, measured by
        benchmarks/ring_steps.py). 0 on 2 ranks (the notice's connection carries no data of the step), inside a
        node, where no notice leaves by a NIC that sends the ring's data (notice_behind_data: a NIC per GPU whose
        next hop stays in its node), for Gloo's own calls (a latency a step stands for their notices; where none
        waits, streams) and for other algorithms."""
        steps = STEPS.get(c.op)
        if (steps is None or self._gloos(c) or c.kernel or algorithm != "flat_ring" or not nbytes or not size
                or size < 3 or t is None):
            return 0.0
        g = group_topology(t, size, stride)
        if g.nodes < 2 or not notice_behind_data(t, size, stride):
            return 0.0
        return steps(size) * self.notice(nbytes / size if c.op in CHUNKED else nbytes, g.inter.bandwidth)

    def streams(self, c, size, t, algorithm, stride) -> bool:
        """Whether one of Gloo's own ring calls runs on t with no receive notice behind its data: 3 or more
        ranks across nodes where no notice leaves by a NIC that sends the ring's data (notice_behind_data: a NIC
        per GPU whose next hop stays in its node). Nothing then holds a step back, and Gloo's ring streams its
        chunks (streamed_latency, head_start). Where a notice waits behind data (one NIC per node, one GPU per
        node, 2 ranks), each step waits for it, which the model's latency a step stands for. Priced so only where
        `credit` is given (the kernel network, where benchmarks/gloo_rings.py measured both: on 2 x 2 with a NIC
        per GPU, calls of 128 KiB to 1 MiB after idle links ended at their bytes and one latency, less a share of
        a packet where a step is one packet; with one NIC per node at about a latency a step, or over it)."""
        if (self.credit is None or not self._gloos(c) or self.sent_as(c) not in CHUNKED
                or algorithm != "flat_ring" or not size or size < 3 or t is None):
            return False
        return group_topology(t, size, stride).nodes > 1 and not notice_behind_data(t, size, stride)

    def streamed_latency(self, c, nbytes, size, t, algorithm, stride) -> float:
        """streamed_latency() for a call that streams (streams), else 0."""
        if not nbytes or not self.streams(c, size, t, algorithm, stride):
            return 0.0
        return streamed_latency(self.sent_as(c), nbytes, size, t, algorithm, stride)

    def head_start(self, c) -> float:
        """Seconds a streaming call (streams) in the scenario ends under its bytes where its links were idle before
        it (flows.Flows: up to that idle time): `credit` of a step's bytes (network.links.credit: what
        benchmarks/gloo_rings.py measured). 0 where the call streamed as traced (its recorded time holds it) or
        does not stream in the scenario. Remembered per kind of call, as parts()."""
        key = _kind(c)
        if key not in self._heads:
            self._heads[key] = self._head(c)
        return self._heads[key]

    def _head(self, c) -> float:
        size, stride = self.parts(c)[3], self.strides.get(c.group, 1)
        old, new = self.algorithms(c)
        if not c.bytes or not self.streams(c, size, self.t, new, stride) or \
                self.streams(c, c.group_size, self.m, old, stride):
            return 0.0
        return self.credit(c.bytes / size, group_topology(self.t, size, stride).inter.bandwidth)

    def measured_ratio(self, c):
        """_ratio, remembered per kind of call as parts() is: flow_inputs asks it of every set."""
        key = _kind(c)
        if key not in self._ratios:
            self._ratios[key] = self._ratio(c)
        return self._ratios[key]

    def _ratio(self, c):
        """A CPU call across nodes whose ring steps are one packet each (a small call): its time in the scenario
        over its time as traced, as `small` measured them (network.links.small_calls: seconds of a 2-rank
        all-reduce of nbytes at a payload rate) for one of its steps (STEPS; a ring op's step moves bytes/p, a
        broadcast's or a send's all its bytes; a 2-rank all-reduce of twice that moves as much in each of its 2),
        times its steps, in the scenario's group and links over the traced ones. None where `small` is not given or
        has no figure (steps of more than one packet: their bytes set their time, which the model prices), the call
        stays in a node on either side, has no steps or no bytes."""
        steps = STEPS.get(self.sent_as(c))
        size = self.parts(c)[3]
        if self.small is None or c.kernel or steps is None or not c.bytes or self.m is None \
                or not c.group_size or not size or c.group_size < 2 or size < 2:
            return None
        stride = self.strides.get(c.group, 1)
        old, new = group_topology(self.m, c.group_size, stride), group_topology(self.t, size, stride)
        if old.nodes < 2 or new.nodes < 2:
            return None
        op = self.sent_as(c)
        def one(p, link):   # noqa: E306  (a step of `chunk` bytes: half a 2-rank all-reduce of twice that)
            chunk = c.bytes / p if op in CHUNKED else c.bytes
            return steps(p) * self.small(2 * chunk, link.bandwidth) / 2
        traced, scenario = one(c.group_size, old.inter), one(size, new.inter)
        return scenario / traced if traced > 0 and scenario > 0 else None

    def handshake(self, c):
        """HANDSHAKE's entry for a call traced on the group size that pays it (a Gloo all-gather on 2 ranks), else
        None."""
        paid = HANDSHAKE.get(("gloo", c.op)) if self._gloos(c) else None
        return paid if paid is not None and c.group_size == paid[1] else None

    def parts(self, c):
        """-> ((fixed s, byte phase s) on the measured hardware or None, the same in the scenario or None, codec
        us, the scenario's group size)."""
        key = _kind(c)
        if key not in self._parts:
            self._parts[key] = self._split(c)
        return self._parts[key]

    def _split(self, c):
        old, new, codec = self._models(c)
        f_old, f_new, _ = self._models(c, fixed=True)
        split = lambda total, fixed: None if total is None else (min(fixed or 0.0, total), total - min(fixed or 0.0, total))  # noqa: E731
        p = c.group_size
        p_new = round(p * self.factor) if c.group in self.dp and p else p
        if self.notice is not None and new is not None:
            self.noticed += self.waited(c, c.bytes, p_new, self.t, self.algorithms(c)[1],
                                        self.strides.get(c.group, 1)) > 0
        if new is not None:
            self.streamed += self.streams(c, p_new, self.t, self.algorithms(c)[1], self.strides.get(c.group, 1))
        return split(old, f_old), split(new, f_new), codec, p_new

    def time(self, c, measured_us: float) -> float:
        old, new, codec = self._models(c)
        if new is None:
            self.kept += 1
        else:
            self.priced += 1
        if self.m is None:   # no model of the traced machine: the scenario's model alone
            return (new * 1e6 if new is not None else measured_us) + codec
        ratio = self.measured_ratio(c)
        if ratio is not None:   # a small call: as its size's calls measured on the network
            return measured_us * ratio + codec
        return reprice(measured_us * 1e-6, old, new) * 1e6 + codec
