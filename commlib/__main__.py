"""python -m commlib COMMAND: the course's command line (`python -m commlib COMMAND --help` for each).

    python -m commlib bench --op all_reduce --algorithm ring --world-size 4 --min-bytes 1K --max-bytes 64M
    torchrun --nproc-per-node=8 -m commlib bench --op all_reduce --algorithm builtin   # no --world-size
    python -m commlib diagnose TRACE... [--hardware PRESET] [--json] [--max-bytes 4G]   # per-rank traces
    python -m commlib whatif TRACE... --hardware PRESET [--nodes N] [--gpus-per-node G] [--algorithm A]
                                      [--bucket-mb B] [--compress R] [--measured-on PRESET] [--json]
    python -m commlib whatif TRACE... --network 4x1@80e6 [--measured-network 2x1@20e6] [--this-machine] ...
    python -m commlib learner-copies OUT_DIR [NOTEBOOK ...] [--force]
    python -m commlib network up --nodes N --gpus-per-node G [--nics-per-node K] --bandwidth B | down NAME | clean
    python -m commlib network run [--nodes N] [--gpus-per-node G] [--nics-per-node K] --bandwidth B [--timeout S]
                                  SCRIPT [ARGS...]

A bad argument ends it with exit code 2 and one line naming the argument, before anything starts
(under torchrun, printed by rank 0 only). Help and argument parsing import no torch (answers in well
under a second); only `bench`, once its arguments are checked, does.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _fail(message: str, every_rank: bool = False):
    """Exit 2 with one line on stderr; under torchrun every rank exits, rank 0 alone says why (every_rank: each).
    Without all of torchrun's variables this is no torchrun job, so no rank 0 may be there to say it: each says it."""
    if every_rank or os.environ.get("RANK", "0") == "0" or any(k not in os.environ for k in TORCHRUN_VARS):
        from commlib.profiling.read.reader import printable   # a file's or an event's name: escaped, one line each

        message = "\n".join(printable(line) for line in str(message).split("\n"))
        print(f"python -m commlib: error: {message}", file=sys.stderr)
    raise SystemExit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own errors too: one line, no usage block
        _fail(message)


def size(text: str) -> int:
    from commlib._validate import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# What bench runs, named without importing torch (commlib.bench does): the ops nccl-tests measures, each with
# torch.distributed's built-in and every one-link algorithm of commlib.cost's registry that commlib.algorithms
# runs. tests/test_cli.py holds these equal to commlib.bench.IMPLEMENTATIONS and DTYPES.
BENCH_OPS = ("all_gather", "all_reduce", "broadcast", "reduce", "reduce_scatter", "sendrecv")
BENCH_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")


def bench_algorithms(op: str) -> tuple[str, ...]:
    from commlib.cost.registry import REGISTRY

    return ("builtin",) + tuple(a.name for a in REGISTRY.values() if a.op == op and a.level == "link" and a.function)


def _bench_problem(args) -> str | None:
    """What is wrong with the bench arguments (one line naming the argument), or None."""
    from commlib.cluster import MAX_TIMEOUT_S, MAX_WORLD_SIZE, resolve_backend

    if args.algorithm not in bench_algorithms(args.op):
        return f"--algorithm for {args.op} must be one of {bench_algorithms(args.op)}, got {args.algorithm!r}"
    checks = [("--min-bytes", args.min_bytes >= 1, "at least 1 byte", args.min_bytes),
              ("--max-bytes", args.max_bytes >= args.min_bytes, f">= --min-bytes ({args.min_bytes})", args.max_bytes),
              ("--factor", 2 <= args.factor <= 1024, "an int in [2, 1024]", args.factor),
              ("--iters", 1 <= args.iters <= 10**6, "an int in [1, 1000000]", args.iters),
              ("--warmup", 0 <= args.warmup <= 10**6, "an int in [0, 1000000]", args.warmup),
              ("--repeats", 1 <= args.repeats <= 1000, "an int in [1, 1000]", args.repeats),
              ("--timeout", math.isfinite(args.timeout) and 0 < args.timeout <= MAX_TIMEOUT_S,
               f"seconds in (0, {MAX_TIMEOUT_S:.0f}]", args.timeout)]
    for name, ok, allowed, value in checks:
        if not ok:
            return f"{name} must be {allowed}, got {value}"
    if args.world_size is None:
        missing = [k for k in TORCHRUN_VARS if k not in os.environ]
        if missing:
            return (f"--world-size is needed outside torchrun (e.g. --world-size 4): {', '.join(missing)} "
                    f"{'is' if len(missing) == 1 else 'are'} not set; or launch with: "
                    "torchrun --nproc-per-node=N -m commlib bench ...")
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
    from commlib.profiling.read.reader import parse_max_bytes

    try:
        return parse_max_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _diagnose(args) -> int:
    from commlib.profiling.diagnosis import diagnose
    from commlib.profiling.report.diagnosis import format_report, json_report
    from commlib.profiling.traces import TraceError

    try:
        report = diagnose(args.traces, hardware=args.hardware, max_bytes=args.max_bytes)
    except TraceError as e:
        _fail(f"diagnose: {e}")
    if args.json:   # json_report is strict JSON already; msgspec writes 20k rows in a tenth of json.dumps' time
        import msgspec

        print(msgspec.json.encode(json_report(report)).decode())
    else:
        print(format_report(report))
    return 0


