"""The source chapter's three steps on a job's own traces, plus stragglers.

    report = diagnose(["rank0.json", "rank1.json"], hardware="dgx_h100")   # or a folder; -> a dict
    print(format_report(report))     # profiling/report/diagnosis.py: the text and the JSON

1. Profile: every collective call on every rank (traces.py), with algbw = bytes / duration and
   busbw = algbw x nccl-tests' bus factor (cost.bus_factor).
2. Against the model: measured / model for each call, the model being topology's multi-ring (plan.hardware's
   group pricing) on a hardware preset, given or inferred from the GPU's name in the trace, at the link
   speeds NCCL reaches (topology.ACHIEVABLE). Calls more than `far` x the model are flagged with a probable
   cause, the first that applies: it waited for a late rank; the message is too small (the model is mostly
   per-call latency: fuse them, bigger buckets); it took over twice as long as the same rank's fastest
   identical call (waiting or contention, not the link); a small-message protocol on a large message (only
   where the name says it: NCCL >= 2.27's symmetric LL kernels, read/kernels.py); compute kernels ran beside it
   (NCCL runs on the same SMs); busbw far below the link's (check the link, NCCL's transport, other traffic).
3. Overlap per rank: communication time, the part hidden under compute, the exposed part, idle time.

Stragglers: a collective ends on every rank at about the same moment (nobody finishes before the last rank's
data arrived), so each rank's duration in a call, read back from its end, is its arrival: the rank with the
shortest duration arrived last, the others waited (their duration minus the shortest) and the shortest is
the transfer. No clocks are compared between ranks. Calls are matched within their process group, in order
(groups.py says how each call's group is known), and a straggler is named with the group it was late in. Its
delay splits along the wait chain into its own and what it inherited by waiting, in another group, for another
rank (stragglers.py); stragglers are ranked by their own delay.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from commlib import _validate
from commlib import cost
from commlib import plan
from commlib import topology as topo
from commlib.profiling import checks
from commlib.profiling.intervals import length, overlap_length, overlap_lengths, union, union_array
from commlib.profiling.stragglers import P2P, find
from commlib.profiling.traces import MAX_BYTES, Call, RankTrace, load

# GPU names (deviceProperties) -> the preset whose intra-node link they have; PCIe boards have none
GPU_PRESETS = ((r"A100(?!.*PCIE)", "dgx_a100"), (r"H100(?!.*PCIE)|H200", "dgx_h100"), (r"B200", "dgx_b200"))
SMALL_BYTES = 1 << 20   # below this a message pays mostly latency on NVLink-class links


# ------------------------------------------------------------------------------------- step 2
def infer_hardware(ranks: list[RankTrace]) -> tuple[str | None, str]:
    """-> (preset or None, why): the GPU's name in deviceProperties, if it says which node it is."""
    names = {r.device for r in ranks if r.device}
    if not names and any(r.backend == "nccl" for r in ranks):
        return None, "no GPU named in the traces (no deviceProperties): no preset inferred"
    if not names:
        return None, "no GPU in the traces (CPU/Gloo): no preset inferred"
    name = sorted(names)[0]
    for pattern, preset in GPU_PRESETS:
        if re.search(pattern, name, re.IGNORECASE):
            return preset, f"{name} in the trace: an SXM board, priced as {preset} (its NVLink generation)"
    return None, f"{name} in the trace: no preset matches its links"


def model(call: Call, hw: plan.Hardware) -> dict | None:
    """The model's time_s, latency_s and busbw_GBps for one call on hw (None where no model applies)."""
    p, n = call.group_size, call.bytes
    if not p or not n or p < 2 or call.op not in (*cost.OPS, *P2P) or p > hw.world:
        return None
    if call.op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        t = plan.group_topology(hw, p, 1)
        b = topo.breakdown(call.op, n, t, "multi_ring" if call.op != "all_to_all" else "bulk")
    else:  # broadcast / reduce as NCCL's chain, p2p as one message, on NVLink inside a node, else the NIC share
        link = hw.intra if p <= hw.gpus_per_node else hw.nic_share
        op, size = ("sendrecv", 2) if call.op in P2P else (call.op, p)
        b = cost.breakdown(op, n, size, link, "ring")
    return {"time_s": b["time_s"], "latency_s": b["latency_s"], "busbw_GBps": b["busbw_GBps"]}


