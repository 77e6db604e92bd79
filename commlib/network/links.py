"""The emulated network as the cost model prices it: a Spec (commlib.network.spec) -> topology.Topology, the
links fitted as benchmarks/whatif_accuracy.py --network kernel fits them. `python -m commlib whatif
--measured-network/--network` and that benchmark build their topologies here.

    t = topology(parse("2x1@20e6"))          # inter: one NIC; intra: the GPUs of a node
    t = topology(s, alpha=fitted_alpha)       # a fresh calibration's alpha instead of the committed one

inter-node link (per NIC and direction): bandwidth = the kernel NIC's payload rate, spec.bandwidth x
kernel.PAYLOAD_FRACTION (1448 of the 1514 bytes HTB charges per full TCP segment; the pacer paces payload: x 1);
latency = ALPHA_S + spec.latency. ALPHA_S is the per-message cost fit_nic (commlib.profiling.jobs.emulated_job)
fitted to commlib's ring all-reduce on the kernel network (2 nodes x 1 GPU, 10 MB/s; 128 KiB to 2 MiB, the sizes
the benchmark's jobs send, the minimum of 7 repeats: estimate="min", fit_nic's docstring says why):
benchmarks/whatif_accuracy_kernel.json "fit"[0], 0.30 ms (in the runs before, 0.42, 0.35, 0, 0, 0 and 0.06 ms; 0 is
the fit's floor: no intercept above zero). It would hold Gloo/TCP's software cost per message, not the wire's latency (the
kernel network adds none). Until issue 49's closing note it was the median of 7, 0.48 ms: one draw of a fit
that gave 0 to 4.2 ms on the same network.
small calls: SMALL, benchmarks/small_messages.json: Gloo's all-reduce of 4-256 KiB on 2 nodes of 1 GPU at 2.5 to
80 MB/s, each call after a sleep of 2 or 4 ms (an emulated layer's forward and backward), the mean of its slowest
rank over 2 x 40 calls (emulated_job.small_calls). whatif moves a call whose ring steps are one packet each from
its traced rate to the scenario's as this table does (`small`: small_calls(); pricing.Pricer.measured_ratio),
not by the alpha-beta line, which a small call here does not follow: each step of the ring wakes a thread of
each rank, a rank that slept wakes late, and HTB lets a packet through on credit after an idle link. Measured
on the course's 2-core VM: 2-3 ms for 4 KiB at every rate; 64 KiB 5.1 ms at 10 MB/s (its bytes 6.9), 2.4 at 20
(3.4) and 2.9 at 40 (1.7). The tensor-parallel job's recording at 10 MB/s ran 2 ms a call under its bytes, and
the model had moved that to nothing at x4.
Gloo's ring with a NIC per GPU: GLOO_RINGS, benchmarks/gloo_rings.json: Gloo's all-gather and all-reduce of 128 KiB
to 1 MiB on 4 ranks of 2 x 2 at 10 MB/s, each call after 20 ms of idle links. With one NIC per node a receive
notice leaves behind the ring's data and the calls took about a latency a step or more over their bytes; with a
NIC per GPU none does, and they took their bytes and one latency, less about half a packet where a step is one
packet (64 KiB or less) and 0.03-0.06 of one where it is 2-4 (`credit`: credit(), gloo_credit()).
in-node link (NVLink's stand-in, an unshaped bridge): INTRA, fitted by commlib.network.calibrate's point-to-point
sweep inside a node of a 2 x 2 kernel network: the same JSON's "intra", 1734 MB/s and 540 us (the runs
before: 3112 MB/s and 536 us, 1888 MB/s and 358 us, 2836 MB/s and 369 us, 3733 MB/s and 409 us, 4462 MB/s and 581 us, 2001 MB/s and 802 us, 1771 MB/s and 352 us; an unshaped
bridge moves what the CPU lets it).
"""

from __future__ import annotations

import functools
import json
import os
import statistics

from commlib import cost
from commlib import topology as topo
from commlib.network.kernel import GSO_MAX, PAYLOAD_FRACTION
from commlib.network.spec import Spec

SOURCE = "benchmarks/whatif_accuracy_kernel.json"
ALPHA_S = 0.3045e-3                 # s per message: SOURCE "fit"[0] (fit_nic, kernel network, 10 MB/s)
INTRA = (1734.2e6, 540.4e-6)         # bytes/s, s: SOURCE "intra" (network.calibrate, inside a node of 2 x 2)
SMALL = os.path.join(os.path.dirname(SOURCE), "small_messages.json")   # the small calls' table (docstring)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def excess(spec: Spec) -> str:
    """What a call's time above its model does at another rate on this network (whatif's `excess`): "bytes" on
    the kernel network (TCP through HTB: it moves with the link's time, and a call faster than its model, by HTB's
    burst, is faster by a fixed time), "fixed" on the pacer (profiling.replay.sharing's docstring has the
    measurements)."""
    return "bytes" if spec.kind == "kernel" else "fixed"


