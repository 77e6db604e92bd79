"""The emulated cluster's network measured: the kernel network (namespaces, veth, tc HTB) beside the Python pacer,
on 2 nodes x 2 GPUs (4 local ranks), each against the alpha-beta model of the configured NIC.

    python benchmarks/network_emulation.py [--bandwidth 20e6] [--repeats 3] [--json PATH] [--quick]

--quick (what CI runs): p2p at 1 KiB, 64 KiB and 1 MiB, collectives at 1 MiB, 1 repeat; the pacer side too.

1. Set-up: a 4-node network (1 GPU, 1 NIC each) up and down, 5 times (target: up + down < 2 s).
2. For each kind (kernel, then paced), a Cluster of 4 ranks on Network(2, 2, 1 NIC, bandwidth):
   - point to point, between nodes (rank 0 -> 2) and inside a node (0 -> 1), 1 KiB-64 MiB; the link fitted
     as the course fits links (cost.fit_alpha_beta) and each size against alpha + n / bandwidth (configured);
   - two flows through one NIC (0 -> 2 and 1 -> 3 at once) against one flow: expected 2x for the later flow;
   - dist.all_reduce (Gloo's own), commlib's ring and hierarchical all-reduce against commlib.topology's model
     (flat_ring for Gloo's and commlib's ring, hierarchical), intra link = the fitted inside-a-node link;
   - the 1-minute load average before and after each part.
3. Rails (kernel only): the same two flows with 2 NICs per node: expected 1x. Cross-index pairs (GPU 0 of node 0
   -> GPU 1 of node 1 while GPU 1 of node 0 -> GPU 0 of node 1) on 1 NIC and on 2 NICs: expected 0.5x on 2, and
   tc's own byte counters: each NIC carries one flow's bytes each way (payload / kernel.PAYLOAD_FRACTION).
4. Scale (kernel only): 8 nodes x 2 GPUs x 2 NICs (16 ranks, 25 namespaces) built, a Cluster started on it, one
   all-reduce, all stopped (target: within a minute on 2 cores); the largest network allowed, 64 GPUs
   (network.MAX_RANKS), as 64 nodes x 1 GPU: up and down.
On the pacer only commlib.algorithms' messages are paced: dist.all_reduce runs on plain loopback there.
"""

import json
import os
import statistics
import time

import torch
import torch.distributed as dist

import commlib as cl
from commlib import algorithms as alg
from commlib import cost
from commlib import topology as topo
from commlib.bench import arguments
from commlib.network import Network, available, kernel
from commlib.network.calibrate import flows, p2p_times

MIB = 1 << 20


