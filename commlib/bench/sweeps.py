"""nccl-tests-style sweeps of a collective: sizes on a log scale, warm-up, barrier before each timed
iteration, median over iterations, slowest rank, results checked (#wrong).

    rows = sweep("all_reduce", "ring", min_bytes=1024, max_bytes=64 << 20)   # inside a rank
    python -m commlib bench --op all_reduce --algorithm ring --world-size 4 --max-bytes 64M

algbw = size / time (GB = 1e9 B); busbw = algbw * cost.bus_factor(op, p) (nccl-tests PERFORMANCE.md).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from commlib import algorithms as alg
from commlib import columns, cost
from commlib._validate import parse_size  # noqa: F401  (commlib.bench.parse_size)
from commlib.cluster.worker import uses_nccl

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float64": torch.float64, "int32": torch.int32, "int64": torch.int64}

_BUILTIN = {  # torch.distributed's own collective for each op nccl-tests measures
    "all_reduce": lambda t: (dist.all_reduce(t), t)[1],
    "reduce_scatter": lambda t: _builtin_reduce_scatter(t),
    "all_gather": lambda t: _builtin_all_gather(t),
    "broadcast": lambda t: (dist.broadcast(t, src=0), t)[1],
    "reduce": lambda t: (dist.reduce(t, dst=0), t)[1],
    "sendrecv": lambda t: _ring_sendrecv(t),
}


def _ours(function: str):
    fn = getattr(alg, function)
    return lambda t: fn(t, check=False)   # roots (src/dst) default to rank 0, as the built-ins here


# (op, algorithm) -> fn(tensor_in) -> result tensor: 'builtin' is torch.distributed's own, the others every
# algorithm of commlib.cost.registry that commlib.algorithms runs on one link
IMPLEMENTATIONS = {}
for _op, _fn in _BUILTIN.items():
    IMPLEMENTATIONS[_op, "builtin"] = _fn
    for _a in cost.REGISTRY.values():
        if _a.op == _op and _a.level == "link" and _a.function:
            IMPLEMENTATIONS[_op, _a.name] = _ours(_a.function)
BENCHED_OPS = tuple(sorted({op for op, _ in IMPLEMENTATIONS}))


def algorithms_for(op: str) -> tuple[str, ...]:
    return tuple(a for o, a in IMPLEMENTATIONS if o == op)


def _ring_sendrecv(t):
    """nccl-tests sendrecv: every rank sends t to rank+1 and receives as much from rank-1, all at once."""
    p, r = dist.get_world_size(), dist.get_rank()
    out = torch.empty_like(t)
    if p == 1:
        return out.copy_(t)
    # one group: with NCCL at p = 2 a separate receive and send between the same two ranks would deadlock
    for work in dist.batch_isend_irecv([dist.P2POp(dist.irecv, out, (r - 1) % p), dist.P2POp(dist.isend, t, (r + 1) % p)]):
        work.wait()
    return out


def _builtin_reduce_scatter(t):
    out = torch.empty(t.numel() // dist.get_world_size(), dtype=t.dtype, device=t.device)
    dist.reduce_scatter_single(out, t)
    return out


def _builtin_all_gather(shard):
    out = torch.empty(shard.numel() * dist.get_world_size(), dtype=shard.dtype, device=shard.device)
    dist.all_gather_single(out, shard)
    return out


def sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """min_bytes, min_bytes*factor, ... up to max_bytes (inclusive)."""
    if min_bytes < 1 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"need 1 <= min_bytes <= max_bytes and factor >= 2, got {min_bytes}, {max_bytes}, {factor}")
    out, n = [], min_bytes
    while n <= max_bytes:
        out.append(n)
        n *= factor
    return out


def _input(op: str, count: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (input, expected result) with small integers, so every dtype represents the answer exactly."""
    p, r = dist.get_world_size(), dist.get_rank()
    pattern = (torch.arange(count, device=device) % 7 + 1).to(dtype)
    if op == "all_gather":
        shard = pattern[: count // p] * (r + 1)
        expected = torch.cat([pattern[: count // p] * (q + 1) for q in range(p)])
        return shard, expected
    x = pattern * (r + 1)
    total = pattern * (p * (p + 1) // 2)
    if op == "all_reduce":
        return x, total
    if op == "reduce_scatter":
        n = count // p
        return x, total[r * n:(r + 1) * n]
    if op == "reduce":
        return x, total if r == 0 else None
    if op == "sendrecv":
        return x, pattern * ((r - 1) % p + 1)
    return (pattern * 1 if r == 0 else torch.zeros_like(pattern)), pattern  # broadcast


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _check_repeats(repeats) -> None:
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")


def combine_repeats(runs: list[list[dict]], op: str, world_size: int) -> list[dict]:
    """Rows of several sweeps over the same sizes -> one row per size with the median time (and the worst #wrong)."""
    out = []
    for same_size in zip(*runs):
        t = statistics.median(r["time_s"] for r in same_size)
        algbw = same_size[0]["nbytes"] / t / 1e9
        out.append({**same_size[0], "time_s": t, "algbw_GBps": algbw,
                    "busbw_GBps": algbw * cost.bus_factor(op, world_size), "wrong": max(r["wrong"] for r in same_size)})
    return out


def sweep(op: str = "all_reduce", algorithm: str = "builtin", min_bytes: int = 1024, max_bytes: int = 1 << 20,
          dtype: str = "float32", iters: int = 20, warmup: int = 5, factor: int = 2, progress=None,
          repeats: int = 1) -> list[dict]:
    """Run inside every rank. -> one row per size: nbytes, count, dtype, time_s (median over iterations,
    slowest rank), algbw_GBps, busbw_GBps, wrong (elements differing from the expected result).
    repeats > 1 sweeps all sizes that many times, interleaved, and keeps each size's median: slow drift
    on a busy machine then hits every size alike instead of whichever size was running."""
    _check_repeats(repeats)
    if repeats > 1:
        runs = [sweep(op, algorithm, min_bytes, max_bytes, dtype, iters, warmup, factor, progress) for _ in range(repeats)]
        return combine_repeats(runs, op, dist.get_world_size())
    if (op, algorithm) not in IMPLEMENTATIONS:
        raise ValueError(f"no ({op!r}, {algorithm!r}); op in {BENCHED_OPS}, algorithm for {op!r} in "
                         f"{algorithms_for(op) if op in BENCHED_OPS else '-'}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    if iters < 1 or warmup < 0:
        raise ValueError(f"iters must be >= 1 and warmup >= 0, got {iters}, {warmup}")
    fn = IMPLEMENTATIONS[op, algorithm]
    p = dist.get_world_size()
    tdtype = DTYPES[dtype]
    itemsize = tdtype.itemsize
    device = torch.device("cuda", torch.cuda.current_device()) if uses_nccl() else torch.device("cpu")
    rows = []
    for nbytes in sizes(min_bytes, max_bytes, factor):
        count = max(nbytes // itemsize // p * p, p)  # whole elements, divisible by p (as nccl-tests)
        pristine, expected = _input(op, count, tdtype, device)
        work = pristine.clone()
        times = []
        for i in range(warmup + iters):
            work.copy_(pristine)  # in-place algorithms consume their input: restore it, untimed
            _sync(device)
            dist.barrier()
            t0 = time.perf_counter()
            out = fn(work)
            _sync(device)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        wrong = 0 if expected is None else int((out != expected).sum().item())
        stats = torch.tensor([statistics.median(times), float(wrong)], dtype=torch.float64, device=device)
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)
        t, wrong = stats[0].item(), int(stats[1].item())
        size = count * itemsize
        algbw = size / t / 1e9
        rows.append({"nbytes": size, "count": count, "dtype": dtype, "time_s": t, "algbw_GBps": algbw,
                     "busbw_GBps": algbw * cost.bus_factor(op, p), "wrong": wrong})
        if progress is not None and dist.get_rank() == 0:
            progress(rows[-1])
    return rows


def format_table(rows: list[dict], op: str, redop: str = "sum") -> str:
    """The nccl-tests columns: size (B), count (elements), type, redop, time (us), algbw, busbw (GB/s), #wrong."""
    redop = redop if op in ("all_reduce", "reduce_scatter", "reduce") else "none"
    cells = [["size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"],
             ["(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", ""]]
    cells += [[str(r["nbytes"]), str(r["count"]), r["dtype"], redop, f"{r['time_s'] * 1e6:.1f}",
               f"{r['algbw_GBps']:.3f}", f"{r['busbw_GBps']:.3f}", str(r["wrong"])] for r in rows]
    lines = columns.fit(cells, [12, 13, 10, 7, 11, 9, 9, 8], ">" * 8)  # nccl-tests' widths, wider for wider values
    return "\n".join(lines)


def run_sweep(cluster, op: str = "all_reduce", algorithm: str = "builtin", min_bytes: int = 1024,
              max_bytes: int = 1 << 20, progress: bool = True, repeats: int = 1, **kwargs) -> list[dict]:
    """sweep() on a Cluster, one size per run() so a progress bar (tqdm) can follow in the notebook.
    repeats: as in sweep(), interleaved over all sizes."""
    _check_repeats(repeats)
    todo = sizes(min_bytes, max_bytes, kwargs.pop("factor", 2))
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo) * repeats, desc=f"{op} {algorithm}", unit="size")  # leave=False: a closed widget shows "model not found" in JupyterLab
    runs = []
    try:
        for _ in range(repeats):
            rows = []
            for n in todo:
                rows += cluster.run(sweep, op, algorithm, n, n, **kwargs)[0]
                if bar is not None:
                    bar.update(1)
            runs.append(rows)
    finally:
        if bar is not None:
            bar.close()
    return combine_repeats(runs, op, cluster.world_size) if repeats > 1 else runs[0]


def loopback_link(nbytes: int = 64 << 20, repeats: int = 5, pings: int = 2000) -> cost.Link:
    """Measure one TCP stream over 127.0.0.1 on this machine -> cost.Link("loopback", ...).

    Bandwidth: median over `repeats` of nbytes sent through one socket to a receiving thread.
    Latency: half the median round trip of a 1-byte ping-pong."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted = []
    t = threading.Thread(target=lambda: accepted.append(server.accept()[0]))
    t.start()
    client = socket.create_connection(("127.0.0.1", port))
    t.join()
    peer = accepted[0]
    server.close()
    for sock in (client, peer):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def receive_then_ack(count: int) -> None:
        buf = memoryview(bytearray(min(count, 4 << 20)))
        left = count
        while left:
            left -= peer.recv_into(buf, min(left, len(buf)))
        peer.sendall(b"k")  # the sender stops its clock when this arrives: all bytes were received

    payload = bytes(nbytes)
    bandwidths = []
    try:
        for _ in range(repeats):
            rx = threading.Thread(target=receive_then_ack, args=(nbytes,))
            rx.start()
            t0 = time.perf_counter()
            client.sendall(payload)
            client.recv(1)
            bandwidths.append(nbytes / (time.perf_counter() - t0))
            rx.join()

        def echo() -> None:
            for _ in range(pings):
                peer.sendall(peer.recv(1))

        rx = threading.Thread(target=echo)
        rx.start()
        rtts = []
        for _ in range(pings):
            t0 = time.perf_counter()
            client.sendall(b"p")
            client.recv(1)
            rtts.append(time.perf_counter() - t0)
        rx.join()
    finally:
        client.close()
        peer.close()
    bw, lat = statistics.median(bandwidths), statistics.median(rtts) / 2
    return cost.Link("loopback", bw, lat, f"measured here: one TCP stream over 127.0.0.1, {nbytes >> 20} MiB "
                                          f"x {repeats} (bandwidth), {pings} 1-byte ping-pongs (latency)")


def measure_gamma(nbytes: int = 16 << 20, dtype: str = "float32", repeats: int = 7) -> float:
    """Seconds per byte to add one tensor into another on this machine (the gamma of the cost model)."""
    a = torch.ones(nbytes // DTYPES[dtype].itemsize, dtype=DTYPES[dtype])
    b = torch.ones_like(a)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a.add_(b)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / nbytes