def small(spec: Spec):
    """What small calls take on this network (whatif's `small`): on the kernel network the measured table
    (small_calls), on the pacer, which times only commlib's own messages, None."""
    return small_calls() if spec.kind == "kernel" else None


RING_STEPS = os.path.join(os.path.dirname(SOURCE), "ring_steps.json")   # notice(): commlib's ring step by step


def notice(spec: Spec):
    """What each step of commlib's ring on 3 or more ranks across nodes waits beyond its bytes on this network
    (whatif's `notice`): on the kernel network, a function (bytes a step, payload bytes/s) -> seconds: ring_notice()
    of the time one packet takes (a step's bytes, at most kernel.GSO_MAX); on the pacer None. The step's send waits for
    its receiver's notice, which leaves the receiver's NIC behind the packet the receiver is sending
    (kernel.gso_cap's docstring); ring_notice() is what benchmarks/ring_steps.json measured: 4 ranks on 10 MB/s NICs, a
    512 KiB all-reduce, the median call above its bytes' time over its 6 steps, over one 64 KiB packet's time
    (2 ranks: none)."""
    share = ring_notice()
    if spec.kind != "kernel" or share is None:
        return None
    return lambda nbytes, bandwidth: share * min(nbytes, GSO_MAX) / bandwidth


GLOO_RINGS = os.path.join(os.path.dirname(SOURCE), "gloo_rings.json")   # credit(): Gloo's ring, a NIC per GPU


def credit(spec: Spec):
    """What a streaming call (pricing.Pricer.streams: Gloo's ring with no receive notice behind its data) ends under
    its bytes and one latency after idle links, on this network (whatif's `credit`; flows.Flows.add's head, up to
    the links' idle time): on the kernel network, a function (bytes a step, payload bytes/s) -> seconds: gloo_credit()
    packets of a step (its bytes, at most kernel.GSO_MAX) at that rate; on the pacer None. HTB dequeues a packet
    whenever its class's tokens are not negative and charges it after (htb_dequeue_tree, htb_charge_class:
    net/sched/sch_htb.c), so an idle NIC sends a packet at once; what a ring call gains from it was measured, not
    derived."""
    if spec.kind != "kernel":
        return None
    table = gloo_credit()
    return lambda nbytes, bandwidth: _packets(table, nbytes) * min(nbytes, GSO_MAX) / bandwidth


def _packets(table: tuple, nbytes: float) -> float:
    """gloo_credit's packets under for a step of nbytes: interpolated in log(bytes), held at the table's ends."""
    import numpy as np

    if not table or nbytes <= 0:
        return 0.0
    steps, under = zip(*table)
    return float(np.interp(np.log(nbytes), np.log(steps), under))


@functools.lru_cache(maxsize=1)
def gloo_credit(path: str | None = None) -> tuple:
    """GLOO_RINGS' rows with no notice behind data -> ((bytes a step, packets the call ended under its bytes and
    one latency, the median of its ops, at least 0), ...) by step size; () where the file is missing or unreadable
    (no head start). benchmarks/gloo_rings.py: 4 ranks on 2 x 2 with a NIC per GPU, each call after idle links."""
    try:
        with open(path or os.path.join(ROOT, GLOO_RINGS), "rb") as f:
            rows = json.loads(f.read(1 << 20))["rows"]
        per = {}
        for r in rows:
            if not r["notice_behind_data"]:
                per.setdefault(int(r["step_bytes"]), []).append(float(r["under_packets"]))
        return tuple((step, max(0.0, statistics.median(v))) for step, v in sorted(per.items()) if step > 0)
    except (OSError, ValueError, KeyError, TypeError):
        return ()


@functools.lru_cache(maxsize=1)
def ring_notice(path: str | None = None) -> float | None:
    """RING_STEPS' 4-node, 64 KiB-packet row -> the share of a packet's time each step waited (notice), or None."""
    try:
        with open(path or os.path.join(ROOT, RING_STEPS), "rb") as f:
            run = json.loads(f.read(1 << 20))
        row = next(r for r in run["rows"] if r["nodes"] == 4 and r["packets"] == GSO_MAX)
        steps = 2 * (row["nodes"] - 1)
        packet_s = GSO_MAX / (run["bandwidth"] * PAYLOAD_FRACTION)
        return max(0.0, (row["call_median_s"] - row["call_ideal_s"]) / steps / packet_s)
    except (OSError, ValueError, KeyError, TypeError, StopIteration, ZeroDivisionError):
        return None