def cause(call: Call, ratio: float, m: dict, wait_us: float, waited_for, beside_compute_us: float,
          fastest_us: float | None = None) -> str:
    """The probable cause of a call `ratio` x slower than its model (see the module docstring for the order);
    fastest_us: the same rank's fastest identical call (same op, bytes and group)."""
    if wait_us > 0.5 * call.duration_us:
        return f"waited {wait_us:.0f} us for rank {waited_for} to arrive: not the network"
    if m["latency_s"] > 0.5 * m["time_s"] or call.bytes < SMALL_BYTES:
        return "message too small: latency-bound, every call pays it again; fuse calls (bigger buckets)"
    if fastest_us and call.duration_us > 2 * fastest_us:
        return (f"{call.duration_us / fastest_us:.1f}x its fastest identical call ({fastest_us:.0f} us): "
                "waiting or contention, not the link")
    if call.protocol == "ll":
        return ("LL (small-message protocol) on a large message: half the bandwidth; check "
                + ("NCCL_SYM_KERNEL" if (call.algorithm or "").startswith("sym_") else "NCCL_PROTO"))
    cpu = call.kernel is None   # Gloo (or NCCL seen from the CPU only): no GPU words for it
    if beside_compute_us > 0.5 * call.duration_us:
        return ("other CPU ops ran beside it: they share the cores and memory bandwidth with the backend's threads"
                if cpu else "compute kernels ran beside it: they share the GPU's SMs and memory with NCCL")
    return f"busbw far below the link's: check the link, {'the backend' if cpu else 'NCCL'}'s transport, other traffic"


# ------------------------------------------------------------------------------------- step 3
def overlap(rank: RankTrace) -> dict:
    """Per rank, in us: comm_us (union of its calls), hidden_us (under compute), exposed_us, compute_us,
    idle_us (no kernel, memcpy or memset: busy as Holistic Trace Analysis and Nsight count it), wall_us."""
    comm = union((c.start_us, c.end_us) for c in rank.calls)
    compute = union_array(rank.compute)   # arrays: 200k spans a rank, never a list of tuples
    spans = [np.asarray(x, dtype=float).reshape(-1, 2) for x in (rank.compute, rank.copies) if x is not None]
    busy = union_array(np.concatenate(spans))   # kernels, memcpy and memset
    hidden = overlap_length(comm, compute)
    wall = rank.wall[1] - rank.wall[0]
    # busy or communicating: |comm| + |busy| - |comm and busy| (a union of a few calls and many kernels)
    active = length(comm) + length(busy) - overlap_length(comm, busy)
    return {"comm_us": length(comm), "hidden_us": hidden, "exposed_us": length(comm) - hidden,
            "compute_us": length(compute), "idle_us": max(0.0, wall - active), "wall_us": wall}


# ----------------------------------------------------------------------------------- stragglers
def stragglers(ranks: list[RankTrace], min_share: float = 0.05) -> tuple[list[dict], dict]:
    """-> (stragglers, waits): stragglers.find's, ranked by own delay (a rank late only because it waited for
    another is not the root; stragglers.py says how)."""
    found = find(ranks, min_share)
    return found["stragglers"], found["waits"]


