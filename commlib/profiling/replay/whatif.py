"""What if this job ran on other links, on more nodes, with other buckets or compressed gradients? Its own
traces, replayed (graph.py) with every collective re-priced by the course's cost model.

    report = whatif("traces/", [Scenario("IB", topology="dgx_h100", nodes=8)], measured="dgx_a100")
    print(format_report(report))        # measured, identity replay, each scenario: step, compute, exposed, waiting

Each compute duration stays as measured. Each collective (graph.py: a call matched across its group; its transfer
the shortest member's duration) becomes a flow from its last member's arrival (flows.py): a fixed phase, the
model's latency, then its bytes on the scenario's links, shared max-min fair with the other flows in flight.
What the traced transfer leaves once the model's bytes, shared with the flows the trace shows beside it, are
taken out at the measured network is the call's excess (sharing.py: `excess` says whether it is fixed or moves
with the bytes; a transfer faster than its model on idle links keeps the ratio or the time). Each backend is
priced by what it sends (pricing.SENT: Gloo's reduce_scatter is an all-reduce); a Gloo all-gather traced on 2
ranks pays a handshake that only 2 ranks pay (pricing.HANDSHAKE): asked on more, it is dropped; on 2, priced
(sharing.kept_handshakes). The model is topology's (multi-ring across nodes
as NCCL's, hierarchical, in-network; `algorithm` swaps it) on the group's own shape: its members per node from
its ranks' stride. Scaling out (`nodes`, `gpus_per_node`) keeps every rank's compute and grows the
data-parallel group (the world group, or the largest one that all-reduces) by the new world size over the old;
other groups keep their sizes. What that group does is read from the traces (compute.roles): gradients once a
step (data parallelism), or activations through every layer (tensor parallelism: the replay then grows the model
with the ranks, and says so), or it cannot tell. A scenario on the measured network, shape and algorithm, with no
bucket or compression, keeps every call's measured duration: the identity replay's answer.
The profiler's own time: where the traces carry the job's untraced step (`commlib_untraced`, written by
jobs/recording.record) or `untraced=` gives it, every scenario's compute is scaled so that the identity replay
gives that step (compute.calibrate), taking out at most what the profiler adds to the ops it recorded
(compute.floor): the scenarios predict the job as it runs without the profiler. A scenario
with `this_machine` predicts the emulated cluster on this machine's cores (compute.share) rather than a real one.
Figures are per training step: the traces' ProfilerStep#N marks count the steps (or `steps=`), and the
output says how many it averaged. `bucket_mb` regroups each step's data-parallel all-reduces by DDP's rule
(regroup.py); `compress` divides their bytes
and adds the encode/decode time per byte (`codec_s_per_byte`; default: what benchmarks/compression_tradeoff.py
measured on this course's machine for the method whose ratio is nearest).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from commlib import _validate
from commlib import topology as topo
from commlib.cost.intervals import length
from commlib.profiling.replay import compute, graph
from commlib.profiling.checks import doubts
from commlib.profiling.model import infer_hardware
from commlib.profiling.replay.pricing import (ALGORITHMS, COMMLIB_ALGORITHMS, TRADEOFF, Pricer,  # noqa: F401  (the API)
                                       codec_s_per_byte, gloo_nics_measured, group_topology, price, reprice)
from commlib.profiling.read.reader import no_gc
from commlib.profiling.replay.regroup import regroup
from commlib.profiling.replay.sharing import EXCESS, flow_inputs, kept_handshakes, without_handshakes
from commlib.profiling.traces import MAX_BYTES, RankTrace, load

MIN_BUCKET_MB = 1 / 1024   # 1 KiB: below it a bucket is a few floats and pays only latency
MAX_BUCKETS = 100_000      # regrouped buckets in all (every step, every rank): the replay's work stays bounded
MAX_WORLD = 1 << 20        # ranks: topology's largest (nodes x GPUs per node)


@dataclass(frozen=True)
class Scenario:
    """One question. None keeps what was measured. topology: a topology.Topology or a preset name (priced at
    the link speeds NCCL reaches, topology.ACHIEVABLE); nodes, gpus_per_node: the job's new shape."""
    name: str | None = None
    topology: object = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    algorithm: str | None = None
    bucket_mb: float | None = None
    compress: float | None = None
    this_machine: bool = False   # the emulated cluster on this machine's cores, not a real one (compute.share)

    def label(self, t=None) -> str:
        """Its name, or what it changes: 'dgx_h100, 8 x 8 GPUs, hierarchical, 50 MiB buckets, 4x compressed'."""
        if self.name:
            return self.name + (" (this machine)" if self.this_machine else "")
        parts = []
        if self.topology is not None:
            parts.append(self.topology if isinstance(self.topology, str) else self.topology.name or "topology")
        if (self.nodes or self.gpus_per_node) and t is not None:
            parts.append(f"{t.nodes} x {t.gpus_per_node} GPUs")
        parts += [self.algorithm or "", f"{self.bucket_mb:g} MiB buckets" if self.bucket_mb else "",
                  f"{self.compress:g}x compressed" if self.compress else ""]
        return (", ".join(p for p in parts if p) or "as measured") + (" (this machine)" if self.this_machine else "")


