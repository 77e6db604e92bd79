"""Where a rank's training steps begin and end in its trace: commlib's own commlib:step marks (its jobs record
several steps in one profiler step), else the profiler's ProfilerStep#N marks, else, in a trace recorded without a
schedule (no marks), the ends of torch.optim's optimizer steps."""

import math

from commlib.profiling.read.records import COMMLIB_STEP, OPTIMIZER_STEP, PROFILER_STEP


def step_spans(cpu, wall: tuple[float, float]) -> list[tuple[float, float]]:
    """The training steps (start, end) us: each commlib:step, else each ProfilerStep#N; in a trace without them
    (a profiler run with no schedule), each step ends where an optimizer step (torch.optim's Optimizer.step#...)
    ends, the first from the trace's start. Outermost spans only (an optimizer's step may call another's)."""
    import numpy as np

    kinds = np.asarray(cpu.kinds, dtype=np.uint8)   # 200k ops: masks, not a Python loop per op
    start, end = np.asarray(cpu.start, dtype=float), np.asarray(cpu.end, dtype=float)

    def marked(bit):
        at = np.flatnonzero(kinds & bit).tolist()
        return [(start[i], end[i]) for i in at]

    for mark in (COMMLIB_STEP, PROFILER_STEP):
        steps = sorted(set(marked(mark)))
        if steps:
            return [(float(s), float(e)) for s, e in steps]
    ends, last = [], -math.inf
    for s, e in sorted(marked(OPTIMIZER_STEP)):
        if s >= last:   # not nested in the one before
            ends.append(float(e))
            last = e
    return list(zip([wall[0], *ends[:-1]], ends)) if ends else []