# ------------------------------------------------------------------------------------- the report
def diagnose(traces, hardware: str | None = None, far: float = 2.0, achievable: bool = True,
             max_bytes: int = MAX_BYTES) -> dict:
    """Traces (files, a folder, or RankTraces from traces.load) -> the report: world_size, ranks,
    hardware, calls (the --json keys, plus kernel, wait_us, flag), overlap per rank, stragglers, noise (each
    group's spread_us and the delays within it, unnamed), notes.
    Files are read in parallel processes, each refused past max_bytes decompressed (traces.load)."""
    far = _validate.number("far", far, low=1.0)   # a call this many times its model is flagged
    _validate.instance("achievable", achievable, bool)
    ranks = traces if traces and all(isinstance(r, RankTrace) for r in traces) else load(traces, max_bytes)
    world = next((r.world_size for r in ranks if r.world_size), None) or len(ranks)
    if hardware is not None:
        if hardware not in topo.PRESETS:
            raise ValueError(f"hardware must be one of {tuple(topo.PRESETS)}, got {hardware!r}")
        why = f"{hardware} (given)" + ("; the traces are a CPU job's: the model prices the calls on that hardware"
                                       if not any(r.device for r in ranks) and ranks[0].backend == "gloo" else "")
    else:
        hardware, why = infer_hardware(ranks)
        why += "" if hardware else ": --hardware PRESET prices the calls"
    hw = plan.hardware(hardware, max(1, -(-world // 8)), achievable) if hardware else None
    found = find(ranks)
    late, waits = found["stragglers"], found["waits"]
    calls, overlaps, models = [], {}, {}
    for r in ranks:
        # the compute that ran during each call (by bisect and prefix sums: linear in all)
        beside = overlap_lengths([(c.start_us, c.end_us) for c in r.calls], union_array(r.compute)).tolist()
        fastest = {}
        for c in r.calls:
            key = (c.op, c.bytes, c.group)
            fastest[key] = min(fastest.get(key, c.duration_us), c.duration_us)
        rows = []
        for i, c in enumerate(r.calls):
            # a call whose group (so its model) is a guess is flagged for waiting only, never against the model
            known = hw is not None and c.group is not None and i not in r.assumed
            m = None
            if known:   # priced once per (op, bytes, group size): a job repeats the same calls step after step
                key = (c.op, c.bytes, c.group_size)
                m = models[key] if key in models else models.setdefault(key, model(c, hw))
            row = _row(c, m, far, waits.get((c.rank, c.start_us)), beside[i], fastest[(c.op, c.bytes, c.group)])
            if row["flag"] and row["wait_us"] is None and len(ranks) < world:
                row["flag"] += "; or a late peer (not in these traces)"
            rows.append(row)
        calls += rows
        overlaps[r.rank] = overlap(r)
        # a call's wait is its first wait_us (it arrived, then waited for the last peer): as a union, part of
        # the rank's communication time and never more, however its calls overlap
        overlaps[r.rank]["waiting_us"] = length(union((c["start_us"], c["start_us"] + c["wait_us"])
                                                      for c in rows if c["wait_us"]))
    groups = _groups(ranks)
    notes = [d["text"] for d in checks.doubts(ranks, world, found, calls)]
    if any(c["dtype"] is None and c["bytes"] for c in calls):
        notes.append("some dtypes are not in the trace (Gloo, tensor lists): their bytes assume 4-byte elements")
    return {"world_size": world, "ranks": [r.rank for r in ranks], "backend": ranks[0].backend,
            "hardware": hardware, "hardware_why": why, "calls": calls, "overlap": overlaps,
            "stragglers": late, "noise": {"spread_us": found["spread_us"], "unnamed": found["unnamed"]},
            "groups": groups, "notes": notes}


def _groups(ranks) -> dict:
    """{name: ranks} of the job's process groups that ran a call (the ranks as pg_config lists them)."""
    listed = {g.name: list(g.ranks) for r in ranks for g in r.groups if g.ranks}
    used = sorted({c.group for r in ranks for c in r.calls if c.group is not None}, key=lambda n: (len(n), n))
    return {n: listed.get(n) for n in used}


@functools.lru_cache(maxsize=1024)
def _bus_factor(op: str, p: int) -> float:
    return cost.bus_factor(op, p)   # once per (op, group size): a job's 20k calls have a few


def _row(c: Call, m: dict | None, far: float, wait, beside_us: float, fastest_us: float | None = None) -> dict:
    """One call's row of the report; m: its model (model()), None where it has none; beside_us: the compute
    that ran during the call."""
    nbytes = c.bytes
    dur_s = c.duration_us * 1e-6
    algbw = nbytes / dur_s / 1e9 if nbytes and dur_s > 0 else None
    op = "sendrecv" if c.op in P2P else c.op
    factor = _bus_factor(op, c.group_size) if op in cost.OPS and c.group_size else None
    ratio = dur_s / m["time_s"] if m and m["time_s"] > 0 else None
    wait_us, late = wait if wait else (0.0, None)
    row = {"rank": c.rank, "op": c.op, "group": c.group, "bytes": nbytes, "dtype": c.dtype,
           "group_size": c.group_size, "algorithm": c.algorithm, "protocol": c.protocol,
           "start_us": c.start_us, "duration_us": c.duration_us, "algbw_GBps": algbw,
           "busbw_GBps": algbw * factor if algbw is not None and factor is not None else None,
           "model_ratio": ratio, "model_busbw_GBps": m["busbw_GBps"] if m else None,
           "wait_us": wait_us if wait else None, "kernel": c.kernel, "flag": None}
    if ratio is not None and ratio > far:
        row["flag"] = cause(c, ratio, m, wait_us, late, beside_us, fastest_us)
    elif wait and wait_us > 0.5 * c.duration_us:   # far slower than the same call on a peer: it waited
        row["flag"] = f"waited {wait_us:.0f} us for rank {late} to arrive: not the network"
    return row