def collectives(nbytes: int, repeats: int, g: int) -> dict:
    """In ranks: {name: [seconds per run]} of dist.all_reduce, ring and hierarchical all-reduce."""
    torch.set_num_threads(1)
    runs = {"dist.all_reduce (Gloo)": lambda t: dist.all_reduce(t),
            "commlib ring": lambda t: alg.ring_all_reduce(t, check=False),
            "commlib hierarchical": lambda t: alg.hierarchical_all_reduce(t, g, check=False)}
    out = {name: [] for name in runs}
    for name, fn in runs.items():
        fn(torch.ones(nbytes // 4))  # warm-up: connections made, buffers allocated
        for _ in range(repeats):
            t = torch.ones(nbytes // 4)
            dist.barrier()
            t0 = time.perf_counter()
            fn(t)
            out[name].append(time.perf_counter() - t0)
    return out


def pair_of_flows(c, nbytes: int, repeats: int) -> dict:
    single, both = [], []
    for _ in range(repeats):
        single.append(merge(c.run(flows, [(0, 2)], nbytes))[0])
        both.append(max(merge(c.run(flows, [(0, 2), (1, 3)], nbytes)).values()))
    return {"nbytes": nbytes, "single_s": statistics.median(single), "both_s": statistics.median(both),
            "ratio": statistics.median(both) / statistics.median(single)}


def merge(dicts):
    out = {}
    for d in dicts:
        out.update(d)
    return out


def load() -> float:
    return round(os.getloadavg()[0], 2)


def measure(kind: str, bandwidth: float, sizes: list, coll_bytes: int, repeats: int) -> dict:
    net = Network(2, 2, 1, bandwidth=bandwidth, kind=kind, quiet=True)
    res = {"kind": kind, "bandwidth": bandwidth}
    with cl.Cluster(4, network=net, timeout=600) as c:
        l0 = load()
        between = c.run(p2p_times, 0, 2, sizes, repeats)[0]
        inside = c.run(p2p_times, 0, 1, sizes, repeats)[0]
        alpha, beta = cost.fit_alpha_beta(sizes, between)
        a_in, b_in = cost.fit_alpha_beta(sizes, inside)
        res["p2p"] = {"sizes": sizes, "between_s": between, "inside_s": inside, "alpha_s": alpha,
                      "payload_bandwidth": 1 / beta if beta > 0 else None, "model_s": [alpha + n / bandwidth for n in sizes],
                      "load": [l0, load()]}
        l0 = load()
        res["two_flows"] = {**pair_of_flows(c, coll_bytes, repeats), "load": [l0, load()]}
        l0 = load()
        out = c.run(collectives, coll_bytes, repeats, 2)
        intra = cost.Link("inside a node (fitted)", 1 / b_in if b_in > 0 else 1e12, a_in, "measured here")
        inter = cost.Link("NIC (configured, alpha fitted)", bandwidth, alpha, "configured rate")
        model = topo.Topology(2, 2, intra, inter, 1)
        res["collectives"] = []
        for name in out[0]:
            measured = statistics.median(max(run) for run in zip(*(o[name] for o in out)))
            algo = "hierarchical" if "hierarchical" in name else "flat_ring"
            res["collectives"].append({"name": name, "nbytes": coll_bytes, "measured_s": measured,
                                       "model_s": topo.collective_time("all_reduce", coll_bytes, model, algo),
                                       "model_algorithm": algo})
        res["collectives_load"] = [l0, load()]
    return res


def rails(bandwidth: float, nbytes: int, repeats: int) -> dict:
    cross, pairs = {}, [(0, 3), (1, 2)]
    for k in (1, 2):
        net = Network(2, 2, k, bandwidth=bandwidth, kind="kernel")
        with cl.Cluster(4, network=net, timeout=600) as c:
            l0 = load()
            if k == 2:
                out = pair_of_flows(c, nbytes, repeats)
            before = net.nic_bytes()
            took = [max(merge(c.run(flows, pairs, nbytes)).values()) for _ in range(repeats)]
            after = net.nic_bytes()
            cross[k] = {"seconds": statistics.median(took), "load": [l0, load()],
                        "nic_bytes": {f"{n}.{j}": [(after[n, j][0] - before[n, j][0]) / repeats,
                                                   (after[n, j][1] - before[n, j][1]) / repeats] for n, j in after}}
    out["cross"] = {"pairs": pairs, "nbytes": nbytes, "one_nic": cross[1], "two_nics": cross[2],
                    "ratio": cross[2]["seconds"] / cross[1]["seconds"],
                    "expected_nic_bytes": nbytes / kernel.PAYLOAD_FRACTION}
    out["load"] = cross[2]["load"]
    return out


def _all_reduce_1k() -> float:
    t = torch.ones(256)
    dist.all_reduce(t)
    return float(t[0])


def scale() -> dict:
    t0 = time.perf_counter()
    net = Network(8, 2, 2, bandwidth=20e6, kind="kernel")
    with cl.Cluster(16, network=net, timeout=120) as c:
        started = time.perf_counter() - t0
        assert set(c.run(_all_reduce_1k)) == {16.0}
    total = time.perf_counter() - t0
    big = Network(64, 1, bandwidth=20e6, kind="kernel")
    t1 = time.perf_counter()
    big.up()
    t2 = time.perf_counter()
    big.down()
    return {"shape": "8x2x2", "start_s": started, "start_run_stop_s": total, "largest": "64x1",
            "largest_up_s": t2 - t1, "largest_down_s": time.perf_counter() - t2, "load": load()}


def setup_times(repeats: int = 5) -> dict:
    ups, downs = [], []
    for _ in range(repeats):
        net = Network(4, 1, bandwidth=20e6, kind="kernel")
        t0 = time.perf_counter()
        net.up()
        t1 = time.perf_counter()
        net.down()
        ups.append(t1 - t0)
        downs.append(time.perf_counter() - t1)
    return {"up_s": statistics.median(ups), "down_s": statistics.median(downs), "repeats": repeats}


def report(result: dict) -> str:
    lines = []
    if "setup" in result:
        s = result["setup"]
        lines.append(f"4-node kernel network: up {s['up_s'] * 1e3:.0f} ms, down {s['down_s'] * 1e3:.0f} ms (median of "
                     f"{s['repeats']}; target up + down < 2 s: {'met' if s['up_s'] + s['down_s'] < 2 else 'MISSED'})")
    for r in result["kinds"]:
        p = r["p2p"]
        pb = p["payload_bandwidth"]
        lines.append(f"\n== {r['kind']} network, NIC {r['bandwidth'] / 1e6:g} MB/s: fitted payload "
                     f"{pb / 1e6 if pb else float('nan'):.2f} MB/s, alpha {p['alpha_s'] * 1e6:.0f} us (load {p['load'][0]}"
                     f" -> {p['load'][1]})")
        lines.append(f"{'size':>9} {'between ms':>11} {'model ms':>9} {'meas/model':>10} {'inside ms':>10} {'between/inside':>14}")
        for n, b, m, i in zip(p["sizes"], p["between_s"], p["model_s"], p["inside_s"]):
            lines.append(f"{n:>9} {b * 1e3:>11.3f} {m * 1e3:>9.3f} {b / m:>10.2f} {i * 1e3:>10.3f} {b / i:>14.1f}")
        f = r["two_flows"]
        lines.append(f"two flows through one NIC, {f['nbytes'] >> 10} KiB each: the later took {f['ratio']:.2f}x one flow "
                     f"(expected 2x; load {f['load'][0]} -> {f['load'][1]})")
        lines.append(f"{'all-reduce':<24} {'bytes':>9} {'measured ms':>12} {'model ms':>9} {'meas/model':>10}  model")
        for row in r["collectives"]:
            lines.append(f"{row['name']:<24} {row['nbytes']:>9} {row['measured_s'] * 1e3:>12.2f} {row['model_s'] * 1e3:>9.2f} "
                         f"{row['measured_s'] / row['model_s']:>10.2f}  {row['model_algorithm']}")
        lines.append(f"(load {r['collectives_load'][0]} -> {r['collectives_load'][1]})")
    if "rails" in result:
        f = result["rails"]
        lines.append(f"\nrails, 2 NICs per node: two flows, the later took {f['ratio']:.2f}x one flow (expected 1x; "
                     f"load {f['load'][0]} -> {f['load'][1]})")
        x = f.get("cross")
        if x:
            lines.append(f"cross-index pairs {x['pairs']}, {x['nbytes'] >> 10} KiB each: 2 NICs took {x['ratio']:.2f}x "
                         f"1 NIC (expected 0.5x); tc's counters per NIC, 2 NICs (expected "
                         f"{x['expected_nic_bytes'] / 1e6:.3f} MB each way of its flow):")
            lines += [f"  node {k.split('.')[0]} NIC {k.split('.')[1]}: sent {v[0] / 1e6:.3f} MB, received "
                      f"{v[1] / 1e6:.3f} MB" for k, v in x["two_nics"]["nic_bytes"].items()]
    if "scale" in result:
        s = result["scale"]
        lines.append(f"\nscale: {s['shape']} (16 ranks) started in {s['start_s']:.1f} s, started + all-reduce + "
                     f"stopped in {s['start_run_stop_s']:.1f} s (target < 60 s: "
                     f"{'met' if s['start_run_stop_s'] < 60 else 'MISSED'}); the largest allowed, {s['largest']}: up "
                     f"{s['largest_up_s']:.2f} s, down {s['largest_down_s']:.2f} s (load {s['load']})")
    return "\n".join(lines)


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--bandwidth", type=arguments.number(1e4, 1e11), default=20e6, help="bytes/s per NIC direction")
    ap.add_argument("--repeats", type=arguments.integer(1, 100), default=3, help="repeats; medians")
    ap.add_argument("--json", type=arguments.output_file, help="also write the result to this file")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI")
    a = ap.parse_args()
    sizes = [1 << 10, 64 << 10, MIB] if a.quick else [1 << 10 << (3 * i) for i in range(6)] + [64 * MIB]
    coll = MIB if a.quick else 16 * MIB
    repeats = 1 if a.quick else a.repeats
    ap.check_memory(4, 3 * max(sizes + [coll]), f"--bandwidth {a.bandwidth:g}")
    ok, why = available()
    result = {"machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M")},
              "kernel_available": [ok, why], "kinds": []}
    if ok:
        result["setup"] = setup_times()
        result["kinds"].append(measure("kernel", a.bandwidth, sizes, coll, repeats))
    else:
        print(f"kernel network: not available here ({why}); the pacer alone")
    result["kinds"].append(measure("paced", a.bandwidth, sizes, coll, repeats))
    if ok:
        result["rails"] = rails(a.bandwidth, coll, repeats)
        result["scale"] = scale()
    print(report(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
