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
benchmarks/whatif_accuracy_kernel.json "fit"[0], 0 (the fit's floor: no intercept above zero; in the runs
before, 0, 0 and 0.06 ms). It would hold Gloo/TCP's software cost per message, not the wire's latency (the
kernel network adds none). Until issue 49's closing note it was the median of 7, 0.48 ms: one draw of a fit
that gave 0 to 4.2 ms on the same network.
floor: FLOOR_S, the least time a step of a CPU collective's ring takes here however fast the NICs (whatif's
`floor`, pricing.Pricer.least), measured by emulated_job.fit_floor: Gloo's all-reduce of 4-64 KiB between sleeps
of 2 and 4 ms (an emulated layer's forward and backward), on NICs of 10 GB/s, each call's slowest rank, the mean
over the ring's steps (SOURCE "step_floor"). Each step wakes a thread of each rank, and a rank that slept wakes
late: the tensor-parallel job's 64 KiB all-reduces (2 steps) took 2.3-2.7 ms on average at 20 and at 40 MB/s,
where their bytes take 3.4 and 1.7 ms and their recording at 10 MB/s ran 2 ms under its bytes (HTB's burst),
so the replay had priced them at nothing at x4. The same sweep, run minutes apart on this 2-core VM, gave 0.6
to 1.9 ms a step: it is this host's, and varies with what the host does.
in-node link (NVLink's stand-in, an unshaped bridge): INTRA, fitted by commlib.network.calibrate's point-to-point
sweep inside a node of a 2 x 2 kernel network: the same JSON's "intra", 1888 MB/s and 358 us (the runs
before: 2836 MB/s and 369 us, 3733 MB/s and 409 us, 4462 MB/s and 581 us, 2001 MB/s and 802 us, 1771 MB/s and 352 us; an unshaped
bridge moves what the CPU lets it).
"""

from __future__ import annotations

from commlib import cost
from commlib import topology as topo
from commlib.network.kernel import PAYLOAD_FRACTION
from commlib.network.spec import Spec

SOURCE = "benchmarks/whatif_accuracy_kernel.json"
ALPHA_S = 0.0                       # s per message: SOURCE "fit"[0] (fit_nic, kernel network, 10 MB/s)
INTRA = (1888.3e6, 358.3e-6)         # bytes/s, s: SOURCE "intra" (network.calibrate, inside a node of 2 x 2)
FLOOR_S = 1.58e-3                    # s per ring step: SOURCE "step_floor" (emulated_job.fit_floor)


def excess(spec: Spec) -> str:
    """What a call's time above its model does at another rate on this network (whatif's `excess`): "bytes" on
    the kernel network (TCP through HTB: it moves with the link's time, and a call faster than its model, by HTB's
    burst, is faster by a fixed time), "fixed" on the pacer (profiling.replay.sharing's docstring has the
    measurements)."""
    return "bytes" if spec.kind == "kernel" else "fixed"


def floor(spec: Spec) -> float:
    """Seconds per ring step that a CPU collective takes on this network however fast its NICs (whatif's
    `floor`): FLOOR_S on the kernel network, where each step of a Gloo ring wakes a thread of each rank (the module
    docstring has the measurement); 0 on the pacer, which times only commlib's own messages."""
    return FLOOR_S if spec.kind == "kernel" else 0.0


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
            f"network, {SOURCE}); a ring step at least {FLOOR_S * 1e3:.2f} ms (fit_floor); inside a node "
            f"{INTRA[0] / 1e6:.0f} MB/s, {INTRA[1] * 1e6:.0f} us (network.calibrate)")
