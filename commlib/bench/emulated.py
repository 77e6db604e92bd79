"""The node-aware algorithms timed on an emulated cluster of 2-GPU nodes, beside commlib.topology's model.

    result = emulated_bench.run(cluster, sizes=[4 << 20], ratio=8, latency=1e-3, nics=(1, 2))
    print(emulated_bench.format_result(result))

1. calibrate (in ranks): the intra-node link is loopback. Ranks 0<->1, 2<->3, ... exchange n bytes at once
   (as the ranks of a node do inside an algorithm); an alpha-beta fit over the sizes gives the intra Link.
   gamma: a rank adding tensors while the others do too.
2. time_algorithms (in ranks): under network.emulate(g, bandwidth = intra / ratio, latency, nics), time
   flat ring, multi-ring, hierarchical all-reduce and pairwise all-to-all (the slowest rank's median over
   repeats, rounds interleaved so a slow spell hits all alike), and torch's own dist.all_reduce, which the
   emulator does not pace.
3. The model: topology.collective_time for Topology(N, g, intra, the emulated NIC, nics), with gamma.

benchmarks/topology_emulated.py runs the full sweep and writes benchmarks/topology_emulated.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import textwrap
import time

import torch
import torch.distributed as dist

from commlib import _validate as check
from commlib import algorithms as alg
from commlib import cost
from commlib import topology as topo
from commlib.columns import width
from commlib.network import emulate
from commlib.ui.language import language, tr  # the notebook's language (English: as is)
from commlib.ui.wrap import wrap



def _call(entry):
    """The registry entry's function in commlib.algorithms, called as fn(t, g, **kw) for nodes of g ranks."""
    fn = getattr(alg, entry.function)
    return (lambda t, g, **kw: fn(t, g, **kw)) if entry.per_node else (lambda t, g, **kw: fn(t, **kw))


# name -> (op, the call on this rank for nodes of g ranks, passing on trace= or check=): every node-level
# algorithm of commlib.cost.registry that commlib.algorithms runs
RUNNABLE = {a.name: (a.op, _call(a)) for a in cost.REGISTRY.values() if a.level == "nodes" and a.function}


