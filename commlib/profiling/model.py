"""Step 2 of the source chapter: each collective call against the model, and the probable cause of a slow one.

    preset, why = infer_hardware(ranks)          # the GPU's name in the traces -> a hardware preset, and why
    m = model(call, hw)                          # the model's time_s, latency_s, busbw_GBps (None: no model)
    row = call_row(call, m, far, wait, beside_us, fastest_us)   # one call's row of diagnose's report

The model is topology's multi-ring (plan.hardware's group pricing) on a hardware preset, given or inferred from
the GPU's name, at the link speeds NCCL reaches (topology.ACHIEVABLE). busbw = algbw x nccl-tests' bus factor
(cost.bus_factor). A call more than `far` x its model is flagged with a probable cause, the first that applies:
it waited for a late rank; the message is too small (the model is mostly per-call latency: fuse them, bigger
buckets); it took over twice as long as the same rank's fastest identical call (waiting or contention, not the
link); a small-message protocol on a large message (only where the name says it: NCCL >= 2.27's symmetric LL
kernels, read/kernels.py); compute kernels ran beside it (NCCL runs on the same SMs); busbw far below the link's
(check the link, NCCL's transport, other traffic).

Causes and the hardware's why are records ({kind, numbers}); report/words.py says them.
"""

from __future__ import annotations

import functools
import re

from commlib import cost
from commlib import plan
from commlib import topology as topo
from commlib.network import links, spec
from commlib.profiling.stragglers import P2P
from commlib.profiling.traces import Call, RankTrace

# GPU names (deviceProperties) -> the preset whose intra-node link they have; PCIe boards have none
GPU_PRESETS = ((r"A100(?!.*PCIE)", "dgx_a100"), (r"H100(?!.*PCIE)|H200", "dgx_h100"), (r"B200", "dgx_b200"))
SMALL_BYTES = 1 << 20   # below this a message pays mostly latency on NVLink-class links


def infer_hardware(ranks: list[RankTrace]) -> tuple[str | None, dict]:
    """-> (preset or None, why): the GPU's name in deviceProperties, if it says which node it is; why is a
    record {kind: no_gpu_named | cpu | sxm | no_preset, gpu, preset}."""
    names = {r.device for r in ranks if r.device}
    if not names:
        return None, {"kind": "no_gpu_named" if any(r.backend == "nccl" for r in ranks) else "cpu"}
    name = sorted(names)[0]
    for pattern, preset in GPU_PRESETS:
        if re.search(pattern, name, re.IGNORECASE):
            return preset, {"kind": "sxm", "gpu": name, "preset": preset}
    return None, {"kind": "no_preset", "gpu": name}


def traced_network(ranks: list[RankTrace]) -> spec.Spec | None:
    """The emulated network the traces say they ran on (their commlib_network, which `network run` stamps), or
    None where they say none; ValueError where one is not a network record or they disagree."""
    said = set()
    for r in ranks:
        try:
            said.add(spec.from_trace({spec.TRACE_KEY: r.network}))
        except (TypeError, ValueError) as e:   # a record from elsewhere, or edited: the file is named
            raise ValueError(f"{r.path}: its {spec.TRACE_KEY} is not a network record: {e}") from None
    if len(said) > 1:
        raise ValueError("the traces say they ran on different networks: "
                         + ", ".join(sorted(str(s) if s else "none" for s in said)))
    return said.pop() if said else None


def pick_hardware(ranks: list[RankTrace], hardware: str | None) -> tuple[str | None, dict]:
    """diagnose's hardware: the preset given (checked) or inferred, and why as a record (infer_hardware's, or
    {kind "given", preset, cpu_job}); an inferred why has unpriced True where no preset prices the calls. Where
    no preset is given or inferred and the traces name the emulated network they ran on: (None, {kind "network",
    network}); network_hardware prices the calls on it."""
    if hardware is None:
        hardware, why = infer_hardware(ranks)
        net = traced_network(ranks) if hardware is None else None
        if net is not None:
            return None, {"kind": "network", "network": str(net)}
        return hardware, {**why, "unpriced": hardware is None}
    if hardware not in topo.PRESETS:
        raise ValueError(f"hardware must be one of {tuple(topo.PRESETS)}, got {hardware!r}")
    cpu_job = not any(r.device for r in ranks) and ranks[0].backend == "gloo"
    return hardware, {"kind": "given", "preset": hardware, "cpu_job": cpu_job}


def network_hardware(text: str) -> plan.Hardware:
    """The emulated network a why of kind "network" names, as the hardware diagnose prices calls on: its nodes,
    GPUs and NICs with the links the what-if fits (commlib.network.links). No GPU memory or FLOP/s are used."""
    return plan.Hardware.from_topology(links.topology(spec.parse(text)), 1.0, 1.0)


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
          fastest_us: float | None = None) -> dict:
    """The probable cause of a call `ratio` x slower than its model (see the module docstring for the order),
    as a record {kind: waited | small | slower | ll | beside | busbw, ...}; fastest_us: the same rank's fastest
    identical call (same op, bytes and group)."""
    if wait_us > 0.5 * call.duration_us:
        return {"kind": "waited", "wait_us": wait_us, "rank": waited_for}
    if m["latency_s"] > 0.5 * m["time_s"] or call.bytes < SMALL_BYTES:
        return {"kind": "small"}
    if fastest_us and call.duration_us > 2 * fastest_us:
        return {"kind": "slower", "times": call.duration_us / fastest_us, "fastest_us": fastest_us}
    if call.protocol == "ll":
        return {"kind": "ll", "symmetric": (call.algorithm or "").startswith("sym_")}
    cpu = call.kernel is None   # Gloo (or NCCL seen from the CPU only): no GPU words for it
    if beside_compute_us > 0.5 * call.duration_us:
        return {"kind": "beside", "cpu": cpu}
    return {"kind": "busbw", "cpu": cpu}


@functools.lru_cache(maxsize=1024)
def bus_factor(op: str, p: int) -> float:
    """cost.bus_factor, once per (op, group size): a job's 10^5 calls have a few (op and p already checked)."""
    return cost.bus_factor(op, p)


def call_row(c: Call, m: dict | None, far: float, wait, beside_us: float, fastest_us: float | None = None) -> dict:
    """One call's row of the report; m: its model (model()), None where it has none; wait: (wait_us, late rank)
    from stragglers.find, or None; beside_us: the compute that ran during the call. flag: cause()'s record."""
    nbytes = c.bytes
    dur_s = c.duration_us * 1e-6
    algbw = nbytes / dur_s / 1e9 if nbytes and dur_s > 0 else None
    op = "sendrecv" if c.op in P2P else c.op
    factor = bus_factor(op, c.group_size) if op in cost.OPS and c.group_size else None
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
        row["flag"] = {"kind": "waited", "wait_us": wait_us, "rank": late}
    return row
