"""What-if accuracy: predict a job's step on other links and more nodes from its traces, then run those and
compare (issue 34's test, on the course's emulated multi-node cluster).

    python benchmarks/whatif_accuracy.py [--quick] [--bandwidth 100e6] [--latency 5e-4] [--json out.json]
    python benchmarks/whatif_accuracy.py --network kernel [--quick] [--bandwidth 10e6] [--json out.json]

commlib.profiling.jobs.emulated_job: an MLP trained with BucketedDDP whose bucket all-reduces run commlib's ring on a
background thread, through NICs paced by network.emulate (2 emulated nodes of 1 GPU each); its compute an
emulated accelerator (fixed-duration ops that take no core, so that 4 ranks on 2 cores compute as fast as 2).
1. Fit the emulated NIC as the ring sees it: alpha (latency plus software per message), beta.
2. Record the job at --bandwidth; whatif predicts its step at 1/4x and 4x the bandwidth and on 4 nodes.
3. Run each and measure (the slowest rank per step, the median over steps, no profiler).
Prints each scenario's predicted, measured and error, and the median |error| (the issue's goal: <= 10% on a
quiet machine). --quick (CI): fewer steps, twice the nodes predicted but not run (no 4-rank cluster), no JSON.
The full run's --json is what chapter 9 shows.

--network kernel: three jobs on the kernel network (commlib.network: Linux namespaces, NICs shaped by tc HTB; no
pacer, no latency added), 2 nodes of 1 GPU: the same BucketedDDP job, torch's DistributedDataParallel (Gloo's own
all-reduce) and FSDP2 (fully_shard per layer). The links are fitted by separate calibration runs (fit_nic; the
inside-a-node link by commlib.network.calibrate on a 2 x 2 network), never from the traces. Each job is recorded
once at --bandwidth; whatif predicts bandwidth x1/4, x1/2, x2, x4 (each run after Network.set_bandwidth),
2 -> 4 nodes (a 4-node network), 2 GPUs per node with 1 shared NIC or 2 NICs (2 x 2 networks), and, for the two
DDP jobs, buckets of 1, 4 and 25 MiB. Rows carry job, scenario, predicted_s, measured_s and the signed error;
--quick: 2 steps, x2 and x4 only, 4 nodes predicted but not run. `--network paced --jobs three` runs the same
pairs on the pacer (benchmarks/whatif_accuracy_paced.json): there torch DDP's and FSDP2's own collectives are
not paced at all.
"""

import statistics

import json
import os
import platform
import sys
import tempfile
import time

import commlib as cl
from commlib.bench import arguments
from commlib.profiling.jobs import emulated_job as ej

KERNEL_BANDWIDTH = 10e6  # bytes/s: x4 stays far below what 2 loaded cores move over a veth (>100 MB/s)