# ---------------------------------------------------------------------------------- in ranks
def calibrate(sizes, repeats: int):
    """-> ({nbytes: [seconds per exchange with rank ^ 1]}, [seconds per byte of add_]), this rank (even world size).
    All pairs exchange at once, as the GPUs of a node do inside an algorithm; the emulator is not on yet."""
    torch.set_num_threads(1)
    peer = dist.get_rank() ^ 1
    out = {}
    for n in sizes:
        a, b = torch.ones(n // 4), torch.empty(n // 4)
        exchange = [dist.P2POp(dist.irecv, b, peer), dist.P2POp(dist.isend, a, peer)]
        for _ in range(2):  # warm-up
            [w.wait() for w in dist.batch_isend_irecv(exchange)]
        out[n] = []
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            [w.wait() for w in dist.batch_isend_irecv(exchange)]
            out[n].append(time.perf_counter() - t0)
    acc, inc = torch.ones(max(sizes) // 4), torch.ones(max(sizes) // 4)
    gamma = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        acc.add_(inc)
        gamma.append((time.perf_counter() - t0) / max(sizes))
    return out, gamma


def time_algorithms(sizes, repeats: int, gpus_per_node: int, bandwidth: float, latency: float, nics: int,
                    pace: bool = True):
    """-> ({(algorithm, nbytes): [seconds per run]}, [(late_s, overslept_s, data after due, paced_s)]), this rank.
    'builtin' is dist.all_reduce under the same emulation: not paced. pace=False on the kernel network (the
    NICs are shaped by the kernel, dist.all_reduce included; no pacing log)."""
    torch.set_num_threads(1)
    runs = {name: (op, lambda t, g, fn=fn: fn(t, g, check=False)) for name, (op, fn) in RUNNABLE.items()}
    runs["builtin"] = ("all_reduce", lambda t, g: dist.all_reduce(t))
    times = {(name, n): [] for n in sizes for name in runs}
    with emulate(gpus_per_node, bandwidth, latency, nics) if pace else contextlib.nullcontext() as net:
        for name, n in times:  # warm-up
            runs[name][1](torch.ones(n // 4), gpus_per_node)
        log = net.log if net is not None else []
        log.clear()
        for _ in range(repeats):
            for name, n in times:
                t = torch.ones(n // 4)
                dist.barrier()
                t0 = time.perf_counter()
                runs[name][1](t, gpus_per_node)
                times[(name, n)].append(time.perf_counter() - t0)
        log = [(m.late_s, m.overslept_s, m.data_at > m.due, m.due - m.posted) for m in log]
    return times, log


def traced_bytes(numel: int, gpus_per_node: int, dtype=torch.float32) -> dict:
    """-> {algorithm: (bytes this rank sent inside its node, bytes it sent to other nodes)}, from the traces."""
    out = {}
    for name, (_, fn) in RUNNABLE.items():
        tr = alg.Trace()
        fn(torch.ones(numel, dtype=dtype), gpus_per_node, trace=tr)
        cross = [e.src // gpus_per_node != e.dst // gpus_per_node for e in tr.events]  # the flat ring knows no nodes
        out[name] = (sum(e.nbytes for e, c in zip(tr.events, cross) if not c),
                     sum(e.nbytes for e, c in zip(tr.events, cross) if c))
    return out


# ----------------------------------------------------------------------------------- driver
def slowest_rank_median(per_rank: list[list[float]]) -> float:
    """Median over runs of the slowest rank's time: a collective is done when its last rank is."""
    return statistics.median(max(run) for run in zip(*per_rank))


def _quantile(xs: list[float], f: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))]


CALIBRATION_TRIES = 3  # a loaded machine can time a 4 MiB exchange no slower than a 256 KiB one


def fit_loopback(sizes, seconds) -> tuple[float, float]:
    """(alpha s, beta s/byte) of the loopback link from calibration times. Where the times did not grow with size
    (other work shared the cores), the fit's bandwidth term is no measurement: beta is then ~0 (1 / beta was a
    ZeroDivisionError) and even the largest size's n beta falls below alpha, which no loopback does at MiBs. beta
    then falls back to its bound from the largest size, t(n) >= n beta, with alpha 0 (run() re-measures first)."""
    alpha, beta = cost.fit_alpha_beta(sizes, seconds)
    n, t = max(zip(sizes, seconds))
    return (alpha, beta) if calibrated(n, alpha, beta) else (0.0, t / n)


def calibrated(largest: int, alpha: float, beta: float) -> bool:
    """A fit that saw bandwidth: the largest size's bandwidth term at least its latency."""
    return beta > 0 and largest * beta >= alpha


def run(cluster, sizes=(4 << 20,), ratio: float = 8.0, latency: float = 1e-3, nics=(1, 2), repeats: int = 3,
        gpus_per_node: int = 2) -> dict:
    """Calibrate, emulate, time and price (module docstring) -> a JSON-ready dict: machine, intra link, gamma,
    NIC bandwidth, rows {nics, algorithm, op, nbytes, measured_s, model_s}, builtin all-reduce times, pacing."""
    p = cluster.world_size
    g = check.integer("gpus_per_node", gpus_per_node, 1, p)
    ratio = check.number("ratio", ratio, 0, strict=True, high=1e6)
    latency = check.number("latency", latency, 0, unit="seconds", high=60.0)
    repeats = check.integer("repeats", repeats, 1, 1000)
    nics = [check.integer(f"nics[{i}]", k, 1, g) for i, k in enumerate(check.listed("nics", nics, "NIC count"))]
    sizes = [check.integer(f"sizes[{i}]", n, 1, 1 << 30) for i, n in enumerate(check.listed("sizes", sizes, "size"))]
    if p % g or p // g < 2 or p % 2:
        raise ValueError(f"the cluster's world size ({p}) must be even (calibration pairs ranks) and at least "
                         f"2 nodes of gpus_per_node ({g})")
    sizes = [int(n) for n in sizes]
    if any(n % (4 * p) for n in sizes):
        raise ValueError(f"sizes must be multiples of 4 x world size ({4 * p}) bytes, got {sizes}")
    load0 = os.getloadavg()
    intra, gamma = _calibrate(cluster, [n // g for n in sizes], repeats)
    nic = cost.Link("emulated NIC", intra.bandwidth / ratio, latency, f"network.emulate(): loopback / {ratio:g}")
    rows, builtin, pacing = [], [], []
    for k in nics:
        out = cluster.run(time_algorithms, sizes, repeats, g, nic.bandwidth, latency, k)
        _price(out, k, sizes, topo.Topology(p // g, g, intra, nic, k), gamma, rows, builtin, pacing)
    return _result("paced", load0, p, g, ratio, repeats, intra, gamma, nic, rows, builtin, pacing)


def _calibrate(cluster, sizes, repeats: int) -> tuple[cost.Link, float]:
    """The intra-node link fitted (loopback, ranks of a node exchanging at once) and gamma, this cluster."""
    cal_sizes = sorted({1 << 18, 1 << 20, 4 << 20, *sizes})
    for _ in range(CALIBRATION_TRIES):
        out = cluster.run(calibrate, cal_sizes, repeats)
        times = [slowest_rank_median([o[0][n] for o in out]) for n in cal_sizes]
        alpha, beta = cost.fit_alpha_beta(cal_sizes, times)
        if calibrated(max(cal_sizes), alpha, beta):
            break
    else:
        alpha, beta = fit_loopback(cal_sizes, times)
    gamma = statistics.median(x for o in out for x in o[1])
    return cost.Link("loopback", 1 / beta, alpha, "fitted: the ranks of each node exchanging at once"), gamma


def _price(out, k, sizes, model, gamma, rows, builtin, pacing) -> None:
    """Each algorithm's slowest-rank median beside topology's model; dist.all_reduce beside the flat ring's."""
    for n in sizes:
        for name, (op, _) in RUNNABLE.items():
            rows.append({"nics": k, "algorithm": name, "op": op, "nbytes": n,
                         "measured_s": slowest_rank_median([o[0][(name, n)] for o in out]),
                         "model_s": topo.collective_time(op, n, model, name, gamma=gamma)})
        builtin.append({"nics": k, "nbytes": n, "measured_s": slowest_rank_median([o[0][("builtin", n)] for o in out]),
                        "model_s": topo.collective_time("all_reduce", n, model, "flat_ring", gamma=gamma)})
    log = [m for o in out for m in o[1]]
    if log:
        late, overslept = [m[0] for m in log], [m[1] for m in log]
        pacing.append({"nics": k, "messages": len(log), "paced_median_s": statistics.median(m[3] for m in log),
                       "late_median_s": _quantile(late, .5), "late_p95_s": _quantile(late, .95),
                       "overslept_median_s": _quantile(overslept, .5), "overslept_p95_s": _quantile(overslept, .95),
                       "data_after_due": sum(m[2] for m in log) / len(log)})


def _result(kind, load0, p, g, ratio, repeats, intra, gamma, nic, rows, builtin, pacing) -> dict:
    return {"network": kind,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": platform.processor(),
                        "torch": torch.__version__, "load_start": load0, "load_end": os.getloadavg(),
                        "date": time.strftime("%Y-%m-%d")},
            "world_size": p, "gpus_per_node": g, "ratio": ratio, "repeats": repeats,
            "intra": {"bandwidth": intra.bandwidth, "latency": intra.latency}, "gamma": gamma,
            "nic": {"bandwidth": nic.bandwidth, "latency": nic.latency}, "rows": rows, "builtin": builtin,
            "pacing": pacing}


def run_network(sizes=(4 << 20,), bandwidth: float = 20e6, nics=(1, 2), repeats: int = 3, gpus_per_node: int = 2,
                nodes: int = 2) -> dict:
    """The same measurement on the kernel network (commlib.network): for each NIC count a Cluster of nodes x
    gpus_per_node ranks in their nodes' namespaces, NICs of `bandwidth` bytes/s shaped by the kernel (no latency
    added). Every call between nodes crosses them, dist.all_reduce included, which is priced as a flat ring. The
    model prices the NICs' payload rate (Network.payload_bandwidth: the configured rate less the headers HTB
    charges, 1448 of every 1514 bytes)."""
    from commlib.cluster import Cluster
    from commlib.network import Network

    g, repeats = check.integer("gpus_per_node", gpus_per_node, 1, 64), check.integer("repeats", repeats, 1, 1000)
    nics = [check.integer(f"nics[{i}]", k, 1, g) for i, k in enumerate(check.listed("nics", nics, "NIC count"))]
    sizes = [check.integer(f"sizes[{i}]", n, 1, 1 << 30) for i, n in enumerate(check.listed("sizes", sizes, "size"))]
    load0, p = os.getloadavg(), nodes * g
    rows, builtin, pacing = [], [], []
    for k in nics:
        net = Network(nodes, g, k, bandwidth=bandwidth, kind="kernel", quiet=True)
        with Cluster(p, network=net, timeout=600) as c:
            intra, gamma = _calibrate(c, [n // g for n in sizes], repeats)
            # priced at the payload rate: HTB charges each segment's headers (Network.payload_bandwidth)
            nic = cost.Link("kernel NIC (payload rate)", net.payload_bandwidth, intra.latency,
                            "commlib.network: tc HTB at its payload rate; Gloo's alpha as inside")
            out = c.run(time_algorithms, sizes, repeats, g, bandwidth, 0.0, k, False)
            _price(out, k, sizes, topo.Topology(nodes, g, intra, nic, k), gamma, rows, builtin, pacing)
    return _result("kernel", load0, p, g, None, repeats, intra, gamma, nic, rows, builtin, pacing)


COMMITTED = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks",
                         "topology_emulated.json")


def load_committed(path: str = COMMITTED) -> dict:
    """The result benchmarks/topology_emulated.py --json saved (in a source checkout of commlib)."""
    with open(path) as f:
        return json.load(f)


def format_result(result: dict) -> str:
    """The measured/model table, the hierarchical-over-flat speedups and the pacing error, as text in lines
    of at most 100 characters (the book's column), wrapped between words."""
    if language() is not None:  # each line in the notebook's language, wrapped by display width
        return "\n".join(_wrapped(tr(line)) for line in _result_lines(result))
    return "\n".join(line if len(line) <= 100 else
                     textwrap.fill(line, 100, subsequent_indent="    ", break_long_words=False)
                     for line in _result_lines(result))


def _wrapped(line: str, columns: int = 100) -> str:
    """A Chinese line in lines of at most `columns` display columns, its indent kept, the rest indented by 4."""
    if width(line) <= columns:
        return line
    indent = line[:len(line) - len(line.lstrip())]
    parts = wrap(line.strip(), columns - max(len(indent), 4))
    return "\n".join(("    " if i else indent) + part for i, part in enumerate(parts))


AGREE = 0.15  # measured within 15% of the model: "agrees" (the benchmark's targets are 10-25%)


def agreement(result: dict) -> str:
    """What the measurement says about the model's expectations, computed from it: which rows are within AGREE
    of the model, and whether the measured hierarchical speedup and the rings' ratios agree with the model's."""
    rows, by = result["rows"], {(r["nics"], r["nbytes"], r["algorithm"]): r for r in result["rows"]}
    ok = [r for r in rows if abs(r["measured_s"] / r["model_s"] - 1) <= AGREE]
    m = result["machine"]
    lines = [f"{len(ok)} of {len(rows)} rows within {AGREE:.0%} of the model on the {result.get('network', 'paced')} "
             f"network (load {m['load_start'][0]:.1f} -> {m['load_end'][0]:.1f})"]
    for k, n, name in by:
        if name != "flat_ring":
            continue
        for other in ("multi_ring", "hierarchical"):
            f, o = by[(k, n, "flat_ring")], by[(k, n, other)]
            measured, model = f["measured_s"] / o["measured_s"], f["model_s"] / o["model_s"]
            verdict = "agrees" if abs(measured / model - 1) <= AGREE else "does not agree"
            lines.append(f"  {k} NIC(s): {other} vs flat ring, model {model:.2f}x faster, measured {measured:.2f}x: "
                         f"{verdict}")
    for b in result["builtin"]:
        if result.get("network") == "kernel":
            r = b["measured_s"] / b["model_s"]
            lines.append(f"  {b['nics']} NIC(s): dist.all_reduce {r:.2f}x the flat ring's model: "
                         f"{'agrees' if abs(r - 1) <= AGREE else 'does not agree'}")
    return "\n".join(tr(line) for line in lines)


def _header() -> str:
    """The table's column names, right-aligned by display width (a Chinese name takes two columns each)."""
    if language() is None:
        return f"{'NICs':>4} {'algorithm':>13} {'size':>5} {'measured':>9} {'model':>9} {'measured/model':>15}"
    names = (("NICs", 4), ("algorithm", 13), ("size", 5), ("measured", 9), ("model", 9), ("measured/model", 15))
    return " ".join(" " * max(0, n - width(tr(name))) + tr(name) for name, n in names)


def _result_lines(result: dict) -> list[str]:
    size = lambda n: f"{n / 2**20:g}M"  # noqa: E731
    m = result["machine"]
    p, g, intra, nic = result["world_size"], result["gpus_per_node"], result["intra"], result["nic"]
    kernel = result.get("network") == "kernel"
    how = tr("kernel NIC (tc HTB), no latency added" if kernel else
             f"emulated NIC (1/{result['ratio']:g}), latency {nic['latency'] * 1e3:g} ms")
    lines = [f"network: {result.get('network', 'paced')}",
             f"{p} ranks as {p // g} nodes x {g}; intra (loopback, fitted) {intra['bandwidth'] / 1e9:.2f} GB/s, "
             f"alpha {intra['latency'] * 1e6:.0f} us; {how} {nic['bandwidth'] / 1e9:.3f} GB/s; gamma "
             f"{result['gamma'] * 1e9:.2f} ns/B; median of {result['repeats']}, slowest rank",
             f"machine: {m['cpus']} cores, load {m['load_start'][0]:.1f} at start, {m['load_end'][0]:.1f} at the end",
             _header()]
    for r in result["rows"]:
        lines.append(f"{r['nics']:>4} {r['algorithm']:>13} {size(r['nbytes']):>5} {r['measured_s'] * 1e3:>7.1f}ms "
                     f"{r['model_s'] * 1e3:>7.1f}ms {r['measured_s'] / r['model_s']:>14.2f}x")
    by = {(r["nics"], r["nbytes"], r["algorithm"]): r for r in result["rows"]}
    lines.append("hierarchical over the flat ring: measured vs model speedup")
    for k, n, name in by:
        if name == "flat_ring":
            f, h = by[(k, n, "flat_ring")], by[(k, n, "hierarchical")]
            lines.append(f"  {k} NIC(s), {size(n):>5}: measured {f['measured_s'] / h['measured_s']:.2f}x, "
                         f"model {f['model_s'] / h['model_s']:.2f}x")
    for b in result["builtin"]:
        flat = by[(b["nics"], b["nbytes"], "flat_ring")]
        if kernel:
            lines.append(f"dist.all_reduce (Gloo's own), {b['nics']} NIC(s), {size(b['nbytes'])}: "
                         f"{b['measured_s'] * 1e3:.1f} ms, model (flat ring) {b['model_s'] * 1e3:.1f} ms: "
                         f"{b['measured_s'] / b['model_s']:.2f}x")
        else:
            lines.append(f"dist.all_reduce, same emulation ({b['nics']} NIC(s), {size(b['nbytes'])}): "
                         f"{b['measured_s'] * 1e3:.1f} ms, paced flat ring {flat['measured_s'] * 1e3:.1f} ms: not paced")
    for q in result["pacing"]:
        lines.append(f"pacing, {q['nics']} NIC(s): {q['messages']} messages (median paced time "
                     f"{q['paced_median_s'] * 1e3:.1f} ms);")
        lines.append(f"    receivers went on late by a median "
                     f"{q['late_median_s'] * 1e3:.2f} ms (p95 {q['late_p95_s'] * 1e3:.2f} ms), of which the wake-up "
                     f"{q['overslept_median_s'] * 1e3:.2f} ms; loopback data after the due time: "
                     f"{q['data_after_due']:.0%}")
    return lines
