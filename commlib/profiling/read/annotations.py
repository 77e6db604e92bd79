"""commlib's own collectives in a trace: the work of algorithms.background (`commlib:<op> bytes=.. dtype=..
group=.. size=.. algorithm=.. seq=..`, written into the trace by traces.record) and the marks the profiler
recorded on the issuing thread: `commlib:queue seq=..` (when it was queued) and `commlib:wait seq=..` (the
wait that needed its result). torch.profiler cannot record a Python thread's operators, so the fields are in
the names; what the name states is taken as stated (the algorithm too: the job chose it).

    calls, threads, issued, waits = commlib_calls(rank, rec.comm_ops)   # threads: (tid, seq) per call
"""

from __future__ import annotations

import re

WORK = re.compile(r"commlib:(\w+) bytes=(\d+) dtype=(\w+) group=(\S+) size=(\d+) algorithm=(\S+) seq=(\d+)$")
MARK = re.compile(r"commlib:(queue|wait) seq=(\d+)$")
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all")


def commlib_calls(rank, events, call_type) -> tuple[list, list, dict, dict]:
    """The commlib:* work among events (any order) as call_type (traces.Call) objects in start order, with each
    call's (thread, seq), queue time and wait span ({call index: ...}) where the trace has the marks."""
    works = sorted(((e, m) for e in events if e.name.startswith("commlib:") and (m := WORK.match(e.name))
                    and m.group(1) in OPS), key=lambda x: x[0].ts)
    if not works:
        return [], [], {}, {}
    queued, waited = {}, {}
    for e in events:
        m = MARK.match(e.name) if e.name.startswith("commlib:") else None
        if m and m.group(1) == "queue":
            queued.setdefault(int(m.group(2)), e.ts)
        elif m:
            waited.setdefault(int(m.group(2)), (e.ts, e.ts + e.dur))
    calls, threads, issued, waits = [], [], {}, {}
    for i, (e, m) in enumerate(works):
        op, nbytes, dtype, group, size, algorithm, seq = m.groups()
        seq = int(seq)
        calls.append(call_type(rank, op, group, int(size), int(nbytes), dtype, e.ts, e.dur, algorithm, None, None))
        threads.append((e.tid, seq))
        if seq in queued:
            issued[i] = queued[seq]
        if seq in waited:
            waits[i] = waited[seq]
    return calls, threads, issued, waits