# ------------------------------------------------------------------------------------- the what-if
def whatif(traces, scenarios=(), measured=None, gamma: float = 0.0, dp_group: str | None = None,
           codec: float | None = None, steps: int | None = None, max_bytes: int = MAX_BYTES,
           excess: str = "fixed", untraced: float | None = None, cores: int | None = None,
           small=None, notice=None, credit=None) -> dict:
    """Traces (files, a folder, or RankTraces) -> {"scenarios": [measured, identity replay, each Scenario],
    "measured_on", "dp_group", "world_size", "notes"}. measured: the topology the traces ran on (a Topology or a
    preset; default: the GPU named in the traces, else unknown: transfers then keep their measured time unless a
    scenario prices them, by the model alone). codec: encode+decode s/byte for `compress` (default: measured,
    codec_s_per_byte). steps: the training steps the traces hold (default: their ProfilerStep#N marks, else 1);
    every figure is per step, their mean. excess: what a call's time above its model does in a scenario, "fixed"
    (its software's, kept) or "bytes" (it moves with its bytes: a TCP link shaped to a rate, as the course's
    kernel network; sharing.py says what was measured). untraced: the job's step run without the profiler, seconds
    (default: the traces' commlib_untraced, else none: nothing corrected). cores: the usable cores of the machine
    that `this_machine` scenarios price (default: this one's, cluster.envinfo.usable_cores). small: what small calls
    take on the measured network, a function (nbytes, payload bytes/s) -> seconds of a 2-rank all-reduce
    (network.links.small_calls, measured on the kernel network): a CPU call whose ring steps are one packet each
    moves from its traced rate and group to the scenario's as those figures do (pricing.Pricer.measured_ratio),
    not as the alpha-beta line does; for scenarios on that same network only (a preset's links are not its); None:
    none. notice: (bytes a step, payload bytes/s) -> seconds each step of commlib's own ring on 3 or more ranks
    across nodes waits for its receiver's notice (network.links.notice on the kernel network;
    pricing.Pricer.waited); None: none. credit: (bytes a step, payload bytes/s) -> seconds a call ends early after
    idle links (network.links.credit on the kernel network: what benchmarks/gloo_rings.py measured): given, Gloo's
    own ring calls on 3 or more ranks across nodes where no receive notice leaves behind their data (a NIC per GPU)
    stream (pricing.Pricer.streams): one latency a call, and that head start where their links idled
    (flows.Flows); None: the NICs per node do not change Gloo's calls, and a scenario that changes them says so in
    a note."""
    if excess not in EXCESS:
        raise ValueError(f"excess must be one of {EXCESS}, got {excess!r}")
    ranks = traces if traces and all(isinstance(r, RankTrace) for r in traces) else load(traces, max_bytes)
    gamma = _validate.number("gamma", gamma, low=0.0)
    untraced = _validate.number("untraced", untraced, low=0.0, strict=True, unit="seconds") \
        if untraced is not None else None
    cores = _validate.integer("cores", cores, low=1) if cores is not None else None
    for name, given in (("small", small), ("notice", notice), ("credit", credit)):
        if given is not None and not callable(given):
            raise TypeError(f"{name} must be a function (nbytes, bytes/s) -> seconds, or None; got "
                            f"{type(given).__name__}")
    try:   # what goes wrong from here on is about these traces: the message names them
        with no_gc():   # the replay makes millions of small objects, no cycles: the collector would walk them all
            return _whatif(ranks, scenarios, measured, gamma, dp_group, codec, steps, excess, untraced, cores, small,
                           notice, credit)
    except (ValueError, ZeroDivisionError, OverflowError) as e:
        named = any(str(e).startswith(str(r.path)) for r in ranks)
        raise ValueError(str(e) if named else f"{_where(ranks)}: {e}") from None


