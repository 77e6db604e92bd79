"""Rank output throughput: lines per second per rank that a Cluster forwards to the notebook.

    python benchmarks/rank_output.py [--world-size 4] [--lines 200000] [--output ordered|live|both] [--quick]

--quick (what CI runs): 2 ranks, 5,000 lines each.

Every rank prints --lines short lines (print(), as a learner's loop would); the parent's stdout goes
to a sink that counts the lines, so the figure is the forwarding path alone (rank stream, pipe,
connection, labelling), not a terminal's speed. Target: 200k lines on 4 ranks well inside the default
60 s timeout (issue 13: ~6k lines/s per rank before batching).
"""

import contextlib
import os
import time

import commlib as cl
from commlib.bench import arguments
from commlib.cluster import MAX_WORLD_SIZE


def talk(lines: int) -> int:
    import torch.distributed as dist

    r = dist.get_rank()
    for i in range(lines):
        print("rank", r, "line", i, "of the output benchmark")
    return lines


class CountingSink:
    """A stdout stand-in that counts what arrives and keeps nothing."""

    def __init__(self):
        self.lines = 0

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        return len(text)

    def flush(self) -> None:
        pass


def measure(c: cl.Cluster, lines: int, output: str) -> tuple[float, int]:
    c.output = output
    sink = CountingSink()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sink):
        c.run(talk, lines)
    return time.perf_counter() - t0, sink.lines


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--world-size", type=arguments.integer(1, MAX_WORLD_SIZE), default=4, help="ranks (default 4)")
    ap.add_argument("--lines", type=arguments.integer(1, 100000000), default=200_000, help="lines per rank")
    ap.add_argument("--output", default="both", choices=("ordered", "live", "both"), help="modes timed")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI (overrides the sizes)")
    a = ap.parse_args()
    if a.quick:
        vars(a).update(world_size=2, lines=5000)
    # "ordered" holds every rank's lines in this process until the run ends: ~100 bytes a line as Python strings
    ap.check_memory(a.world_size, 100 * a.lines * 2, f"--lines {a.lines}")
    modes = ("ordered", "live") if a.output == "both" else (a.output,)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} cores, load average {load:.2f}; world_size={a.world_size}, "
          f"{a.lines} lines per rank; commlib from {os.path.dirname(cl.__file__)}")
    with cl.Cluster(world_size=a.world_size, timeout=3600) as c:
        measure(c, 1000, "ordered")  # warm-up
        for mode in modes:
            wall, seen = measure(c, a.lines, mode)
            assert seen == a.lines * a.world_size, f"{seen} lines arrived, expected {a.lines * a.world_size}"
            print(f"output={mode:8s} {wall:8.2f} s   {a.lines / wall:10.0f} lines/s per rank   "
                  f"{seen / wall:10.0f} lines/s in all")


if __name__ == "__main__":
    main()
