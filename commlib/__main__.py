"""python -m commlib bench ...: nccl-tests-style sweeps, on a local Cluster or under torchrun.

    python -m commlib bench --op all_reduce --algorithm ring --world-size 4 --min-bytes 1K --max-bytes 64M
    torchrun --nproc-per-node=8 -m commlib bench --op all_reduce --algorithm builtin   # no --world-size
    python -m commlib learner-copies OUT_DIR [NOTEBOOK ...]
    python -m commlib diagnose TRACE... [--hardware PRESET] [--json] [--max-bytes 4G]   # per-rank traces

A bad argument ends it with exit code 2 and one line naming the argument, before anything starts
(under torchrun, printed by rank 0 only).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _fail(message: str, every_rank: bool = False):
    """Exit 2 with one line on stderr; under torchrun every rank exits, rank 0 alone says why (every_rank: each)."""
    if every_rank or os.environ.get("RANK", "0") == "0":
        print(f"python -m commlib: error: {message}", file=sys.stderr)
    raise SystemExit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own errors too: one line, no usage block
        _fail(message)


def size(text: str) -> int:
    from commlib import bench

    return bench.parse_size(text)


def _bench_problem(args) -> str | None:
    """What is wrong with the bench arguments (one line naming the argument), or None."""
    from commlib import bench
    from commlib.cluster import MAX_TIMEOUT_S, MAX_WORLD_SIZE, resolve_backend

    if (args.op, args.algorithm) not in bench.IMPLEMENTATIONS:
        return f"--algorithm for {args.op} must be one of {bench.algorithms_for(args.op)}, got {args.algorithm!r}"
    checks = [("--min-bytes", args.min_bytes >= 1, "at least 1 byte", args.min_bytes),
              ("--max-bytes", args.max_bytes >= args.min_bytes, f">= --min-bytes ({args.min_bytes})", args.max_bytes),
              ("--factor", args.factor >= 2, "an int >= 2", args.factor),
              ("--iters", args.iters >= 1, "an int >= 1", args.iters),
              ("--warmup", args.warmup >= 0, "an int >= 0", args.warmup),
              ("--repeats", args.repeats >= 1, "an int >= 1", args.repeats),
              ("--timeout", math.isfinite(args.timeout) and 0 < args.timeout <= MAX_TIMEOUT_S,
               f"seconds in (0, {MAX_TIMEOUT_S:.0f}]", args.timeout)]
    for name, ok, allowed, value in checks:
        if not ok:
            return f"{name} must be {allowed}, got {value}"
    if args.world_size is None:
        if any(k not in os.environ for k in TORCHRUN_VARS):
            return ("--world-size is needed outside torchrun (e.g. --world-size 4); "
                    "or launch with: torchrun --nproc-per-node=N -m commlib bench ...")
        local = os.environ.get("LOCAL_WORLD_SIZE", "1")
        return _memory_problem(args, int(local) if local.isdigit() else 1)
    if not 1 <= args.world_size <= MAX_WORLD_SIZE:
        return f"--world-size must be an int in [1, {MAX_WORLD_SIZE}], got {args.world_size}"
    problem = _memory_problem(args, args.world_size)
    if problem:
        return problem
    try:
        resolve_backend(args.backend, args.world_size)
    except ValueError as e:
        return f"--backend {args.backend}: {e}"
    return None


def _launcher_problem() -> str | None:
    """RANK and WORLD_SIZE as torchrun sets them: ints, 0 <= RANK < WORLD_SIZE. Otherwise no rank 0 exists to
    host the rendezvous store at MASTER_ADDR:MASTER_PORT, and this process would wait for it until the timeout."""
    rank, world = os.environ["RANK"], os.environ["WORLD_SIZE"]
    if not (rank.isdigit() and world.isdigit() and int(rank) < int(world)):
        return (f"RANK={rank} WORLD_SIZE={world}: RANK must be an int in [0, WORLD_SIZE); without a rank 0 to host "
                "the rendezvous at MASTER_ADDR:MASTER_PORT this process would wait for it (launch with torchrun)")
    return None


BUFFERS = 4  # a size's input, its pristine copy, the expected result and the output live at once on each rank


def _memory_problem(args, ranks: int) -> str | None:
    """--max-bytes that the ranks of this machine could not allocate, refused before anything starts."""
    from commlib.cluster.envinfo import memory_bytes

    memory = memory_bytes()
    if memory is None:  # no sysconf (Windows): let the ranks find out
        return None
    need = BUFFERS * args.max_bytes * ranks
    if need > memory:
        return (f"--max-bytes {args.max_bytes} needs about {need / 1e9:.3g} GB ({BUFFERS} buffers of it on each of "
                f"{ranks} ranks), more than this machine's {memory / 1e9:.3g} GB")
    return None


def _presets():
    from commlib import topology

    return topology.PRESETS


def _trace_limit(text: str) -> int:
    from commlib.profiling.reader import parse_max_bytes

    try:
        return parse_max_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _diagnose(args) -> int:
    from commlib.profiling.diagnose import diagnose, format_report, json_report
    from commlib.profiling.traces import TraceError

    try:
        report = diagnose(args.traces, hardware=args.hardware, max_bytes=args.max_bytes)
    except TraceError as e:
        _fail(f"diagnose: {e}")
    print(json.dumps(json_report(report), allow_nan=False) if args.json else format_report(report))
    return 0


def _parser() -> argparse.ArgumentParser:
    from commlib import bench

    ap = _Parser(prog="python -m commlib", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="sweep a collective over message sizes (nccl-tests columns)")
    b.add_argument("--op", default="all_reduce", choices=bench.BENCHED_OPS)
    b.add_argument("--algorithm", default="builtin",
                   help="builtin (torch.distributed) or a commlib algorithm: "
                        + "; ".join(f"{op}: {', '.join(bench.algorithms_for(op))}" for op in bench.BENCHED_OPS))
    b.add_argument("--world-size", type=int, default=None,
                   help="start a local Cluster of this many ranks; omit under torchrun")
    b.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"))
    b.add_argument("--min-bytes", default="1K", type=size, help="e.g. 512, 1K, 4M (default 1K)")
    b.add_argument("--max-bytes", default="64M", type=size, help="default 64M")
    b.add_argument("--factor", default=2, type=int, help="size multiplier between rows (default 2)")
    b.add_argument("--dtype", default="float32", choices=tuple(bench.DTYPES))
    b.add_argument("--iters", default=20, type=int)
    b.add_argument("--warmup", default=5, type=int)
    b.add_argument("--repeats", default=1, type=int,
                   help="sweep all sizes this many times, interleaved, and keep each size's median (default 1)")
    b.add_argument("--timeout", default=600.0, type=float, help="seconds for the whole sweep (local Cluster)")
    b.add_argument("--json", action="store_true", help="print one JSON list of rows instead of the table")
    d = sub.add_parser("diagnose", help="every collective in per-rank torch.profiler traces: busbw, model, "
                                        "overlap, stragglers")
    d.add_argument("traces", nargs="+", help="trace files (.json, .json.gz), one per rank, or folders of them")
    d.add_argument("--hardware", default=None, choices=tuple(_presets()),
                   help="the machine to price calls on (default: inferred from the GPU named in the traces)")
    d.add_argument("--json", action="store_true", help="print one JSON object instead of the text report")
    d.add_argument("--max-bytes", default=4 << 30, type=_trace_limit,
                   help="refuse a trace file larger than this once decompressed, e.g. 512M (default 4G)")
    lc = sub.add_parser("learner-copies", help="copies of the notebooks without the cells tagged 'solution'")
    lc.add_argument("out_dir", help="folder to write the copies to")
    lc.add_argument("notebooks", nargs="*", help="notebooks to copy (default: notebooks/NN_*.ipynb)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "diagnose":
        return _diagnose(args)
    if args.command == "learner-copies":
        from commlib.exercises.learner_copies import CopyError, learner_copies

        try:
            written = learner_copies(args.out_dir, args.notebooks or None)
        except CopyError as e:
            _fail(f"learner-copies: {e}")
        for path in written:
            print(path)
        return 0
    from commlib import bench

    kwargs = dict(op=args.op, algorithm=args.algorithm, min_bytes=args.min_bytes, max_bytes=args.max_bytes,
                  dtype=args.dtype, iters=args.iters, warmup=args.warmup, factor=args.factor, repeats=args.repeats)
    launcher = _launcher_problem() if args.world_size is None and all(k in os.environ for k in TORCHRUN_VARS) \
        else None
    if launcher:
        _fail(launcher, every_rank=True)  # there may be no rank 0 to say it
    problem = _bench_problem(args)  # before starting anything
    if problem:
        _fail(problem)
    if args.world_size is not None:
        import commlib as cl

        try:
            with cl.Cluster(world_size=args.world_size, backend=args.backend, timeout=args.timeout) as c:
                rows = c.run(bench.sweep, **kwargs)[0]
                p, backend = c.world_size, c.backend
        except cl.RankError as e:  # RankDied too: a rank raised or ended (out of memory, killed)
            lines = (getattr(e, "remote_traceback", None) or str(e)).strip().splitlines()
            _fail(f"rank {e.rank} failed: {lines[-1] if lines else type(e).__name__}")
        except cl.ClusterTimeout:
            _fail(f"--timeout {args.timeout:g}: the ranks did not start and finish the sweep within it "
                  "(raise --timeout, or sweep fewer sizes)")
        rank = 0
    else:
        import torch.distributed as dist

        from commlib.cluster.torchrun import init_from_env

        try:
            rank, p = init_from_env(backend=args.backend)
        except ValueError as e:  # nccl without a GPU for this process
            _fail(f"--backend {args.backend}: {e}")
        backend = dist.get_backend()
        rows = bench.sweep(**kwargs)
        dist.destroy_process_group()
    if rank == 0:
        if args.json:
            print(json.dumps(rows))
        else:
            print(f"# commlib bench: {args.op} algorithm={args.algorithm} world_size={p} backend={backend}")
            print(bench.format_table(rows, args.op))
            print(f"# avg busbw: {sum(r['busbw_GBps'] for r in rows) / len(rows):.3f} GB/s; "
                  f"#wrong total: {sum(r['wrong'] for r in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