def _where(ranks) -> str:
    """The traces, for a message: the file, or the folder and its files."""
    paths = [str(r.path) for r in ranks]
    if len(paths) == 1:
        return paths[0]
    names = [os.path.basename(p) for p in paths]
    return f"{os.path.dirname(paths[0]) or '.'}/ ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})"


def _whatif(ranks, scenarios, measured, gamma, dp_group, codec, steps, excess="fixed", untraced=None,
            cores=None, small=None, notice=None, credit=None) -> dict:
    marks = min(len(getattr(r, "steps", None) or []) for r in ranks) if ranks else 0
    steps = _validate.integer("steps", steps, low=1) if steps is not None else max(1, marks)
    world = next((r.world_size for r in ranks if r.world_size), None) or len(ranks)
    if world > MAX_WORLD:   # before any topology is built from it (its error would speak of nodes)
        path = next((r.path for r in ranks if r.world_size == world), ranks[0].path)
        raise ValueError(f"{path}: distributedInfo.world_size is {world}, more ranks than whatif prices (at most "
                         f"{MAX_WORLD})")
    notes = []
    m_topo = _topology("measured", measured, world) if measured is not None else None
    if m_topo is None:
        preset, why = infer_hardware(ranks)
        notes.append({"kind": "measured_on", "why": why})   # a record: report/words.py says it
        m_topo = topo.preset(preset, -(-world // topo.preset_gpus(preset)), achievable=True) if preset else None
    g = graph.build(ranks)
    if steps != marks:   # the marks are not the training steps (a ProfilerStep holding several): regroup at waits
        g = replace(g, ranks=[replace(r, steps=[]) for r in g.ranks])
    strides = {grp.name: (grp.ranks[1] - grp.ranks[0] if grp.ranks and len(grp.ranks) > 1 else 1)
               for r in ranks for grp in r.groups}
    dp = frozenset([dp_group] if isinstance(dp_group, str) else dp_group) if dp_group is not None else \
        _dp_groups(ranks, world, strides)
    base = graph.replay(g)
    rows = [_row("measured", _measured(ranks, base), steps=steps), _row("identity replay", base, steps=steps)]
    reducing = {c.group for r in ranks for c in r.calls if c.op in ("all_reduce", "reduce_scatter") and c.group}
    roles = compute.roles(g, sorted(reducing | set(dp)))
    profiler = _profiler(ranks, g, base["step_us"] / steps, untraced, steps, steps == marks)
    scale = profiler["compute_factor"] if profiler else 1.0
    rails = {}   # (NICs per node measured, in the scenario) -> the scenarios whose Gloo flat rings ignore them
    for sc in scenarios:
        if not isinstance(sc, Scenario):
            raise TypeError(f"scenarios must be Scenario objects, got {type(sc).__name__}")
        flat = []
        priced, said, t, net = _scenario(g, sc, m_topo, world, dp, strides, gamma, codec, ranks[0].backend, excess,
                                         roles, scale, cores, flat, small, notice, credit)
        rows.append({**_row(sc.label(t), graph.replay(priced, net), said, steps),
                     "cluster": "this machine" if sc.this_machine else "real"})
        crossed, traced = flat or (0, 0)   # Gloo's flat rings across nodes: in the scenario, as traced
        if crossed and m_topo is not None and (t.rails > m_topo.rails or traced and t.rails < m_topo.rails):
            rails.setdefault((m_topo.rails, t.rails), []).append(rows[-1]["name"])
    return {"world_size": world, "ranks": [r.rank for r in ranks], "backend": ranks[0].backend, "steps": steps,
            "measured_on": _describe(m_topo), "dp_groups": sorted(dp), "group_roles": roles, "profiler": profiler,
            "scenarios": rows, "notes": notes + _flat_rings(rails) + g.notes,
            "doubts": doubts(ranks, world)}   # diagnose's notes that make the replay doubtful (checks.py)


def _flat_rings(rails: dict) -> list[dict]:
    """A note per change of the NICs a node's GPUs use (topology's rails) that leaves Gloo's calls as they were:
    priced as one flat ring they cross each node once each way, where Gloo's own schedules spread over the NICs
    (pricing.gloo_nics_measured: the kernel network's FSDP2 with 1 NIC per node and with 2). More NICs than
    measured: the real step can be shorter; fewer, where the traced calls crossed nodes: longer. NCCL's calls are
    priced on every NIC (multi_ring) and need none. Its words: report/words.py."""
    return [{"kind": "flat_ring_nics", "scenarios": names, "measured_nics": m, "nics": k,
             "kernel_network": gloo_nics_measured()} for (m, k), names in rails.items()]


def _profiler(ranks, g, traced_us: float, untraced, steps: int, marked: bool = False) -> dict | None:
    """The untraced step (given, or the traces' commlib_untraced) against the traced one, and the factor on the
    compute that makes the identity replay give it (compute.calibrate); None where no untraced step is known.
    Like with like: the untraced step is a median over steps (jobs/recording.job_step_s), so the traced one is
    too where the traces mark their steps (marked: the slowest rank per ProfilerStep, the median), and the
    replay, a mean over the steps, is calibrated to the untraced step x its own mean over that median: a traced
    step the host held up (a mean 10% over its median, in a recording of 10) is no profiler's time."""
    source = "given"
    if untraced is None:
        said = [(r, getattr(r, "untraced", None)) for r in ranks]
        said = [(r, u) for r, u in said if u is not None]
        for r, u in said:
            s = u.get("step_s") if isinstance(u, dict) else None
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 < s < float("inf"):
                raise ValueError(f"{r.path}: its commlib_untraced is not {{\"step_s\": seconds > 0}}: "
                                 f"{_validate.shown_safely(u)}")
        if not said:
            return None
        untraced, source = max(u["step_s"] for _, u in said), "traces"
    typical = _median_step(ranks) if marked else None
    traced = typical or traced_us
    factor, got = compute.calibrate(g, untraced * 1e6 * traced_us / traced, steps)
    ops = None if any(r.ops is None for r in g.ranks) else sum(r.ops for r in g.ranks) / len(g.ranks) / steps
    return {"traced_us": traced, "untraced_us": untraced * 1e6, "ratio": traced / (untraced * 1e6),
            "compute_factor": factor, "calibrated_us": got, "source": source, "noise": compute.NOISE,
            "floor": compute.floor(g), "ops": ops, "per_op_us": compute.PER_OP_US, "traced_mean_us": traced_us,
            "traced_median": typical is not None}


def _median_step(ranks) -> float | None:
    """The traced step as job_step_s times the untraced one: per ProfilerStep the slowest rank's, the median over
    the steps (us); None where the ranks do not mark as many steps, or a step is empty."""
    import statistics

    marks = [getattr(r, "steps", None) or [] for r in ranks]
    if not marks or not marks[0] or any(len(m) != len(marks[0]) for m in marks):
        return None
    per = [max(m[i][1] - m[i][0] for m in marks) for i in range(len(marks[0]))]
    return statistics.median(per) if all(d > 0 for d in per) else None


def _topology(name: str, value, world: int) -> topo.Topology:
    if isinstance(value, topo.Topology):
        return value
    if isinstance(value, str) and value in topo.PRESETS:
        return topo.preset(value, -(-world // topo.preset_gpus(value)), achievable=True)
    raise ValueError(f"{name} must be a topology.Topology or one of {tuple(topo.PRESETS)}, got {value!r}")


def _dp_groups(ranks, world: int, strides: dict) -> frozenset:
    """The data-parallel groups: the world group if it all-reduces (or reduce-scatters), else the largest groups
    that do, of one stride (a mesh's data-parallel dimension is its outer one: the largest stride)."""
    sizes = {}
    for r in ranks:
        for c in r.calls:
            if c.op in ("all_reduce", "reduce_scatter") and c.group is not None:
                sizes[c.group] = max(sizes.get(c.group, 0), c.group_size or 0)
    if not sizes:
        return frozenset()
    world_groups = [n for n, s in sizes.items() if s == world]
    if world_groups:
        return frozenset(world_groups[:1])
    size, stride = max((s, strides.get(n, 1)) for n, s in sizes.items())
    return frozenset(n for n, s in sizes.items() if s == size and strides.get(n, 1) == stride)


def _scenario(g: graph.Graph, sc: Scenario, m_topo, world: int, dp, strides, gamma, codec, backend=None,
              excess="fixed", roles=None, scale=1.0, cores=None, flat=None, small=None, notice=None,
              credit=None):
    """The graph with this scenario's calls and transfers -> (graph, the assumptions it made, as lines). scale: the
    compute's factor for the profiler (_profiler); roles: what each group does (compute.roles); flat: a list, given
    the number of Gloo's own calls (sets) priced as one flat ring across nodes in the scenario and on the measured
    hardware (Pricer.flat_across_nodes)."""
    said = []
    if sc.algorithm is not None and sc.algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {sc.algorithm!r}")
    base = _topology("topology", sc.topology, world) if sc.topology is not None else m_topo
    if base is None:
        raise ValueError("the traces do not say which hardware they ran on (no GPU named in them): give measured= "
                         "(python -m commlib whatif --measured-on), or a topology in the scenario")
    nodes = _validate.integer("nodes", sc.nodes, low=1) if sc.nodes is not None else None
    gpn = _validate.integer("gpus_per_node", sc.gpus_per_node, low=1) if sc.gpus_per_node is not None else None
    if nodes or gpn:
        gpn = gpn or base.gpus_per_node
        if not nodes and world % gpn:
            raise ValueError(f"gpus_per_node: the traced {world} ranks do not fill nodes of {gpn} GPUs; give nodes too")
        nodes = nodes or world // gpn   # GPUs per node alone: as many nodes as the traced ranks fill
        new_world = nodes * gpn
        base = topo.Topology(nodes, gpn, base.intra, base.inter, base.nics_per_node, name=base.name)
    else:
        new_world = world
    factor = new_world / world
    if factor != 1:
        if not dp:
            raise ValueError("scaling out needs a data-parallel group, and these traces have no all-reduce")
        said += _grows(world, new_world, sorted(dp), roles or {}, sc.this_machine)
    if sc.this_machine:
        cores = cores or _usable_cores()
        share = compute.share(new_world, world, cores)
        said.append(f"on this machine ({cores} usable core(s)): {new_world} ranks against the traced {world}, each "
                    f"rank's compute x{share:.2f} (ranks per core beyond one, new over traced)")
        off = sum(length(r.offcore) for r in g.ranks if r.offcore is not None)
        if off and share != 1:
            off = 100 * off / sum(length(r.spans) for r in g.ranks)
            said.append(f"commlib's emulated accelerator takes no core: its {off:.0f}% of the compute is not stretched")
    g = compute.stretch(g, scale) if scale != 1 else g
    if sc.this_machine and share != 1:   # only the compute that takes a core (compute.stretch's oncore)
        g = compute.stretch(g, share, oncore=True)
    if (base == m_topo and new_world == world and sc.algorithm is None and sc.bucket_mb is None
            and sc.compress is None):
        said.append("the network as measured: every call keeps its measured duration, as in the identity replay")
        return g, said, base, None
    compress = _validate.number("compress", sc.compress, low=1.0) if sc.compress is not None else None
    per_byte = 0.0
    if compress == 1:   # no compression: no codec runs, nothing is charged
        said.append("compress 1: no compression, so no codec time: the calls as without --compress")
        compress = None
    if compress:
        per_byte, src = (codec, "given") if codec is not None else codec_s_per_byte(compress)
        said.append(f"gradients compressed {compress:g}x: encode + decode {per_byte * 1e9:.2f} ns/byte ({src})")
    g0, origin = g, {}
    if sc.bucket_mb is not None:
        if isinstance(sc.bucket_mb, (int, float)) and not sc.bucket_mb >= MIN_BUCKET_MB:   # NaN too
            raise ValueError(f"bucket_mb must be a number >= 1/1024 (1 KiB), got {sc.bucket_mb!r}")
        cap = _validate.number("bucket_mb", sc.bucket_mb, low=MIN_BUCKET_MB) * 2**20
        g, made, origin = regroup(g0, dp, cap, MAX_BUCKETS)
        said.append(f"data-parallel all-reduces regrouped into {made} bucket(s) of {sc.bucket_mb:g} MiB per step "
                    "(gradients taken as ready at an even rate between the traced buckets)")

    pricer = Pricer(m_topo, base, factor, dp, strides, gamma, compress, per_byte, sc.algorithm, new_world,
                    gloo=backend == "gloo", small=small, notice=notice, credit=credit)
    kept = kept_handshakes(g0, pricer)   # the later member of a 2-rank all-gather waits for a handshake
    g, g0 = (kept if g is g0 else kept_handshakes(g, pricer)), kept
    net = flow_inputs(g0, g, origin, pricer, excess)   # each set a flow: fixed phase, then bytes on shared links
    g, dropped = without_handshakes(g, pricer)
    if dropped:
        said.append(f"{dropped} Gloo all-gather(s) traced on 2 ranks: what they paid for the handshake only 2 "
                    "ranks pay (the later rank's data before its receive notice, pricing.HANDSHAKE) is not carried "
                    "to the larger ring")
    transfer = [t if t is not None else f + b for t, (f, b, *_) in zip(g.transfer, net)]   # as recorded, or new
    solo = {}
    for p, r in enumerate(g.ranks):
        for i, c in enumerate(r.calls):
            if r.member[i] < 0:
                solo[(p, i)] = pricer.time(c, r.solo[i])
    if pricer.noticed:
        said.append(f"{pricer.noticed} kind(s) of call on commlib's ring of 3 or more ranks across nodes: each step "
                    "waits for its receiver's notice, which leaves behind the packet the receiver sends (measured: "
                    "benchmarks/ring_steps.py)")
    if pricer.streamed:
        said.append(f"{pricer.streamed} kind(s) of Gloo's call on 3 or more ranks across nodes with no receive notice "
                    "behind their data (a NIC per GPU): the ring streams, one latency a call, and after idle links "
                    "it ends under its bytes as benchmarks/gloo_rings.py measured")
    if pricer.measured:
        said.append(f"{pricer.measured} small call(s) (one packet a ring step) moved as this network's calls of their "
                    f"size measured ({getattr(small, 'source', 'given')}), not by the alpha-beta line: each step wakes a "
                    "thread of each rank")
    if pricer.kept:
        said.append(f"{pricer.kept} of {pricer.kept + pricer.priced} call(s) have no model (no size in the trace, "
                    "a group of one rank, or an op without one): they keep their measured time")
    if world == 1 and factor != 1:
        said.append("a one-rank job: its calls moved no data between ranks, so nothing measured says how far "
                    "above the model the job runs: the new group's calls are the model's alone")
    if m_topo is None and pricer.priced:
        said.append("the traces' own hardware is unknown: each call with a model priced by the model alone")
    firsts = [g.ranks[p].calls[i] for p, i in (m[0] for m in g.sets)]
    if flat is not None:
        flat += [sum(pricer.flat_across_nodes(c) for c in firsts),
                 sum(pricer.flat_across_nodes(c, measured=True) for c in firsts)]
    if any(pricer.sent_as(c) != c.op for c in firsts):
        said.append("Gloo's reduce_scatter priced as what it sends: an all-reduce of the whole input")
    unknown = sorted({c.op for c in firsts if pricer.unknown(c)})
    if unknown:
        said.append(f"Gloo's {', '.join(unknown)}: its algorithm is not one this replay has read; priced as the "
                    "course's model of the op")
    return g.priced(transfer, solo), said, base, net


def _grows(world: int, new: int, groups: list, roles: dict, here: bool) -> list[str]:
    """The scale-out's assumption, in what the growing groups do (compute.roles)."""
    names, grow = ", ".join(groups), new > world
    kind = {roles.get(n, "unknown") for n in groups}
    kind = kind.pop() if len(kind) == 1 else "unknown"
    f = f"{new / world:g}"
    if kind == "gradients":
        if here:
            return [f"{world} -> {new} ranks: data-parallel group(s) {names} {'grow' if grow else 'shrink'} x{f}"]
        return [f"{world} -> {new} ranks: data-parallel group(s) {names} {'grow' if grow else 'shrink'} x{f}; compute "
                "per rank as measured" + (", the new ranks as fast as the traced ones" if grow else "")]
    if kind == "activations":
        line = (f"{world} -> {new} ranks: group(s) {names} all-reduce activations through every layer, forward and "
                "backward (tensor parallelism, not data parallelism): the replay grows them x"
                f"{f} as if the model grew with the ranks (each rank keeps its shard, its bytes and its compute); the "
                f"same model on {new} ranks would have smaller shards and less compute per rank, which it does not "
                "predict") if grow else (
                f"{world} -> {new} ranks: group(s) {names} all-reduce activations through every layer, forward and "
                f"backward (tensor parallelism, not data parallelism): the replay shrinks them x{f} as if the model "
                "shrank with the ranks (each rank keeps its shard, its bytes and its compute); the same model on "
                f"{new} ranks would have larger shards and more compute per rank, which it does not predict")
    else:
        line = (f"{world} -> {new} ranks: group(s) {names} that all-reduce {'grow' if grow else 'shrink'} x{f} "
                "(the traces do not show whether they carry gradients or activations)")
    return [line] + ([] if here else ["for a real cluster: compute per rank as measured, each rank on a processor "
                                      "of its own"])


def _usable_cores() -> int:
    from commlib.cluster.envinfo import usable_cores   # here only: it imports torch's package, not diagnose's

    return usable_cores()


def _measured(ranks, base: dict) -> dict:
    """The measured row: each rank's wall as its step; the split as the identity replay (which reproduces it)."""
    out = {"ranks": {}, "critical_path": base["critical_path"], "forced": 0}
    for r in ranks:
        out["ranks"][r.rank] = {**base["ranks"][r.rank], "step_us": r.wall[1] - r.wall[0]}
    out["step_us"] = max(o["step_us"] for o in out["ranks"].values())
    return out


def _row(name: str, result: dict, said=(), steps: int = 1) -> dict:
    """One scenario: step_us and the critical path per training step (the mean of `steps`); ranks: each rank's
    whole traced window (its timeline's spans and sums, as the timelines draw them)."""
    path = {k: v / steps if k in ("compute_us", "comm_us") else v for k, v in result["critical_path"].items()}
    return {"name": name, "step_us": result["step_us"] / steps, "ranks": result["ranks"], "critical_path": path,
            "assumptions": list(said), "forced": result["forced"]}


def _describe(t) -> str | None:
    if t is None:
        return None
    return (f"{t.name or 'topology'}: {t.nodes} node(s) x {t.gpus_per_node}, intra {t.intra.name}, inter "
            f"{t.inter.name} x {t.nics_per_node}")


def scenario_from_args(hardware=None, nodes=None, gpus_per_node=None, algorithm=None, bucket_mb=None,
                       compress=None, this_machine=False) -> Scenario:
    """The CLI's flags as one Scenario."""
    return replace(Scenario(), topology=hardware, nodes=nodes, gpus_per_node=gpus_per_node, algorithm=algorithm,
                   bucket_mb=bucket_mb, compress=compress, this_machine=bool(this_machine))