def _whatif(args) -> int:
    from commlib.profiling.jobs import network_whatif as nw
    from commlib.profiling.traces import TraceError, load
    from commlib.profiling.replay.whatif import scenario_from_args, whatif
    from commlib.profiling.report.whatif import format_report, json_report

    try:
        nw.check_flags(args)   # before any trace is read
        ranks = load(args.traces, args.max_bytes)
        measured, scenario = nw.measured_and_scenario(args, ranks)
        scenario = scenario or scenario_from_args(args.hardware, args.nodes, args.gpus_per_node, args.algorithm,
                                                  args.bucket_mb, args.compress, args.this_machine)
        codec = args.codec_ns_per_byte * 1e-9 if args.codec_ns_per_byte is not None else None
        report = whatif(ranks, [scenario], measured=measured, codec=codec, excess=getattr(args, "excess", "fixed"),
                        small=getattr(args, "small", None), notice=getattr(args, "notice", None),
                        credit=getattr(args, "credit", None))
    except (TraceError, ValueError) as e:
        _fail(f"whatif: {e}")
    print(json.dumps(json_report(report), allow_nan=False) if args.json else format_report(report))
    return 0


def _links_help() -> str:
    from commlib.network.links import describe   # no torch: numbers and a sentence

    return describe()


def _network(args) -> int:
    from commlib.network import cli

    if args.action == "run":
        try:
            cli.check_run(args.script, args.nodes, args.gpus_per_node, args.nics_per_node, args.bandwidth,
                          args.timeout)
        except cli.UsageError as e:
            _fail(str(e))
        from commlib.network.kernel import NetworkError
        from commlib.network.run import run

        try:
            return run(args.script, args.script_args, args.nodes, args.gpus_per_node, args.nics_per_node,
                       args.bandwidth, timeout=args.timeout)
        except (NetworkError, OSError) as e:  # the network could not be made, or torchrun not started
            _fail(f"network run: {e}")
    if (args.name is None) == (args.action == "down"):
        _fail("network down needs NAME" if args.action == "down" else f"network {args.action} takes no NAME")
    try:
        lines = cli.down(args.name) if args.action == "down" else cli.clean() if args.action == "clean" else \
            cli.up(args.nodes, args.gpus_per_node, args.nics_per_node, args.bandwidth)
    except cli.UsageError as e:
        _fail(str(e))
    print("\n".join(lines))
    return 0


def _network_shape(p, bandwidth_required: bool) -> None:
    p.add_argument("--nodes", type=_positive(int), default=2, help="nodes (default 2)")
    p.add_argument("--gpus-per-node", type=_positive(int), default=1, help="GPUs, one rank each, per node (default 1)")
    p.add_argument("--nics-per-node", type=_positive(int), default=1, help="NICs per node, at most the GPUs "
                                                                          "(default 1)")
    p.add_argument("--bandwidth", type=_positive(float), required=bandwidth_required,
                   default=None if bandwidth_required else 20e6,
                   help="bytes/s per NIC direction" + ("" if bandwidth_required else " (default 20e6)"))