def jobs_accuracy(bandwidth: float, quick: bool, folder: str, kind: str = "kernel") -> dict:
    """The three jobs (module docstring) on a network of `kind` -> {"fit", "gamma", "rows": [{job, scenario,
    predicted_s, measured_s, error}]}. kind "paced": the same runs with every run() inside the pacer's emulate()
    (Network(kind="paced")): only commlib's messages are paced, so torch DDP's and FSDP2's are not."""
    from commlib import bench, cost
    from commlib.network import Network, links
    from commlib.network.spec import Spec
    from commlib.network.calibrate import calibrate
    from commlib.profiling.replay import whatif as wi

    steps, recorded = (2, 1) if quick else (ej.STEPS, ej.RECORDED)
    factors = (2.0, 4.0) if quick else (0.25, 0.5, 2.0, 4.0)
    buckets = () if quick else (1.0, 4.0, 25.0)
    shapes = () if quick else (1, 2)   # 2 GPUs per node sharing 1 NIC, or with a NIC each
    kw = {"steps": steps, "recorded": recorded, "pace": False, "latency": 0.0}
    pre = ("torch.distributed.fsdp",)
    net = Network(2, 1, bandwidth=bandwidth, kind=kind, quiet=True)
    plans, intra, notes = {}, None, {}
    with cl.Cluster(2, network=net, timeout=600, preload=pre) as small:
        alpha, beta = small.run(ej.fit_nic, bandwidth, 0.0, pace=False)[0]   # the calibration: no trace involved
        gamma = bench.measure_gamma()
        # the links as `whatif --network` prices them (commlib.network.links), at the configured rate as the
        # committed figures were (payload=False), with this run's own alpha
        priced = lambda *shape, f=1.0, inside=None: links.topology(  # noqa: E731
            Spec(*shape, bandwidth=bandwidth * f, kind=kind), alpha, inside, payload=False)
        measured = priced(2, 1)
        at = lambda f: priced(2, 1, f=f)  # noqa: E731
        if shapes:  # the link inside a node, fitted by a calibration run of its own on a 2 x 2 network
            with cl.Cluster(4, network=Network(2, 2, 1, bandwidth=bandwidth, kind=kind, quiet=True)) as c:
                cal = calibrate(c)
            a_in, b_in = cost.fit_alpha_beta(cal["sizes"], cal["inside_s"])
            intra = cost.Link("inside a node (fitted)", 1 / b_in, a_in, "commlib.network.calibrate")
        for job in ej.JOBS:
            base = small.run(ej.train, f"{folder}/{job}", bandwidth=bandwidth, job=job, **kw)
            mine = buckets if job != "fsdp2" else ()
            scenarios = [wi.Scenario(f"x{f:g} bandwidth", topology=at(f)) for f in factors]
            scenarios += [wi.Scenario("4 nodes", nodes=4)] + [wi.Scenario(f"{b:g} MiB buckets", bucket_mb=b) for b in mine]
            scenarios += [wi.Scenario(f"2 GPUs/node, {k} NIC(s)", nodes=2, gpus_per_node=2,
                                      topology=priced(2, 2, k, inside=intra)) for k in shapes]
            try:
                report = wi.whatif(f"{folder}/{job}", scenarios, measured=measured, gamma=gamma, steps=recorded)
                refused = {}
            except ValueError as e:   # e.g. buckets that cannot be regrouped: those rows say why, the rest stand
                refused = {sc.name: str(e) for sc in scenarios if sc.bucket_mb is not None}
                report = wi.whatif(f"{folder}/{job}", [sc for sc in scenarios if sc.name not in refused],
                                   measured=measured, gamma=gamma, steps=recorded)
            plans[job] = {s["name"]: s["step_us"] * 1e-6 for s in report["scenarios"]} | dict.fromkeys(refused)
            notes[job] = refused
            runs = {"measured": ej.job_step(base)}
            for f in factors:
                net.set_bandwidth(bandwidth * f)
                runs[f"x{f:g} bandwidth"] = ej.job_step(small.run(ej.train, f"{folder}/{job}-bw", bandwidth=bandwidth * f,
                                                                  job=job, **kw))
            net.set_bandwidth(bandwidth)
            for b in mine:
                runs[f"{b:g} MiB buckets"] = ej.job_step(small.run(ej.train, f"{folder}/{job}-b", bandwidth=bandwidth,
                                                                   job=job, bucket_mb=b, **kw))
            plans[job]["_runs"] = runs
    larger = [] if quick else [("4 nodes", Network(4, 1, bandwidth=bandwidth, kind=kind, quiet=True))]
    larger += [(f"2 GPUs/node, {k} NIC(s)", Network(2, 2, k, bandwidth=bandwidth, kind=kind, quiet=True))
               for k in shapes]
    for name, big in larger:
        with cl.Cluster(4, network=big, timeout=600, preload=pre) as large:
            for job in ej.JOBS:
                plans[job]["_runs"][name] = ej.job_step(large.run(ej.train, f"{folder}/{job}-4", bandwidth=bandwidth,
                                                                  job=job, gpus_per_node=big.gpus_per_node, **kw))
    rows = []
    for job, plan in plans.items():
        runs = plan.pop("_runs")
        for name, predicted in plan.items():
            if name == "measured":
                continue
            got = runs.get("measured" if name == "identity replay" else name)
            rows.append({"job": job, "scenario": name, "predicted_s": predicted, "measured_s": got,
                         "error": predicted / got - 1 if got and predicted else None}
                        | ({"refused": notes[job][name]} if name in notes[job] else {}))
    return {"fit": (alpha, beta), "gamma": gamma, "rows": rows,
            "intra": None if intra is None else {"bandwidth": intra.bandwidth, "latency": intra.latency}}


