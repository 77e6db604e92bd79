"""python -m commlib bench ...: nccl-tests-style sweeps, on a local Cluster or under torchrun.

    python -m commlib bench --op all_reduce --algorithm ring --world-size 4 --min-bytes 1K --max-bytes 64M
    torchrun --nproc-per-node=8 -m commlib bench --op all_reduce --algorithm builtin   # no --world-size
"""

from __future__ import annotations

import argparse
import json
import sys


def _parser() -> argparse.ArgumentParser:
    from commlib import bench

    ap = argparse.ArgumentParser(prog="python -m commlib", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="sweep a collective over message sizes (nccl-tests columns)")
    b.add_argument("--op", default="all_reduce", choices=bench.OPS)
    b.add_argument("--algorithm", default="builtin",
                   help="builtin (torch.distributed) or a commlib algorithm: "
                        + "; ".join(f"{op}: {', '.join(bench.algorithms_for(op))}" for op in bench.OPS))
    b.add_argument("--world-size", type=int, default=None,
                   help="start a local Cluster of this many ranks; omit under torchrun")
    b.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"))
    b.add_argument("--min-bytes", default="1K", type=bench.parse_size, help="e.g. 512, 1K, 4M (default 1K)")
    b.add_argument("--max-bytes", default="64M", type=bench.parse_size, help="default 64M")
    b.add_argument("--factor", default=2, type=int, help="size multiplier between rows (default 2)")
    b.add_argument("--dtype", default="float32", choices=tuple(bench.DTYPES))
    b.add_argument("--iters", default=20, type=int)
    b.add_argument("--warmup", default=5, type=int)
    b.add_argument("--repeats", default=1, type=int,
                   help="sweep all sizes this many times, interleaved, and keep each size's median (default 1)")
    b.add_argument("--timeout", default=600.0, type=float, help="seconds for the whole sweep (local Cluster)")
    b.add_argument("--json", action="store_true", help="print one JSON list of rows instead of the table")
    lc = sub.add_parser("learner-copies", help="copies of the notebooks without the cells tagged 'solution'")
    lc.add_argument("out_dir", help="folder to write the copies to")
    lc.add_argument("notebooks", nargs="*", help="notebooks to copy (default: notebooks/NN_*.ipynb)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "learner-copies":
        from commlib.teaching import learner_copies

        for path in learner_copies(args.out_dir, args.notebooks or None):
            print(path)
        return 0
    from commlib import bench

    kwargs = dict(op=args.op, algorithm=args.algorithm, min_bytes=args.min_bytes, max_bytes=args.max_bytes,
                  dtype=args.dtype, iters=args.iters, warmup=args.warmup, factor=args.factor, repeats=args.repeats)
    if (args.op, args.algorithm) not in bench.IMPLEMENTATIONS:
        print(f"error: --algorithm for {args.op} must be one of {bench.algorithms_for(args.op)}", file=sys.stderr)
        return 2
    bench.sizes(args.min_bytes, args.max_bytes, args.factor)  # validate before starting anything
    if args.world_size is not None:
        import commlib as cl

        with cl.Cluster(world_size=args.world_size, backend=args.backend, timeout=args.timeout) as c:
            rows = c.run(bench.sweep, **kwargs)[0]
            p, backend = c.world_size, c.backend
        rank = 0
    else:
        import torch.distributed as dist

        from commlib.torchrun import init_from_env

        rank, p = init_from_env(backend=args.backend)
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