def _positive(kind):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            v = 0
        if not v > 0:
            raise argparse.ArgumentTypeError(f"must be {'an integer' if kind is int else 'a number'} > 0, got {text!r}")
        return v
    return parse


def _command(sub, name: str, summary: str, example: str):
    """A subcommand whose --help ends with an example (argparse keeps the epilog's lines as written)."""
    return sub.add_parser(name, help=summary, description=summary, epilog=f"example:\n  {example}",
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m commlib", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    b = _command(sub, "bench", "sweep a collective over message sizes and print nccl-tests' columns",
                 "python -m commlib bench --op all_reduce --algorithm ring --world-size 4 --max-bytes 4M")
    b.add_argument("--op", default="all_reduce", choices=BENCH_OPS, help="the collective (default all_reduce)")
    b.add_argument("--algorithm", default="builtin",
                   help="builtin (torch.distributed) or a commlib algorithm: "
                        + "; ".join(f"{op}: {', '.join(bench_algorithms(op))}" for op in BENCH_OPS))
    b.add_argument("--world-size", type=int, default=None,
                   help="start a local Cluster of this many ranks; omit under torchrun")
    b.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"),
                   help="auto: nccl when every rank gets its own GPU, else gloo (default auto)")
    b.add_argument("--min-bytes", default="1K", type=size, help="smallest message, e.g. 512, 1K, 4M (default 1K)")
    b.add_argument("--max-bytes", default="64M", type=size, help="largest message (default 64M)")
    b.add_argument("--factor", default=2, type=int, help="size multiplier between rows (default 2)")
    b.add_argument("--dtype", default="float32", choices=BENCH_DTYPES, help="element type (default float32)")
    b.add_argument("--iters", default=20, type=int, help="timed calls per size, averaged (default 20)")
    b.add_argument("--warmup", default=5, type=int, help="untimed calls per size before those (default 5)")
    b.add_argument("--repeats", default=1, type=int,
                   help="sweep all sizes this many times, interleaved, and keep each size's median (default 1)")
    b.add_argument("--timeout", default=600.0, type=float,
                   help="seconds for the whole sweep on a local Cluster (default 600)")
    b.add_argument("--json", action="store_true", help="print one JSON list of rows instead of the table")
    d = _command(sub, "diagnose", "every collective in per-rank torch.profiler traces: busbw, model, overlap, "
                                  "stragglers", "python -m commlib diagnose traces/ --hardware dgx_h100 --json")
    d.add_argument("traces", nargs="+", help="trace files (.json, .json.gz), one per rank, or folders of them")
    d.add_argument("--hardware", default=None, choices=tuple(_presets()),
                   help="the machine to price calls on (default: inferred from the GPU named in the traces)")
    d.add_argument("--json", action="store_true", help="print one JSON object instead of the text report")
    d.add_argument("--max-bytes", default=4 << 30, type=_trace_limit,
                   help="refuse a trace file larger than this once decompressed, e.g. 512M (default 4G)")
    w = _command(sub, "whatif", "replay per-rank traces with every collective re-priced: other links, more nodes, "
                                "other buckets or algorithms, compressed gradients",
                 "python -m commlib whatif traces/ --hardware dgx_h100 --nodes 8 --bucket-mb 50")
    w.add_argument("traces", nargs="+", help="trace files (.json, .json.gz), one per rank, or folders of them")
    w.add_argument("--hardware", default=None, choices=tuple(_presets()),
                   help="the machine to replay the job on (or --network)")
    w.add_argument("--measured-on", default=None, choices=tuple(_presets()),
                   help="the machine the traces ran on (default: the emulated network the traces name, else "
                        "inferred from the GPU named in them)")
    w.add_argument("--network", default=None, metavar="NODESxGPUS[xNICS]@BYTES_PER_S",
                   help="replay the job on the course's emulated network of this shape and NIC rate, e.g. 4x1@80e6 "
                        "(instead of --hardware, --nodes, --gpus-per-node); " + _links_help())
    w.add_argument("--measured-network", default=None, metavar="NODESxGPUS[xNICS]@BYTES_PER_S",
                   help="the emulated network the traces ran on, e.g. 2x1@20e6 (default: the one the traces name, "
                        "as `network run` records it; one that differs from theirs is refused)")
    w.add_argument("--nodes", type=_positive(int), default=None, help="nodes of the new job (default: as many as "
                                                                      "the traced ranks fill)")
    w.add_argument("--gpus-per-node", type=_positive(int), default=None, help="GPUs per node (default: the preset's)")
    w.add_argument("--algorithm", default=None, choices=("ring", "multi_ring", "hierarchical", "in_network", "tree"),
                   help="the all-reduce algorithm (default: what the traces ran, as the model prices it)")
    w.add_argument("--bucket-mb", type=_positive(float), default=None, help="regroup the data-parallel "
                                                                            "all-reduces into buckets of this many MiB")
    w.add_argument("--compress", type=_positive(float), default=None,
                   help="divide the data-parallel gradients' bytes by this ratio (adds encode/decode time)")
    w.add_argument("--codec-ns-per-byte", type=_positive(float), default=None,
                   help="with --compress: encode + decode time per gradient byte (default: what "
                        "benchmarks/compression_tradeoff.py measured on a CPU; a GPU codec is far faster)")
    w.add_argument("--this-machine", action="store_true",
                   help="predict the emulated cluster on this machine (ranks sharing its cores: compute stretched "
                        "by ranks per core), not a real cluster of one processor per rank")
    w.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    w.add_argument("--max-bytes", default=4 << 30, type=_trace_limit,
                   help="refuse a trace file larger than this once decompressed, e.g. 512M (default 4G)")
    n = _command(sub, "network", "the kernel network of emulated nodes: up (kept until down), down NAME, clean, "
                                 "run SCRIPT (a torchrun job on it)",
                 "python -m commlib network run --nodes 2 --bandwidth 20e6 examples/ddp_train.py --traces traces")
    actions = n.add_subparsers(dest="action", required=True, parser_class=_Parser)
    for action, summary in (("up", "build a network, kept until `down`"), ("down", "remove the network NAME"),
                            ("clean", "remove what dead owners left (only namespaces the course marked)")):
        a = actions.add_parser(action, help=summary, description=summary)
        a.add_argument("name", nargs="?", default=None, help="with down: the network's name, as `up` printed it")
        if action == "up":
            _network_shape(a, bandwidth_required=False)
    r = actions.add_parser("run", help="run SCRIPT under torchrun on every emulated node, each rank in its GPU's "
                                       "namespace, then remove the network",
                           description="One torchrun per node (--nproc-per-node G, static rendezvous); each rank in "
                                       "its GPU's namespace with COMMLIB_NETWORK (the network as JSON) in its "
                                       "environment; output lines start with node and rank; exits with the job's "
                                       "status. Options go before SCRIPT; what follows SCRIPT is its own.")
    _network_shape(r, bandwidth_required=True)
    r.add_argument("--timeout", type=_positive(float), default=None,
                   help="stop the job after this many seconds (exit status 124, every process stopped, the network "
                        "removed; default: no limit)")
    r.add_argument("script", help="the Python script every rank runs (as torchrun would run it)")
    r.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    lc = _command(sub, "learner-copies", "copies of the notebooks without the cells tagged 'solution', for learners",
                  "python -m commlib learner-copies /tmp/learners notebooks/01_collectives.ipynb")
    lc.add_argument("out_dir", help="folder to write the copies to")
    lc.add_argument("notebooks", nargs="*", help="notebooks to copy (default: notebooks/NN_*.ipynb)")
    lc.add_argument("--force", action="store_true", help="write over copies that already exist in OUT_DIR")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "diagnose":
        return _diagnose(args)
    if args.command == "whatif":
        return _whatif(args)
    if args.command == "network":
        return _network(args)
    if args.command == "learner-copies":
        from commlib.exercises.learner_copies import CopyError, learner_copies

        try:
            written = learner_copies(args.out_dir, args.notebooks or None, force=args.force)
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


def _main_closing_quietly() -> int:
    """main(), where a reader that stopped reading (`... --json | head`) ends the output without a traceback: the
    rest goes nowhere, as for any Unix filter (Python's documented way: stdout onto /dev/null)."""
    try:
        code = main()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(_main_closing_quietly())