def jobs_main(a, load, t0) -> None:
    import tempfile

    bandwidth = a.bandwidth if a.bandwidth_given else KERNEL_BANDWIDTH
    with tempfile.TemporaryDirectory() as tmp:
        result = jobs_accuracy(bandwidth, a.quick, tmp, a.network)
    alpha, beta = result["fit"]
    errors = [abs(r["error"]) for r in result["rows"] if r["error"] is not None and r["scenario"] != "identity replay"]
    print(f"# {a.network} network, three jobs, {platform.machine()}, {os.cpu_count()} CPUs, load {load[0]:.2f} -> {os.getloadavg()[0]:.2f}; "
          f"NIC {bandwidth / 1e6:g} MB/s; fitted alpha {alpha * 1e3:.2f} ms, 1/beta {1 / beta / 1e6:.1f} MB/s")
    print(f"{'job':>13} {'scenario':>16} {'predicted ms':>13} {'measured ms':>12} {'error':>8}")
    for r in result["rows"]:
        if r["predicted_s"] is None:
            print(f"{r['job']:>13} {r['scenario']:>16}   whatif refused it: {r['refused']}")
            continue
        got = f"{r['measured_s'] * 1e3:>12.2f} {r['error']:>+8.1%}" if r["measured_s"] else "  not run (--quick)"
        print(f"{r['job']:>13} {r['scenario']:>16} {r['predicted_s'] * 1e3:>13.2f} {got}")
    median = statistics.median(errors)
    p90 = sorted(errors)[min(len(errors) - 1, int(0.9 * len(errors)))]
    print(f"median |error| over the what-ifs: {median:.1%}, p90 {p90:.1%} over {len(errors)} (job, scenario) pairs "
          f"(goal: median <= 5%, p90 <= 10%); {time.perf_counter() - t0:.0f} s")
    if a.json:
        out = {"network": a.network, "rows": result["rows"], "median_error": median, "p90_error": p90,
               "fit": result["fit"], "gamma": result["gamma"], "intra": result["intra"], "bandwidth": bandwidth,
               "machine": {"machine": platform.machine(), "cpus": os.cpu_count(), "platform": platform.platform()},
               "load": [load[0], os.getloadavg()[0]],
               "command": f"python benchmarks/whatif_accuracy.py --network {a.network} --jobs three "
                          f"--bandwidth {bandwidth:g}"}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--bandwidth", type=arguments.number(1e6, 1e10), default=100e6, help="emulated NIC, bytes/s")
    ap.add_argument("--latency", type=arguments.number(0, 0.05, strict=False), default=5e-4, help="emulated NIC, s")
    ap.add_argument("--json", help="also write the result to this file")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI: fewer steps")
    ap.add_argument("--network", choices=("paced", "kernel"), default="paced",
                    help="paced: the Python pacer (default); kernel: commlib.network's namespaces and tc HTB")
    ap.add_argument("--jobs", choices=("one", "three"), default=None,
                    help="one: the BucketedDDP job and 3 scenarios (the pacer's default); three: BucketedDDP, "
                         "torch DDP and FSDP2 and 10 scenarios (always with --network kernel)")
    a = ap.parse_args()
    a.bandwidth_given = any(x.startswith("--bandwidth") for x in sys.argv[1:])
    if a.json and not os.path.isdir(os.path.dirname(os.path.abspath(a.json))):
        ap.error(f"argument --json: the folder of {a.json!r} does not exist")
    steps, recorded = (2, 1) if a.quick else (ej.STEPS, ej.RECORDED)
    t0 = time.perf_counter()
    load = os.getloadavg()
    if a.network == "kernel" or a.jobs == "three":
        from commlib.network import available

        ok, why = available()
        if a.network == "kernel" and not ok:
            ap.error(f"argument --network: kernel is not available here ({why})")
        jobs_main(a, load, t0)
        return
    with tempfile.TemporaryDirectory() as tmp, cl.Cluster(world_size=2, timeout=600) as small:
        if a.quick:
            result = ej.predict_and_run(small, None, tmp, a.bandwidth, a.latency, steps, recorded)
        else:
            with cl.Cluster(world_size=4, timeout=600) as large:
                result = ej.predict_and_run(small, large, tmp, a.bandwidth, a.latency, steps, recorded)
    alpha, beta = result["fit"]
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, load {load[0]:.2f} -> {os.getloadavg()[0]:.2f}; "
          f"emulated NIC {a.bandwidth / 1e6:g} MB/s, latency {a.latency * 1e3:g} ms; fitted alpha "
          f"{alpha * 1e3:.2f} ms per message, 1/beta {1 / beta / 1e6:.1f} MB/s")
    print(f"{'scenario':>15} {'predicted ms':>13} {'measured ms':>12} {'error':>8}")
    for r in result["rows"]:
        if r["measured_s"] is None:
            print(f"{r['name']:>15} {r['predicted_s'] * 1e3:>13.2f}   not run (--quick: no 4-rank cluster)")
            continue
        print(f"{r['name']:>15} {r['predicted_s'] * 1e3:>13.2f} {r['measured_s'] * 1e3:>12.2f} {r['error']:>+8.1%}")
    print(f"median |error| over the what-ifs: {ej.median_error(result):.1%} (goal: at most 10%); "
          f"{time.perf_counter() - t0:.0f} s")
    if a.json:
        out = {k: v for k, v in result.items() if k != "report"}
        out.update(machine=platform.machine(), cpus=os.cpu_count(), load=load, bandwidth=a.bandwidth,
                   latency=a.latency, steps=steps, recorded=recorded, median_error=ej.median_error(result),
                   command=f"python benchmarks/whatif_accuracy.py --bandwidth {a.bandwidth:g} --latency {a.latency:g}")
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