@functools.lru_cache(maxsize=1)
def small_calls(path: str | None = None):
    """SMALL's table as whatif's `small`: a function (nbytes, payload bytes/s) -> the mean seconds of a 2-rank Gloo
    all-reduce of nbytes on NICs of that payload rate where each of its steps is one packet (nbytes/2 at most
    kernel.GSO_MAX: HTB passes it whole, on credit after an idle link, so the step's wake-ups set its time; a larger
    step's bytes do, which the model prices: 0 there), interpolated log-log between the measured sizes and rates
    and held at the edges (where the table ends the least time stops falling), and at each rate no more than at
    any slower one: the table's cells wobble by its noise (two passes differ by up to half a cell on this VM), and
    a figure that rose with the rate would predict a slower call on a faster link. None where the file is missing
    or unreadable (whatif then moves small calls by the model)."""
    import numpy as np

    try:
        with open(path or os.path.join(ROOT, SMALL), "rb") as f:
            run = json.loads(f.read(1 << 20))
        sizes = np.log(np.asarray(run["sizes"], dtype=float))
        rates = np.log(np.asarray(run["rates"], dtype=float) * PAYLOAD_FRACTION)
        mean = np.log(np.asarray(run["mean_s"], dtype=float))   # [rate][size]
        if mean.shape != (len(rates), len(sizes)) or not np.all(np.isfinite(mean)):
            return None
        mean = np.minimum.accumulate(mean, axis=0)   # rates ascending: no faster NIC makes a call slower
    except (OSError, ValueError, KeyError, TypeError):
        return None

    def took(nbytes: float, bandwidth: float) -> float:
        if nbytes / 2 > GSO_MAX:   # a step of more than one packet: its bytes, not its wake-ups, set its time
            return 0.0
        x, y = np.log(max(nbytes, 1.0)), np.log(max(bandwidth, 1.0))
        per_rate = [np.interp(x, sizes, row) for row in mean]
        return float(np.exp(np.interp(y, rates, per_rate)))

    took.source = SMALL
    return took


def payload_bandwidth(spec: Spec) -> float:
    """Bytes/s of payload one NIC moves per direction: HTB charges each segment's headers (kernel network)."""
    return spec.bandwidth * (PAYLOAD_FRACTION if spec.kind == "kernel" else 1.0)


def topology(spec: Spec, alpha: float = ALPHA_S, intra: cost.Link | None = None,
             payload: bool = True) -> topo.Topology:
    """spec's nodes, GPUs and NICs with the fitted links (module docstring). alpha: s per message of the NIC
    (spec.latency is added); intra: the in-node link (default INTRA); payload=False prices the configured rate
    (benchmarks/whatif_accuracy.py's committed figures did)."""
    if not isinstance(spec, Spec):
        raise TypeError(f"spec must be a commlib.network.spec.Spec, got {type(spec).__name__}")
    rate = payload_bandwidth(spec) if payload else spec.bandwidth
    nic = cost.Link(f"emulated NIC {rate / 1e6:.4g} MB/s", rate, alpha + spec.latency,
                    f"commlib.network {spec.kind}: payload rate; alpha {alpha * 1e3:.2f} ms ({SOURCE} unless given)")
    if intra is None:
        intra = cost.Link("inside a node (fitted)", INTRA[0], INTRA[1], f"commlib.network.calibrate ({SOURCE})")
    return topo.Topology(spec.nodes, spec.gpus_per_node, intra if spec.gpus_per_node > 1 else nic, nic,
                         spec.nics_per_node, name=f"network {spec}")


def describe() -> str:
    """How the links are fitted, in one sentence (for --help)."""
    return (f"links: each NIC at its payload rate (bandwidth x {PAYLOAD_FRACTION:.3f}: HTB charges TCP/IP headers), "
            f"alpha {ALPHA_S * 1e3:.2f} ms per message (fit_nic's calibration run of commlib's ring on the kernel "
            f"network, {SOURCE}); a small call moved between rates as {SMALL} measured; Gloo's ring with a NIC per "
            f"GPU streamed as {GLOO_RINGS} measured; inside a node "
            f"{INTRA[0] / 1e6:.0f} MB/s, {INTRA[1] * 1e6:.0f} us (network.calibrate)")
