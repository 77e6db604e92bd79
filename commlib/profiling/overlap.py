"""Step 3 of the source chapter, per rank: how much of its communication ran under compute, and how much the step
waited for it. The one place a walk of a rank's spans meets cost/intervals.py.

    o, beside = measure(rank, waits)    # waits: stragglers.find's; beside: per call, the compute under it (us)
    o = overlap(rank)                   # the same record, without the waiting

o (in us): comm_us (the union of its calls), hidden_us (under compute), exposed_us, compute_us, idle_us (no
kernel, memcpy or memset: busy as Holistic Trace Analysis and Nsight count it), wall_us and, where waits are
given, waiting_us: the union of each call's first wait_us (it arrived, then waited for the last peer), part of
the rank's communication time and never more, however its calls overlap.
"""

from __future__ import annotations

import numpy as np

from commlib.cost.intervals import length, overlap_length, overlap_lengths, union, union_array
from commlib.profiling.traces import RankTrace


def overlap(rank: RankTrace) -> dict:
    """The rank's overlap record (module docstring), without waiting_us."""
    return measure(rank)[0]


def measure(rank: RankTrace, waits: dict | None = None) -> tuple[dict, list[float]]:
    """-> (the rank's overlap record, the compute that ran during each of its calls, in call order). waits:
    {(rank, start_us): (wait_us, late rank)} (stragglers.find's); None leaves waiting_us out."""
    spans = [(c.start_us, c.end_us) for c in rank.calls]
    comm = union(spans)
    compute = union_array(rank.compute)   # arrays: 200k spans a rank, never a list of tuples
    # the compute that ran during each call (by bisect and prefix sums: linear in all)
    beside = overlap_lengths(spans, compute).tolist()
    parts = [np.asarray(x, dtype=float).reshape(-1, 2) for x in (rank.compute, rank.copies) if x is not None]
    busy = union_array(np.concatenate(parts))   # kernels, memcpy and memset
    hidden = overlap_length(comm, compute)
    wall = rank.wall[1] - rank.wall[0]
    # busy or communicating: |comm| + |busy| - |comm and busy| (a union of a few calls and many kernels)
    active = length(comm) + length(busy) - overlap_length(comm, busy)
    out = {"comm_us": length(comm), "hidden_us": hidden, "exposed_us": length(comm) - hidden,
           "compute_us": length(compute), "idle_us": max(0.0, wall - active), "wall_us": wall}
    if waits is not None:
        waited = ((c.start_us, c.start_us + w) for c in rank.calls
                  for w in [(waits.get((c.rank, c.start_us)) or (0.0,))[0]] if w)
        out["waiting_us"] = length(union(waited))
    return out, beside
